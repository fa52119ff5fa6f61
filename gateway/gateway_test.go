package gateway_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/gateway"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

const (
	secret   = "sk-test-1234567890"
	value    = "Bearer " + secret
	scrubbed = "[secret API_KEY]"
)

// sandboxAddr is the client address of requests served directly.
var sandboxAddr = netip.MustParseAddr("10.88.0.3")

// resolver is a fake Resolver: binding "api" goes to upstream, for the
// client it was made for and 127.0.0.1 (a real client); others are
// not_found.
type resolver struct {
	upstream *url.URL
	err      error
}

func (r resolver) Route(_ context.Context, client netip.Addr, binding string) (gateway.Route, error) {
	if r.err != nil {
		return gateway.Route{}, r.err
	}
	if binding != "api" || (client != sandboxAddr && !client.IsLoopback()) {
		return gateway.Route{}, sandbox.Errorf(sandbox.CodeNotFound, "binding %q not found", binding).WithHint("bind it first")
	}
	return gateway.Route{Upstream: r.upstream, Header: "Authorization", Value: []byte(value), Secret: []byte(secret), SecretName: "API_KEY"}, nil
}

// seen is a request as the upstream received it.
type seen struct {
	host   string
	path   string
	query  string
	header http.Header
}

// upstream starts h behind a recorder of the requests it gets, and
// returns its URL with path as the prefix.
func upstream(t *testing.T, path string, h http.HandlerFunc) (*url.URL, func() seen) {
	t.Helper()
	var (
		mu   sync.Mutex
		last seen
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		last = seen{host: r.Host, path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone()}
		mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	return u, func() seen { mu.Lock(); defer mu.Unlock(); return last }
}

func echoAuth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Echo", r.Header.Get("Authorization"))
	io.WriteString(w, "auth="+r.Header.Get("Authorization")+" raw="+secret)
}

// serve makes one request of a sandbox at sandboxAddr, to host and target.
func serve(t *testing.T, g http.Handler, method, host, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	req.Host = host
	req.RemoteAddr = netip.AddrPortFrom(sandboxAddr, 40000).String()
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	return rec
}

// wireError decodes an error body.
func wireError(t *testing.T, body []byte) sandbox.WireError {
	t.Helper()
	var b struct {
		Error sandbox.WireError `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return b.Error
}

func TestHeaderInjected(t *testing.T) {
	u, last := upstream(t, "/v1", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}})
	rec := serve(t, g, "POST", "API.hearth.internal.:80", "/chat/completions?model=m&stream=true", http.Header{
		"authorization":       {"Bearer forged"}, // not canonical: dropped all the same
		"Proxy-Authorization": {"Basic x"},
		"X-Forwarded-For":     {"1.2.3.4"},
		"X-Forwarded-Host":    {"evil"},
		"Forwarded":           {"for=1.2.3.4"},
		"X-Custom":            {"kept"},
	})
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("response %d %q, want 200 \"ok\"", rec.Code, rec.Body)
	}
	s := last()
	if got := s.header.Values("Authorization"); len(got) != 1 || got[0] != value {
		t.Errorf("upstream got Authorization %q, want only %q", got, value)
	}
	for _, h := range []string{"authorization", "Proxy-Authorization", "X-Forwarded-For", "X-Forwarded-Host", "Forwarded"} {
		if v, ok := s.header[h]; ok {
			t.Errorf("upstream got %s: %q, want none", h, v)
		}
	}
	if s.header.Get("X-Custom") != "kept" {
		t.Errorf("upstream got X-Custom %q, want %q", s.header.Get("X-Custom"), "kept")
	}
	if s.path != "/v1/chat/completions" || s.query != "model=m&stream=true" {
		t.Errorf("upstream got %s?%s, want /v1/chat/completions?model=m&stream=true", s.path, s.query)
	}
	if s.host != u.Host {
		t.Errorf("upstream got Host %q, want %q", s.host, u.Host)
	}
}

func TestPathJoin(t *testing.T) {
	for _, tc := range []struct{ prefix, target, want string }{
		{"", "/x", "/x"},
		{"/v1", "/x/y", "/v1/x/y"},
		{"/v1/", "/x", "/v1/x"},
		{"/v1", "/", "/v1/"},
		{"/v1", "/a%2Fb", "/v1/a/b"},
	} {
		u, last := upstream(t, tc.prefix, func(http.ResponseWriter, *http.Request) {})
		g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}})
		if rec := serve(t, g, "GET", "api.hearth.internal", tc.target, nil); rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d, want 200", tc.target, rec.Code)
		}
		if got := last().path; got != tc.want {
			t.Errorf("prefix %q, GET %s: upstream got path %q, want %q", tc.prefix, tc.target, got, tc.want)
		}
	}
}

func TestErrors(t *testing.T) {
	u, _ := upstream(t, "", echoAuth)
	notLoopback := func(a netip.Addr) bool { return !a.IsLoopback() }
	for _, tc := range []struct {
		name       string
		opts       gateway.Options
		host, path string
		status     int
		code       sandbox.Code
		message    string // a part of it
	}{
		{"not a binding's host", gateway.Options{}, "example.com", "/", 404, sandbox.CodeNotFound, `"example.com"`},
		{"a bare domain", gateway.Options{}, "hearth.internal", "/", 404, sandbox.CodeNotFound, "hearth.internal"},
		{"two labels", gateway.Options{}, "a.b.hearth.internal", "/", 404, sandbox.CodeNotFound, "a.b.hearth.internal"},
		{"unknown binding", gateway.Options{}, "nope.hearth.internal", "/", 404, sandbox.CodeNotFound, `binding "nope" not found`},
		{"client not allowed", gateway.Options{Allowed: func(a netip.Addr) bool { return a.IsLoopback() }}, "api.hearth.internal", "/", 403, sandbox.CodePermissionDenied, "10.88.0.3"},
		{"a dot-dot segment", gateway.Options{}, "api.hearth.internal", "/v1/../admin", 400, sandbox.CodeInvalidArgument, ".."},
		{"an encoded dot-dot segment", gateway.Options{}, "api.hearth.internal", "/v1/%2e%2e/admin", 400, sandbox.CodeInvalidArgument, ".."},
		{"resolver fails", gateway.Options{Resolver: resolver{err: errors.New("disk on fire at /var/lib/hearth")}}, "api.hearth.internal", "/", 502, sandbox.CodeInternal, "internal error"},
		{"resolver says limited", gateway.Options{Resolver: resolver{err: sandbox.Errorf(sandbox.CodeRateLimited, "slow down").WithHint("wait")}}, "api.hearth.internal", "/", 429, sandbox.CodeRateLimited, "slow down"},
		{"no resolver", gateway.Options{Resolver: nil}, "api.hearth.internal", "/", 502, sandbox.CodeInternal, "internal error"},
		{"upstream denied", gateway.Options{Deny: netip.Addr.IsLoopback}, "api.hearth.internal", "/", 502, sandbox.CodePermissionDenied, "127.0.0.1"},
		{"CONNECT", gateway.Options{}, "api.hearth.internal", "/", 400, sandbox.CodeInvalidArgument, "CONNECT"},
		{"upstream allowed by deny", gateway.Options{Deny: notLoopback}, "api.hearth.internal", "/", 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if opts.Resolver == nil && tc.name != "no resolver" {
				opts.Resolver = resolver{upstream: u}
			}
			var res []gateway.Result
			opts.OnRequest = func(r gateway.Result) { res = append(res, r) }
			method := "GET"
			if tc.name == "CONNECT" {
				method = "CONNECT"
			}
			rec := serve(t, gateway.New(opts), method, tc.host, tc.path, nil)
			if rec.Code != tc.status {
				t.Fatalf("GET %s%s = %d %s, want %d", tc.host, tc.path, rec.Code, rec.Body, tc.status)
			}
			if len(res) != 1 || res[0].Status != tc.status || res[0].Code != tc.code {
				t.Errorf("OnRequest got %+v, want one with status %d, code %q", res, tc.status, tc.code)
			}
			if tc.code == "" {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			e := wireError(t, rec.Body.Bytes())
			if e.Code != tc.code || !strings.Contains(e.Message, tc.message) || e.Hint == "" {
				t.Errorf("error %+v, want code %q, a message with %q, a hint", e, tc.code, tc.message)
			}
			if strings.Contains(rec.Body.String(), "disk on fire") {
				t.Errorf("error body %s shows the resolver's cause", rec.Body)
			}
		})
	}
}

func TestResponseScrubbed(t *testing.T) {
	u, _ := upstream(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		w.Header().Set("Location", "/next?key="+secret)
		w.Header().Set("Content-Length", "2000") // wrong once scrubbed
		w.WriteHeader(http.StatusFound)
		io.WriteString(w, "auth="+r.Header.Get("Authorization")+" raw="+secret+strings.Repeat(".", 2000-len(value)-len(secret)-10))
	})
	g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}})
	rec := serve(t, g, "GET", "api.hearth.internal", "/", nil)
	if rec.Code != http.StatusFound {
		t.Fatalf("status %d, want the upstream's redirect, not followed", rec.Code)
	}
	if got := rec.Header().Get("X-Echo"); got != scrubbed {
		t.Errorf("X-Echo %q, want %q", got, scrubbed)
	}
	if got, want := rec.Header().Get("Location"), "/next?key="+scrubbed; got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
	if cl := rec.Header().Get("Content-Length"); cl != "" {
		t.Errorf("Content-Length %q, want none: the body was scrubbed", cl)
	}
	body := rec.Body.String()
	if want := "auth=" + scrubbed + " raw=" + scrubbed + "...."; !strings.HasPrefix(body, want) || strings.Contains(body, secret) {
		t.Errorf("body %.60q…, want it to start %q and not hold the secret", body, want)
	}
}

// TestResponseEncoded checks that a gzip response is scrubbed (the
// gateway decodes it) and that one it cannot decode is refused.
func TestResponseEncoded(t *testing.T) {
	u, last := upstream(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/br" {
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "opaque "+secret)
			return
		}
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			io.WriteString(w, "plain "+secret)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		io.WriteString(z, "zipped "+secret)
		z.Close()
	})
	g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}})
	rec := serve(t, g, "GET", "api.hearth.internal", "/gz", http.Header{"Accept-Encoding": {"br, deflate"}})
	if got, want := rec.Body.String(), "zipped "+scrubbed; rec.Code != 200 || got != want {
		t.Errorf("gzip: %d %q, want 200 %q", rec.Code, got, want)
	}
	if ae := last().header.Get("Accept-Encoding"); ae != "gzip" {
		t.Errorf("upstream got Accept-Encoding %q, want the gateway's own %q", ae, "gzip")
	}
	rec = serve(t, g, "GET", "api.hearth.internal", "/br", nil)
	if rec.Code != http.StatusBadGateway || strings.Contains(rec.Body.String(), secret) {
		t.Fatalf("br: %d %q, want 502 without the secret", rec.Code, rec.Body)
	}
	if e := wireError(t, rec.Body.Bytes()); e.Code != sandbox.CodeUnavailable || !strings.Contains(e.Message, `"br"`) {
		t.Errorf("br: error %+v, want unavailable naming the encoding", e)
	}
}

// gatewayServer serves g over real HTTP; its clients are 127.0.0.1.
func gatewayServer(t *testing.T, g http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, ctx context.Context, base, path string) *http.Response {
	t.Helper()
	return send(t, ctx, "GET", base, path, nil)
}

// send is one request of a sandbox through the gateway at base.
func send(t *testing.T, ctx context.Context, method, base, path string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "api.hearth.internal"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestStreaming checks that what the upstream flushes reaches the sandbox
// before the upstream is done, and that a value split across two such
// chunks is still scrubbed: the upstream sends its second half only once
// the sandbox has read what came before the first.
func TestStreaming(t *testing.T) {
	next := make(chan struct{})
	u, _ := upstream(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\ndata: "+value[:10])
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, value[10:]+"\n\ndata: end "+secret[:3]+"\n\n")
		w.Header().Set(http.TrailerPrefix+"X-Sig", secret)
	})
	g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}, Allowed: netip.Addr.IsLoopback})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a failure, not a hang
	defer cancel()
	resp := get(t, ctx, gatewayServer(t, g), "/events")
	br := bufio.NewReader(resp.Body)
	got := ""
	for want := "data: first\n\ndata: "; got != want; {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("read %q, then %v; want %q before the upstream is done", got, err, want)
		}
		got += string(b)
		if !strings.HasPrefix(want, got) {
			t.Fatalf("read %q, want %q", got, want)
		}
	}
	close(next)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if want := scrubbed + "\n\ndata: end sk-\n\n"; string(rest) != want {
		t.Errorf("then read %q, want %q", rest, want)
	}
	if got := resp.Trailer.Get("X-Sig"); got != scrubbed {
		t.Errorf("trailer X-Sig %q, want %q", got, scrubbed)
	}
}

func TestWebSocket(t *testing.T) {
	u, last := upstream(t, "/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		typ, msg, err := c.Read(r.Context())
		if err != nil {
			return
		}
		c.Write(r.Context(), typ, append([]byte("echo "), msg...))
		c.Close(websocket.StatusNormalClosure, "")
	})
	var (
		mu  sync.Mutex
		res []gateway.Result
	)
	g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}, OnRequest: func(r gateway.Result) { mu.Lock(); res = append(res, r); mu.Unlock() }})
	base := gatewayServer(t, g)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/socket", &websocket.DialOptions{Host: "api.hearth.internal"})
	if err != nil {
		t.Fatalf("Dial through the gateway: %v", err)
	}
	defer c.CloseNow()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("handshake status %d, want 101", resp.StatusCode)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := c.Read(ctx)
	if err != nil || string(msg) != "echo hi" {
		t.Fatalf("Read = %q, %v; want %q", msg, err, "echo hi")
	}
	c.Close(websocket.StatusNormalClosure, "")
	s := last()
	if s.path != "/ws/socket" || s.header.Get("Authorization") != value {
		t.Errorf("upstream handshake to %s with Authorization %q, want /ws/socket with %q", s.path, s.header.Get("Authorization"), value)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(res) == 1 })
	if res[0].Status != http.StatusSwitchingProtocols || res[0].Binding != "api" || res[0].Code != "" {
		t.Errorf("OnRequest got %+v, want status 101 for binding api", res[0])
	}
}

func TestOnRequest(t *testing.T) {
	u, _ := upstream(t, "", echoAuth)
	var res []gateway.Result
	g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}, OnRequest: func(r gateway.Result) { res = append(res, r) }})
	rec := serve(t, g, "GET", "api.hearth.internal", "/", nil)
	want := gateway.Result{Binding: "api", Client: sandboxAddr, Upstream: u.Host, Status: 200, Bytes: int64(rec.Body.Len())}
	if len(res) != 1 || res[0] != want {
		t.Errorf("OnRequest got %+v, want once %+v", res, want)
	}
	if want.Bytes == 0 {
		t.Error("empty body: Bytes was not tested")
	}
}

// waitFor polls cond, which a request's end makes true after the client
// has its response.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met in 2s")
}

// TestStreamAfterBody: an upstream that reads a request's body whole and
// then streams its answer reaches the sandbox whole, however late the
// gateway's transport finishes with the body (the gateway's server used
// to close the body once the upstream's header went out, and the
// transport's late read then tore the answer down).
func TestStreamAfterBody(t *testing.T) {
	u, _ := upstream(t, "", func(w http.ResponseWriter, r *http.Request) {
		if b, err := io.ReadAll(r.Body); err != nil || string(b) != `{"q":1}` {
			t.Errorf("the upstream read %q, %v", b, err)
		}
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		time.Sleep(200 * time.Millisecond)
		io.WriteString(w, "last\n")
	})
	g := gateway.New(gateway.Options{Resolver: resolver{upstream: u}, Allowed: netip.Addr.IsLoopback})
	base := gatewayServer(t, testenv.LateTail(g, 100*time.Millisecond))
	resp := send(t, t.Context(), "POST", base, "/v1/chat", strings.NewReader(`{"q":1}`))
	if got, err := io.ReadAll(resp.Body); err != nil || string(got) != "first\nlast\n" {
		t.Errorf("the sandbox read %q, %v; want the upstream's whole answer", got, err)
	}
}
