package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
)

// httpConnect opens a Streamable HTTP session with the door at url/mcp,
// sending token.
func httpConnect(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: bearer(token), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// post sends one JSON-RPC message to url/mcp with the headers.
func post(t *testing.T, url string, body string, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const listTools = `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`

// TestHTTP drives the door over Streamable HTTP, mounted in the API: the
// tools work with a bearer token, and the calls are audited as door mcp.
func TestHTTP(t *testing.T) {
	e := newEnv(t, mcpserver.Options{})
	cs := httpConnect(t, e.url, tokenA1)
	mustCall(t, cs, "sandbox_create", map[string]any{"name": "box"}, nil)
	var ls struct {
		Sandboxes []struct{ Name string }
	}
	mustCall(t, cs, "sandbox_list", nil, &ls)
	if len(ls.Sandboxes) != 1 || ls.Sandboxes[0].Name != "agent-a1-box" {
		t.Fatalf("sandbox_list over HTTP = %+v", ls)
	}
	var te toolError
	if res := call(t, cs, "sandbox_destroy", map[string]any{"sandbox": "nope"}, &te); !res.IsError || te.Code != sandbox.CodeNotFound {
		t.Errorf("sandbox_destroy(nope) over HTTP = %s %+v", text(res), te)
	}

	if err := e.recorder.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	events, err := e.db.Audit().List(t.Context(), sandbox.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// One event per tool call, named as the API names the operation, the
	// sandbox as the caller's reference resolves; the HTTP requests that
	// carried them are not events of their own.
	want := []struct {
		verb, sandbox string
		code          sandbox.Code
	}{{"sandbox.create", "agent-a1-box", ""}, {"sandbox.list", "", ""}, {"sandbox.destroy", "agent-a1-nope", sandbox.CodeNotFound}}
	if len(events) != len(want) {
		t.Fatalf("audit = %+v; want %d tool calls", events, len(want))
	}
	for i, ev := range events {
		w := want[i]
		if ev.Door != sandbox.DoorMCP || ev.Verb != w.verb || ev.Sandbox != w.sandbox || ev.Code != w.code || ev.Agent != "a1" || ev.TokenID != "tok-a1" {
			t.Errorf("audit event %d = %+v; want door mcp, verb %s, sandbox %q, code %q, agent a1 by tok-a1", i, ev, w.verb, w.sandbox, w.code)
		}
	}
}

// TestHTTPAuth checks the refusals: no or a bad token (401, WWW-Authenticate,
// the API's error body), a session used with another token, a foreign
// Origin; and that no OAuth metadata is served.
func TestHTTPAuth(t *testing.T) {
	e := newEnv(t, mcpserver.Options{AllowedOrigins: []string{"https://app.example.com"}})
	standalone := httptest.NewServer(e.alone())
	t.Cleanup(standalone.Close)
	for _, url := range []string{e.url, standalone.URL} {
		for _, auth := range []string{"", "Bearer hearth_nope", "Basic " + tokenA1} {
			resp := post(t, url, listTools, map[string]string{"Authorization": auth})
			var body struct {
				Error struct {
					Code    sandbox.Code `json:"code"`
					Message string       `json:"message"`
				} `json:"error"`
			}
			json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != "Bearer" || body.Error.Code != sandbox.CodeUnauthenticated {
				t.Errorf("%s with Authorization %q = %d, WWW-Authenticate %q, %+v; want 401, Bearer, unauthenticated",
					url, auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
			}
		}

		// A session belongs to the token that opened it.
		cs := httpConnect(t, url, tokenA1)
		session := map[string]string{"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": cs.InitializeResult().ProtocolVersion}
		session["Authorization"] = "Bearer " + tokenA2
		if resp := post(t, url, listTools, session); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: a1's session with a2's token = %d; want 403", url, resp.StatusCode)
		}
		session["Authorization"] = "Bearer " + tokenA1
		if resp := post(t, url, listTools, session); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: a1's session with a1's token = %d; want 200", url, resp.StatusCode)
		}

		for origin, want := range map[string]int{
			"https://evil.example.com": http.StatusForbidden,
			"null":                     http.StatusForbidden,
			"http://localhost:5173":    http.StatusOK,
			"http://127.0.0.1:9":       http.StatusOK,
			"https://app.example.com":  http.StatusOK,
			strings.Replace(url, "127.0.0.1", "localhost", 1): http.StatusOK,
		} {
			session["Origin"] = origin
			if resp := post(t, url, listTools, session); resp.StatusCode != want {
				t.Errorf("%s: Origin %s = %d; want %d", url, origin, resp.StatusCode, want)
			}
		}
	}

	// No OAuth protected-resource metadata: clients use the static token.
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"} {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d; want 404", path, resp.StatusCode)
		}
	}
}
