package spritesapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/testutil/daemontest"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestBodiesRefusedBeforeReading: a body about a sprite the caller cannot
// see, a file write whose Content-Length is over the daemon's limit and a
// JSON body whose Content-Length is over 1 MiB are all answered without a
// byte of them read; a body that is no JSON object is invalid_argument.
func TestBodiesRefusedBeforeReading(t *testing.T) {
	var read *atomic.Int64
	e := newEnvWith(t, daemontest.Options{MaxWriteBytes: 1 << 20}, door.Options{}, func(h http.Handler) http.Handler { h, read = testenv.CountBodies(h); return h })
	e.create(t, tok, "box")
	e.create(t, daemontest.TokenA2, "theirs")
	big := strings.Repeat("x", 2<<20)
	write := func(name string) string {
		return "/v1/sprites/" + name + "/fs/write?" + url.Values{"path": {"/tmp/f"}}.Encode()
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"PUT", write("theirs"), big, http.StatusNotFound, "not_found"},
		{"PUT", write("nosuch"), big, http.StatusNotFound, "not_found"},
		{"PUT", write("box"), big, http.StatusRequestEntityTooLarge, "EFBIG"},
		{"POST", "/v1/sprites/theirs/exec?cmd=cat&stdin=true", big, http.StatusNotFound, "not_found"},
		{"PUT", "/v1/sprites/theirs", `{"labels":["` + big + `"]}`, http.StatusNotFound, "not_found"},
		{"POST", "/v1/sprites/theirs/fs/rename", `{"source":"` + big + `"}`, http.StatusNotFound, "not_found"},
		{"POST", "/v1/sprites/theirs/checkpoint", `{"comment":"` + big + `"}`, http.StatusNotFound, "not_found"},
		{"PUT", "/v1/sprites/box", `{"labels":["` + big + `"]}`, http.StatusRequestEntityTooLarge, "too_large"},
		{"POST", "/v1/sprites", `{"name":"` + big + `"}`, http.StatusRequestEntityTooLarge, "too_large"},
	} {
		read.Store(0)
		e.wantError(t, tc.status, tc.code, tc.method, tc.path, tok, tc.body)
		if n := read.Load(); n != 0 {
			t.Errorf("%s %s: the door read %d bytes of the body; want none", tc.method, tc.path, n)
		}
	}
	for _, body := range []string{`null`, `[]`, `7`, `"x"`} {
		e.wantError(t, http.StatusBadRequest, "invalid_argument", "POST", "/v1/sprites", tok, body)
	}
}

// TestOverflowingNumbers: durations and sizes too large to hold are
// refused as such, never taken for small or negative ones.
func TestOverflowingNumbers(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	ae := e.wantError(t, http.StatusBadRequest, "invalid_argument", "POST", "/v1/sprites/box/exec?cmd=true&max_run_after_disconnect=1e30", tok, "")
	if !strings.Contains(ae.Message, "too long") {
		t.Errorf("max_run_after_disconnect=1e30: %+v; want too long", ae)
	}
	// cpus × 1000 overflows an int64: no size holds it.
	e.wantError(t, http.StatusBadRequest, "invalid_argument", "POST", "/v1/sprites", tok, `{"name":"huge","config":{"cpus":9300000000000000}}`)
}

// TestConnectionLimit: the door's exec streams count against the caller's
// connections; at the limit the caller gets 429 with the limit and its
// count where the SDKs read them, and another caller is unaffected.
func TestConnectionLimit(t *testing.T) {
	e := newEnvWith(t, daemontest.Options{}, door.Options{MaxConnections: 1}, nil)
	e.create(t, tok, "box")
	e.create(t, daemontest.TokenA2, "box")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(e.url, "http") + "/v1/sprites/box/exec?cmd=sleep&cmd=30"
	dial := func(token string) (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	}
	held, _, err := dial(tok)
	if err != nil {
		t.Fatal(err)
	}
	defer held.CloseNow()
	ae := e.wantError(t, http.StatusTooManyRequests, "rate_limited", "GET", "/v1/sprites/box/fs/read?path=/etc/hostname", tok, "")
	if ae.Limit == nil || *ae.Limit != 1 || ae.CurrentCount == nil || *ae.CurrentCount != 1 {
		t.Errorf("at the limit: %+v; want limit 1 and current_count 1", ae)
	}
	other, _, err := dial(daemontest.TokenA2)
	if err != nil {
		t.Fatalf("another caller's exec = %v; want it unaffected", err)
	}
	other.CloseNow()
}
