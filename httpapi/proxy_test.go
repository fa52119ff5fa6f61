package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// echoServer is a web server standing in for one started in a sandbox:
// under driver/fake the sandbox's loopback is the host's. It answers what
// it saw of each request as JSON, and echoes WebSocket messages at /ws.
func echoServer(t testing.TB) int {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, append([]byte("echo:"), msg...))
		}
	})
	// The subprotocols it was offered, as its first message.
	mux.HandleFunc("/wsproto", func(w http.ResponseWriter, r *http.Request) {
		offered := r.Header.Values("Sec-WebSocket-Protocol")
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"hearth.v1", "chat"}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.Write(r.Context(), websocket.MessageText, []byte(strings.Join(offered, "|")))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Write(make([]byte, n))
	})
	mux.HandleFunc("/steer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Hearth-Moved-To", "elsewhere")
		w.Header().Set("Hearth-Node", "n9")
		w.Header().Set("X-Kept", "yes")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"unavailable","message":"moved","details":{"moved_to":"elsewhere"}}}`)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %s\n", b)
		w.(http.Flusher).Flush()
		time.Sleep(200 * time.Millisecond)
		io.WriteString(w, "last\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{
			"path": r.URL.Path, "query": r.URL.RawQuery, "host": r.Host, "auth": r.Header.Get("Authorization"),
			"prefix": r.Header.Get("X-Forwarded-Prefix"), "method": r.Method,
		})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// seen is what echoServer saw.
type seen struct{ Path, Query, Host, Auth, Prefix, Method string }

// A sandbox's URL: requests reach the port inside it with their path,
// query and method, without hearth's token, behind a private-by-default
// gate; a public port needs no token; WebSockets pass through. The URL
// names the sandbox's tenant (TENANT%2FNAME): names are unique per tenant.
func TestProxy(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "web")
	port := echoServer(t)
	base := fmt.Sprintf("%s/v1/sandboxes/t1%%2Fagent-a1-web/proxy/%d", e.url, port)

	resp, body := testenv.Do(t, "POST", base+"/a/b%20c?x=1&y=2", tokenA1, "")
	var s seen
	if resp.StatusCode != 200 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("proxied POST = %d %s", resp.StatusCode, body)
	}
	if s.Path != "/a/b c" || s.Query != "x=1&y=2" || s.Method != "POST" || s.Auth != "" || s.Host != "localhost:"+strconv.Itoa(port) ||
		s.Prefix != fmt.Sprintf("/v1/sandboxes/t1%%2Fagent-a1-web/proxy/%d", port) {
		t.Errorf("the server saw %+v", s)
	}
	// The short name works for its owner too.
	if resp, body = testenv.Do(t, "GET", fmt.Sprintf("%s/v1/sandboxes/web/proxy/%d/", e.url, port), tokenA1, ""); resp.StatusCode != 200 {
		t.Errorf("proxy by short name = %d %s", resp.StatusCode, body)
	}
	// Private: no token is 401, another agent's is 404.
	resp, body = testenv.Do(t, "GET", base+"/", "", "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeUnauthenticated || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token = %d %s; want 401", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "GET", base+"/", tokenA2, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound {
		t.Errorf("another agent = %d %s; want 404", resp.StatusCode, body)
	}
	// A missing sandbox without a token is the same 401: nothing leaks.
	resp, body = testenv.Do(t, "GET", fmt.Sprintf("%s/v1/sandboxes/nope/proxy/%d/", e.url, port), "", "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeUnauthenticated {
		t.Errorf("missing sandbox, no token = %d %s; want 401", resp.StatusCode, body)
	}
	// Public.
	if _, err := e.client().Update(t.Context(), "web", sandbox.SandboxUpdate{PublicPorts: &[]int{port}}); err != nil {
		t.Fatal(err)
	}
	if resp, body = testenv.Do(t, "GET", base+"/open", "", ""); resp.StatusCode != 200 {
		t.Errorf("public port without a token = %d %s", resp.StatusCode, body)
	}
	// Without a token a bare name is an operators' sandbox: the tenant's
	// name does not reach it, so no tenant can stand in for another's URL.
	resp, body = testenv.Do(t, "GET", fmt.Sprintf("%s/v1/sandboxes/agent-a1-web/proxy/%d/open", e.url, port), "", "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeUnauthenticated {
		t.Errorf("public port by bare name, no token = %d %s; want 401", resp.StatusCode, body)
	}
	infos, err := e.client().Ports(t.Context(), "web", port)
	if i := slices.IndexFunc(infos, func(pi sandbox.PortInfo) bool { return pi.Port == port }); err != nil || i < 0 || infos[i].URL != base+"/" || !infos[i].Public {
		t.Errorf("Ports(web) = %+v, %v; want port %d public at %s/", infos, err, port, base)
	}
	// Without the trailing slash: a redirect to the root.
	req, _ := http.NewRequest("GET", base+"?q=1", nil)
	resp, err = http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusMovedPermanently || !strings.HasSuffix(loc, fmt.Sprintf("/proxy/%d/?q=1", port)) {
		t.Errorf("root without slash = %d to %q", resp.StatusCode, loc)
	}

	// A WebSocket through the proxy.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tokenA1}}})
	if err != nil {
		t.Fatalf("WebSocket through the proxy: %v", err)
	}
	defer ws.CloseNow()
	ws.Write(ctx, websocket.MessageText, []byte("hi"))
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "echo:hi" {
		t.Errorf("WebSocket echo = %q, %v", msg, err)
	}

	// A browser's WebSocket, its token a subprotocol: the sandbox's
	// server is offered the other subprotocols, never the token.
	bearer := "bearer." + base64.RawURLEncoding.EncodeToString([]byte(tokenA1))
	ws2, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/wsproto", &websocket.DialOptions{Subprotocols: []string{"chat", bearer}})
	if err != nil {
		t.Fatalf("WebSocket through the proxy with the token as a subprotocol: %v", err)
	}
	defer ws2.CloseNow()
	if _, msg, err := ws2.Read(ctx); err != nil || string(msg) != "chat" || strings.Contains(string(msg), tokenA1) {
		t.Errorf("the sandbox's server was offered %q, %v; want chat alone, no token", msg, err)
	}

	// Errors: nothing listening, a bad port.
	free := testenv.FreePort(t)
	resp, body = testenv.Do(t, "GET", fmt.Sprintf("%s/v1/sandboxes/web/proxy/%d/", e.url, free), tokenA1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeUnavailable || !strings.Contains(got.Message, strconv.Itoa(free)) {
		t.Errorf("nothing listening = %d %s; want unavailable naming the port", resp.StatusCode, body)
	}
	for _, bad := range []string{"0", "65536", "http"} {
		resp, body = testenv.Do(t, "GET", e.url+"/v1/sandboxes/web/proxy/"+bad+"/", tokenA1, "")
		if got := errorOf(t, resp, body); got.Code != sandbox.CodeInvalidArgument {
			t.Errorf("port %s = %d %s; want invalid_argument", bad, resp.StatusCode, body)
		}
	}
}

// A request to a sleeping sandbox's URL wakes it.
func TestProxyWakes(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "web")
	port := echoServer(t)
	if _, err := e.svc.Sandboxes.Sleep(t.Context(), agentA1, "web"); err != nil {
		t.Fatal(err)
	}
	if resp, body := testenv.Do(t, "GET", fmt.Sprintf("%s/v1/sandboxes/web/proxy/%d/", e.url, port), tokenA1, ""); resp.StatusCode != 200 {
		t.Fatalf("proxy to a sleeping sandbox = %d %s", resp.StatusCode, body)
	}
	if sb, err := e.svc.Sandboxes.Get(t.Context(), agentA1, "web"); err != nil || sb.Status != sandbox.StatusRunning {
		t.Errorf("after the request: %+v, %v; want running", sb.Status, err)
	}
}

// TestProxyStreamAfterBody: a server in a sandbox that reads a request's
// body whole and then streams its answer reaches the caller whole, however
// late the proxy's transport finishes with the body (the daemon's server
// used to close the body once the sandbox's header went out, and the
// transport's late read then tore the answer down).
func TestProxyStreamAfterBody(t *testing.T) {
	e := newEnv(t, envOptions{wrap: func(h http.Handler) http.Handler { return testenv.LateTail(h, 100*time.Millisecond) }})
	e.create(t, "web")
	port := echoServer(t)
	resp, body := testenv.Do(t, "POST", fmt.Sprintf("%s/v1/sandboxes/web/proxy/%d/stream", e.url, port), tokenA1, "hello")
	if resp.StatusCode != 200 || string(body) != "read hello\nlast\n" {
		t.Errorf("POST through the proxy = %d %q; want the server's whole answer", resp.StatusCode, body)
	}
}

// TestProxyStripsHearthHeaders: a sandbox's server cannot answer with
// hearth's own headers (the move that steers a forwarding node, the node
// headers): the proxy drops every Hearth- header of its answer, and keeps
// the rest.
func TestProxyStripsHearthHeaders(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "web")
	port := echoServer(t)
	resp, _ := testenv.Do(t, "GET", fmt.Sprintf("%s/v1/sandboxes/web/proxy/%d/steer", e.url, port), tokenA1, "")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Kept") != "yes" {
		t.Fatalf("proxied answer = %d, X-Kept %q; want the server's 503 and its own header", resp.StatusCode, resp.Header.Get("X-Kept"))
	}
	for k := range resp.Header {
		if strings.HasPrefix(k, "Hearth-") {
			t.Errorf("the sandbox's header %s = %q passed the proxy", k, resp.Header.Get(k))
		}
	}
}

// With a base domain, the host {port}-{name}.{tenant}.{domain} is a
// tenant's sandbox's URL; the ports route lists listening ports with their
// URLs.
func TestProxyHostAndPorts(t *testing.T) {
	e := newEnv(t, envOptions{api: httpapi.Options{BaseDomain: "sb.example.test"}})
	e.create(t, "web")
	port := echoServer(t)
	req, _ := http.NewRequest("GET", e.url+"/deep/path?z=9", nil)
	req.Host = fmt.Sprintf("%d-agent-a1-web.t1.sb.example.test", port)
	req.Header.Set("Authorization", "Bearer "+tokenA1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var s seen
	if resp.StatusCode != 200 || json.Unmarshal(body, &s) != nil || s.Path != "/deep/path" || s.Query != "z=9" {
		t.Errorf("by host = %d %s", resp.StatusCode, body)
	}

	infos, err := e.client().Ports(t.Context(), "web", 9999)
	if err != nil {
		t.Fatal(err)
	}
	var got, asked *sandbox.PortInfo
	for i := range infos {
		switch infos[i].Port {
		case port:
			got = &infos[i]
		case 9999:
			asked = &infos[i]
		}
	}
	if got == nil || !got.Listening || got.Address != "127.0.0.1" || got.URL != fmt.Sprintf("http://%d-agent-a1-web.t1.sb.example.test/", port) {
		t.Errorf("ports: the server's port = %+v (all: %+v)", got, infos)
	}
	if asked == nil || asked.Listening || asked.Public || asked.URL != "http://9999-agent-a1-web.t1.sb.example.test/" {
		t.Errorf("ports: the asked port = %+v", asked)
	}
}

// BenchmarkProxy: a small GET and a 16 MiB GET through the sandbox's URL
// (the API, the agent's stream, the server) next to the same requests
// straight to the server on the loopback, in the same run.
func BenchmarkProxy(b *testing.B) {
	e := newEnv(b, envOptions{})
	e.create(b, "web")
	port := echoServer(b)
	direct := fmt.Sprintf("http://127.0.0.1:%d", port)
	proxied := fmt.Sprintf("%s/v1/sandboxes/t1%%2Fagent-a1-web/proxy/%d", e.url, port)
	for _, c := range []struct{ name, url string }{
		{"direct/small", direct + "/"}, {"proxy/small", proxied + "/"},
		{"direct/16MiB", direct + "/big?n=16777216"}, {"proxy/16MiB", proxied + "/big?n=16777216"},
	} {
		b.Run(c.name, func(b *testing.B) {
			client := &http.Client{}
			for b.Loop() {
				req, _ := http.NewRequest("GET", c.url, nil)
				req.Header.Set("Authorization", "Bearer "+tokenA1)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s = %d", c.url, resp.StatusCode)
				}
				b.SetBytes(n)
			}
		})
	}
}
