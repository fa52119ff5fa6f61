package mcpserver_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// countingServer serves e's door alone, counting the bytes it reads of
// request bodies.
func countingServer(t *testing.T, e *env) (string, *atomic.Int64) {
	h, n := testenv.CountBodies(e.alone())
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL, n
}

// errorBody decodes the door's JSON error.
func errorBody(t *testing.T, resp *http.Response) sandbox.Error {
	t.Helper()
	var body struct{ Error sandbox.Error }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("error body: %v", err)
	}
	return body.Error
}

// TestHTTPBodies: a body is read only once its token is good, and never
// past the limit: a Content-Length over it is refused before a byte is
// read, a chunked body is cut at it.
func TestHTTPBodies(t *testing.T) {
	e := newEnv(t, mcpserver.Options{MaxBodyBytes: 64 << 10})
	url, read := countingServer(t, e)
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"` + strings.Repeat("x", 1<<20) + `"}}`

	resp := post(t, url, big, nil)
	if resp.StatusCode != http.StatusUnauthorized || read.Load() != 0 {
		t.Errorf("no token: %d after reading %d bytes; want 401 before reading", resp.StatusCode, read.Load())
	}
	read.Store(0)
	resp = post(t, url, big, map[string]string{"Authorization": "Bearer " + tokenA1})
	ae := errorBody(t, resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || ae.Code != sandbox.CodeTooLarge ||
		ae.Details["max_bytes"] != float64(64<<10) || ae.Details["size"] != float64(len(big)) || read.Load() != 0 {
		t.Errorf("oversized Content-Length: %d %+v after reading %d bytes; want 413 too_large with size and max_bytes, unread", resp.StatusCode, ae, read.Load())
	}

	read.Store(0)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/mcp", bufio.NewReader(strings.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+tokenA1)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ae := errorBody(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || ae.Code != sandbox.CodeTooLarge || read.Load() > 64<<10+1 {
		t.Errorf("oversized chunked body: %d %+v after reading %d bytes; want 413 too_large, read at most the limit", resp.StatusCode, ae, read.Load())
	}
}

// TestSessionLimit: a token holding its limit of sessions is refused
// another (429 rate_limited, limit and current_count); another token is
// not, and a closed session frees its place.
func TestSessionLimit(t *testing.T) {
	e := newEnv(t, mcpserver.Options{MaxSessions: 2})
	first := httpConnect(t, e.url, tokenA1)
	httpConnect(t, e.url, tokenA1)
	resp := post(t, e.url, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		map[string]string{"Authorization": "Bearer " + tokenA1})
	ae := errorBody(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests || ae.Code != sandbox.CodeRateLimited ||
		ae.Details["limit"] != 2.0 || ae.Details["current_count"] != 2.0 || ae.Hint == "" {
		t.Fatalf("third session = %d %+v; want 429 rate_limited with limit 2 and current_count 2", resp.StatusCode, ae)
	}
	// The sessions it holds keep working, and another token is unaffected.
	mustCall(t, first, "sandbox_list", nil, nil)
	mustCall(t, httpConnect(t, e.url, tokenA2), "sandbox_list", nil, nil)
	first.Close()
	// The server drops the session as it answers the client's DELETE,
	// which Close does not wait for.
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: bearer(tokenA1), MaxRetries: -1}, nil)
		if err == nil {
			cs.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a session after one was closed = %v; want it opened", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecArgumentBounds: sandbox_exec refuses a command over its limit
// and a timeout too long to hold, each with its numbers, before running
// anything.
func TestExecArgumentBounds(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	cs := e.connect(t, agentA1, nil)
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box"}, nil)
	for _, tc := range []struct {
		args map[string]any
		code sandbox.Code
		want string
	}{
		{map[string]any{"sandbox": "box", "command": "true", "timeout": 1e300}, sandbox.CodeInvalidArgument, "too long"},
		{map[string]any{"sandbox": "box", "command": "true", "timeout": "9999999999h"}, sandbox.CodeInvalidArgument, "too long"},
		{map[string]any{"sandbox": "box", "command": "touch ran #" + strings.Repeat("x", 300<<10)}, sandbox.CodeTooLarge, "limit"},
	} {
		var te toolError
		res := call(t, cs, "sandbox_exec", tc.args, &te)
		if !res.IsError || te.Code != tc.code || !strings.Contains(te.Message, tc.want) {
			t.Errorf("sandbox_exec(%.80v) = %s %+v; want %s saying %q", tc.args, text(res), te, tc.code, tc.want)
		}
	}
	var te toolError
	if res := call(t, cs, "sandbox_create", map[string]any{"name": "b2", "ttl": 1e30}, &te); !res.IsError || !strings.Contains(te.Message, "too long") {
		t.Errorf("sandbox_create(ttl 1e30) = %s %+v; want too long", text(res), te)
	}
}
