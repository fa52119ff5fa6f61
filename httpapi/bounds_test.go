package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// dialExec opens the exec WebSocket of sandbox name with token.
func dialExec(ctx context.Context, e *env, name, token string) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, e.url+"/v1/sandboxes/"+name+"/exec", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
}

// TestExecRefusedBeforeReading: an exec on a sandbox the caller cannot
// see (none of that name, another agent's) is refused at the handshake,
// so that not a byte of a first message is read; on the caller's own
// sandbox, a first message over the limit is refused as soon as the limit
// is passed, before the client has even finished sending it.
func TestExecRefusedBeforeReading(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "mine")
	if _, _, err := client.New(e.url, tokenA2, nil).Create(t.Context(), sandbox.CreateRequest{Name: "theirs"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, name := range []string{"nosuch", "agent-a2-theirs"} {
		conn, resp, err := dialExec(ctx, e, name, tokenA1)
		if err == nil {
			conn.CloseNow()
			t.Fatalf("dial exec of %s succeeded; want the handshake refused", name)
		}
		if resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("dial exec of %s = %v, %+v; want 404 before the upgrade", name, err, resp)
		}
	}

	conn, _, err := dialExec(ctx, e, "mine", tokenA1)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	w, err := conn.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	// Twice the limit (the client's writer keeps the tail of an unfinished
	// frame in its buffer), and the message never finished: a daemon that
	// waited for all of it would never answer.
	go w.Write([]byte(`{"shell":"` + strings.Repeat("x", 2*httpapi.DefaultMaxExecMessage)))
	_, data, err := conn.Read(ctx)
	if err != nil {
		t.Fatalf("no answer to an oversized first message left unfinished: %v", err)
	}
	var end endMessage
	if err := json.Unmarshal(data, &end); err != nil || end.Type != "error" || end.Error == nil || end.Error.Code != sandbox.CodeTooLarge ||
		end.Error.Details["max_bytes"] != float64(httpapi.DefaultMaxExecMessage) || !strings.Contains(end.Error.Hint, "shell_size") {
		t.Fatalf("answer %s (%v); want too_large with max_bytes %d and a hint to stream the script", data, err, httpapi.DefaultMaxExecMessage)
	}
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("close after an oversized first message = %v; want 1009", err)
	}
}

// TestExecSlowFirstMessage: a first message that trickles in is cut off
// at the start timeout.
func TestExecSlowFirstMessage(t *testing.T) {
	e := newEnv(t, envOptions{api: httpapi.Options{ExecStartTimeout: 300 * time.Millisecond}})
	e.create(t, "ex")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn, _, err := dialExec(ctx, e, "ex", tokenA1)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	w, _ := conn.Writer(ctx, websocket.MessageText)
	go func() {
		for _, b := range []byte(`{"argv":["true"]}`) {
			if _, err := w.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	start := time.Now()
	if _, _, err := conn.Read(ctx); err == nil {
		t.Fatal("the slow first message was answered; want the connection closed")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the connection was closed after %v; want about the 300ms start timeout", d)
	}
}

// TestExecStreamedScriptProtocol: a script may follow its request
// (shell_size, stream 5) and then stdin; every way of breaking that
// framing is a violation, and shell_size over the limit is too_large.
func TestExecStreamedScriptProtocol(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	script := "read line\necho \"got $line\"\n"
	half := len(script) / 2
	end, status, stdout := rawExec(t, e, text(fmt.Sprintf(`{"shell_size":%d,"stdin":true}`, len(script))),
		binary(append([]byte{5}, script[:half]...)...), binary(append([]byte{5}, script[half:]...)...),
		binary(0, 'h', 'i', '\n'), binary(4))
	if end.Type != "exit" || end.Result.ExitCode != 0 || status != websocket.StatusNormalClosure || stdout != "got hi\n" {
		t.Fatalf("streamed script = %+v, close %d, stdout %q; want exit 0 and \"got hi\"", end, status, stdout)
	}
	violations := map[string][]wsMsg{
		"script without shell_size":  {text(`{"shell":"sleep 5"}`), binary(5, 'x')},
		"script past its shell_size": {text(`{"shell_size":2}`), binary(5, 'a', 'b', 'c')},
		"stdin before the script":    {text(`{"shell_size":2,"stdin":true}`), binary(5, 'a'), binary(0, 'x')},
		"script after its end":       {text(`{"shell_size":1,"stdin":true}`), binary(5, ':'), binary(5, 'x')},
	}
	for name, msgs := range violations {
		end, status, _ := rawExec(t, e, msgs...)
		if end.Type != "error" || end.Error == nil || end.Error.Code != sandbox.CodeInvalidArgument || end.Error.Hint == "" || status != websocket.StatusPolicyViolation {
			t.Errorf("%s answered %+v, close %d; want an invalid_argument error with a hint, and 1008", name, end, status)
		}
	}
	end, _, _ = rawExec(t, e, text(fmt.Sprintf(`{"shell_size":%d}`, sandbox.MaxScriptBytes+1)))
	if end.Type != "error" || end.Error == nil || end.Error.Code != sandbox.CodeTooLarge || end.Error.Details["max_bytes"] != float64(sandbox.MaxScriptBytes) {
		t.Errorf("shell_size over the limit answered %+v; want too_large with max_bytes", end)
	}
	// A client that goes away in the middle of the script runs nothing.
	func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, _, err := dialExec(ctx, e, "ex", tokenA1)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(ctx, websocket.MessageText, []byte(`{"shell_size":100}`))
		conn.Write(ctx, websocket.MessageBinary, append([]byte{5}, "touch ran #"...))
		conn.CloseNow()
	}()
	time.Sleep(200 * time.Millisecond)
	var out strings.Builder
	if _, err := e.client().Exec(t.Context(), "ex", sandbox.ExecRequest{Shell: "test -e ran && echo ran || echo no"}, nil, &out, nil); err != nil || out.String() != "no\n" {
		t.Errorf("after a script cut short: %q, %v; want it never run", out.String(), err)
	}
}

// TestClientStreamsLargeScripts: the Go client sends a script over the
// request's limit after the request, and a script from a reader of the
// caller's; the daemon's request limit never sees it.
func TestClientStreamsLargeScripts(t *testing.T) {
	e := newEnv(t, envOptions{api: httpapi.Options{MaxExecMessage: 4 << 10}})
	e.create(t, "ex")
	c := e.client()
	script := strings.Repeat(": padding\n", 20_000) + "echo done\n" // 200 KB
	var out strings.Builder
	res, err := c.Exec(t.Context(), "ex", sandbox.ExecRequest{Shell: script}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("Exec(200 KB script) = %+v, %v, %q", res, err, out.String())
	}
	out.Reset()
	res, err = c.Exec(t.Context(), "ex", sandbox.ExecRequest{ShellSize: int64(len(script)), Script: strings.NewReader(script)}, strings.NewReader(""), &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("Exec(streamed from a reader, with stdin) = %+v, %v, %q", res, err, out.String())
	}
	_, err = c.Exec(t.Context(), "ex", sandbox.ExecRequest{ShellSize: int64(len(script)) + 1, Script: strings.NewReader(script)}, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "script ended after") {
		t.Errorf("Exec(script shorter than shell_size) = %v; want the client to say so", err)
	}
}

// TestConnectionLimit: a token holding its limit of long-lived
// connections is refused another with rate_limited (limit, current_count,
// a hint); another token is not, and a connection that ends frees its
// place.
func TestConnectionLimit(t *testing.T) {
	e := newEnv(t, envOptions{maxConnections: 2})
	e.create(t, "ex")
	if _, _, err := client.New(e.url, tokenA2, nil).Create(t.Context(), sandbox.CreateRequest{Name: "ex"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var held []*websocket.Conn
	for range 2 {
		conn, _, err := dialExec(ctx, e, "ex", tokenA1)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		held = append(held, conn)
	}
	_, resp, err := dialExec(ctx, e, "ex", tokenA1)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third exec stream = %v, %+v; want 429", err, resp)
	}
	resp, body := testenv.Do(t, "GET", e.url+"/v1/sandboxes/ex/fs/file?path=.profile", tokenA1, "")
	ae := errorOf(t, resp, body)
	if resp.StatusCode != http.StatusTooManyRequests || ae.Code != sandbox.CodeRateLimited ||
		ae.Details["limit"] != 2.0 || ae.Details["current_count"] != 2.0 || ae.Hint == "" {
		t.Fatalf("file read at the limit = %d %+v; want 429 rate_limited with limit 2, current_count 2 and a hint", resp.StatusCode, ae)
	}
	if resp, _ := testenv.Do(t, "GET", e.url+"/v1/sandboxes/ex/proxy/8080/", tokenA1, ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a request to the sandbox's URL at the limit = %d; want 429", resp.StatusCode)
	}
	if resp, _ := testenv.Do(t, "GET", e.url+"/v1/sandboxes/ex", tokenA1, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("a short call at the limit = %d; want 200 (only long-lived connections count)", resp.StatusCode)
	}
	other, _, err := dialExec(ctx, e, "ex", tokenA2)
	if err != nil {
		t.Fatalf("another token's exec stream = %v; want it unaffected", err)
	}
	other.CloseNow()
	held[0].CloseNow()
	var out strings.Builder
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.client().Exec(ctx, "ex", sandbox.ExecRequest{Argv: []string{"echo", "again"}}, nil, &out, nil)
		if err == nil {
			break
		}
		if !sandbox.IsCode(err, sandbox.CodeRateLimited) || time.Now().After(deadline) {
			t.Fatalf("exec after one stream closed = %v; want it served", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBodiesRefusedBeforeReading: a body about a sandbox the caller
// cannot see, and a body whose Content-Length is over the limit, are
// answered without a byte of them read; a chunked body is cut at the
// limit.
func TestBodiesRefusedBeforeReading(t *testing.T) {
	var read *atomic.Int64
	e := newEnv(t, envOptions{wrap: func(h http.Handler) http.Handler { h, read = testenv.CountBodies(h); return h }})
	if _, _, err := client.New(e.url, tokenA2, nil).Create(t.Context(), sandbox.CreateRequest{Name: "theirs"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 2<<20)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               sandbox.Code
	}{
		{"PATCH", "/v1/sandboxes/nosuch", `{"labels":["` + big + `"]}`, 404, sandbox.CodeNotFound},
		{"POST", "/v1/sandboxes/agent-a2-theirs/checkpoints", `{"label":"` + big + `"}`, 404, sandbox.CodeNotFound},
		{"POST", "/v1/sandboxes/agent-a2-theirs/fork", `{"checkpoint":"` + big + `"}`, 404, sandbox.CodeNotFound},
		{"PUT", "/v1/sandboxes/agent-a2-theirs/fs/file?path=x", big, 404, sandbox.CodeNotFound},
		{"PUT", "/v1/sandboxes/nosuch/fs/file?path=x", big, 404, sandbox.CodeNotFound},
		{"POST", "/v1/sandboxes/agent-a2-theirs/proxy/8080/upload", big, 404, sandbox.CodeNotFound},
		{"POST", "/v1/sandboxes", `{"name":"` + big + `"}`, 413, sandbox.CodeTooLarge},
		{"POST", "/v1/tenants", `{"name":"` + big + `"}`, 413, sandbox.CodeTooLarge},
	} {
		read.Store(0)
		resp, body := testenv.Do(t, tc.method, e.url+tc.path, tokenA1, tc.body)
		ae := errorOf(t, resp, body)
		if resp.StatusCode != tc.status || ae.Code != tc.code {
			t.Errorf("%s %s = %d %+v; want %d %s", tc.method, tc.path, resp.StatusCode, ae, tc.status, tc.code)
		}
		if tc.code == sandbox.CodeTooLarge && (ae.Details["size"] != float64(len(tc.body)) || ae.Details["max_bytes"] != float64(httpapi.DefaultMaxBodyBytes)) {
			t.Errorf("%s %s: details %v; want size %d and max_bytes %d", tc.method, tc.path, ae.Details, len(tc.body), httpapi.DefaultMaxBodyBytes)
		}
		if n := read.Load(); n != 0 {
			t.Errorf("%s %s: the API read %d bytes of the body; want none", tc.method, tc.path, n)
		}
	}

	// Chunked: no Content-Length to go by, so it is read up to the limit.
	read.Store(0)
	req, _ := http.NewRequest("POST", e.url+"/v1/sandboxes", bufio.NewReader(strings.NewReader(`{"name":"`+big+`"}`)))
	req.Header.Set("Authorization", "Bearer "+tokenA1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ae := errorOf(t, resp, body); resp.StatusCode != http.StatusRequestEntityTooLarge || ae.Details["max_bytes"] != float64(httpapi.DefaultMaxBodyBytes) {
		t.Errorf("chunked oversized body = %d %+v; want 413 with max_bytes", resp.StatusCode, ae)
	}
	if n := read.Load(); n > httpapi.DefaultMaxBodyBytes+64<<10 {
		t.Errorf("the API read %d bytes of a chunked body; want at most about the %d-byte limit", n, httpapi.DefaultMaxBodyBytes)
	}
}

// TestStrictQuery: every route refuses a query parameter it does not
// take, naming it, and takes the ones it does.
func TestStrictQuery(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	for _, path := range []string{
		"/v1/sandboxes?foo=1", "/v1/sandboxes/ex?foo=1", "/v1/health?foo=1", "/v1/limits?foo=1",
		"/v1/sandboxes/ex/checkpoints?foo=1", "/v1/secrets?foo=1", "/v1/sandboxes/ex/ports?foo=1",
		"/v1/sandboxes/ex/fs/stat?path=.&foo=1",
	} {
		resp, body := testenv.Do(t, "GET", e.url+path, tokenA1, "")
		ae := errorOf(t, resp, body)
		if resp.StatusCode != http.StatusBadRequest || ae.Code != sandbox.CodeInvalidArgument || !strings.Contains(ae.Message, `"foo"`) || ae.Hint == "" {
			t.Errorf("GET %s = %d %+v; want invalid_argument naming foo, with a hint", path, resp.StatusCode, ae)
		}
	}
	for _, path := range []string{"/v1/sandboxes", "/v1/secrets?tenant=t1", "/v1/sandboxes/ex/ports?port=80&port=81"} {
		if resp, body := testenv.Do(t, "GET", e.url+path, tokenA1, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d %s; want 200", path, resp.StatusCode, body)
		}
	}
}

// TestBodiesMustBeObjects: a body that is JSON but no object (null above
// all, which encoding/json takes for "nothing") is invalid_argument, and
// creates nothing.
func TestBodiesMustBeObjects(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, body := range []string{`null`, ` null `, `[]`, `1`, `"x"`, `true`} {
		resp, b := testenv.Do(t, "POST", e.url+"/v1/sandboxes", tokenA1, body)
		ae := errorOf(t, resp, b)
		if resp.StatusCode != http.StatusBadRequest || ae.Code != sandbox.CodeInvalidArgument || !strings.Contains(ae.Message, "expected a JSON object") {
			t.Errorf("POST /v1/sandboxes %s = %d %+v; want invalid_argument", body, resp.StatusCode, ae)
		}
	}
	if list, err := e.client().List(t.Context()); err != nil || len(list) != 0 {
		t.Errorf("after refused creates: %+v, %v; want no sandbox", list, err)
	}
}

// TestDurationOverflow: a duration too long for the daemon to hold is
// refused as too long, with the limit, never taken for a negative one.
func TestDurationOverflow(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	for _, ttl := range []string{`1e30`, `-1e30`, `1e400`, `"9999999999h"`, `9223372037`} {
		resp, b := testenv.Do(t, "POST", e.url+"/v1/sandboxes", tokenA1, `{"name":"new","ttl":`+ttl+`}`)
		ae := errorOf(t, resp, b)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "too long") || ae.Details["max_seconds"] == nil || strings.Contains(ae.Message, "negative") {
			t.Errorf("create with ttl %s = %d %+v; want invalid_argument: too long, with max_seconds", ttl, resp.StatusCode, ae)
		}
	}
	end, _, _ := rawExec(t, e, text(`{"argv":["true"],"timeout":1e300}`))
	if end.Error == nil || end.Error.Code != sandbox.CodeInvalidArgument || !strings.Contains(end.Error.Message, "too long") {
		t.Errorf("exec with timeout 1e300 = %+v; want invalid_argument: too long", end)
	}
	resp, b := testenv.Do(t, "POST", e.url+"/v1/tenants", tokenA1, `{"name":"big","allocation":{"memory_bytes":1e30}}`)
	if ae := errorOf(t, resp, b); resp.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "memory_bytes") || !strings.Contains(ae.Message, "9223372036854775807") {
		t.Errorf("tenant with memory_bytes 1e30 = %d %+v; want invalid_argument naming the field and its range", resp.StatusCode, ae)
	}
}
