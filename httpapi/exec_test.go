package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/sandbox"
)

func TestExec(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	c := e.client()
	ctx := t.Context()
	script := "x=0\n" + strings.Repeat("x=$((x+1))\n", 40_000) + "echo $x\n" // ~480 KB, over any default frame limit

	tests := []struct {
		name     string
		req      sandbox.ExecRequest
		stdin    string
		useStdin bool
		wantOut  string
		wantErr  string
		wantExit int
	}{
		{name: "argv", req: sandbox.ExecRequest{Argv: []string{"echo", "hello", "world"}}, wantOut: "hello world\n"},
		{name: "shell, stderr and exit code", req: sandbox.ExecRequest{Shell: "echo out; echo err >&2; exit 3"}, wantOut: "out\n", wantErr: "err\n", wantExit: 3},
		{name: "stdin", req: sandbox.ExecRequest{Argv: []string{"cat"}}, stdin: strings.Repeat("bytes\x00\xff\n", 200_000), useStdin: true,
			wantOut: strings.Repeat("bytes\x00\xff\n", 200_000)},
		{name: "empty stdin", req: sandbox.ExecRequest{Argv: []string{"wc", "-c"}}, useStdin: true, wantOut: "0\n"},
		{name: "no stdin", req: sandbox.ExecRequest{Shell: "cat; echo done"}, wantOut: "done\n"},
		{name: "env and cwd", req: sandbox.ExecRequest{Shell: "echo $FOO; pwd", Env: map[string]string{"FOO": "bar"}, Cwd: "/"}, wantOut: "bar\n/\n"},
		{name: "large script", req: sandbox.ExecRequest{Shell: script}, wantOut: "40000\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			var res sandbox.ExecResult
			var err error
			if tt.useStdin {
				res, err = c.Exec(ctx, "ex", tt.req, strings.NewReader(tt.stdin), &out, &errb)
			} else {
				res, err = c.Exec(ctx, "ex", tt.req, nil, &out, &errb)
			}
			if err != nil {
				t.Fatalf("Exec = %v", err)
			}
			if res.ExitCode != tt.wantExit || out.String() != tt.wantOut || errb.String() != tt.wantErr {
				t.Fatalf("Exec = %+v, stdout %d bytes %.60q, stderr %q; want exit %d, %d bytes, %q",
					res, out.Len(), out.String(), errb.String(), tt.wantExit, len(tt.wantOut), tt.wantErr)
			}
		})
	}

	t.Run("unknown sandbox", func(t *testing.T) {
		_, err := c.Exec(ctx, "nosuch", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
		if !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("Exec(nosuch) = %v; want not_found", err)
		}
	})
	t.Run("program not found", func(t *testing.T) {
		res, err := c.Exec(ctx, "ex", sandbox.ExecRequest{Argv: []string{"no-such-program-here"}}, nil, nil, nil)
		if err == nil && res.ExitCode == 0 {
			t.Fatalf("Exec(no-such-program) = %+v; want an error or a failing exit", res)
		}
	})
}

// TestExecCallerGoes: a client that disconnects cancels the command's
// context; the command then lives for its grace period and is killed.
func TestExecCallerGoes(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	c := e.client()
	pidFile := filepath.Join(e.home(t, "ex"), "pid")

	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "ex", sandbox.ExecRequest{Shell: "echo $$ > " + pidFile + "; echo started; exec sleep 300", Grace: sandbox.Duration(2 * time.Second)},
			nil, writerFunc(func(p []byte) { close(started) }), nil)
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not start")
	}
	pid := readPID(t, pidFile)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec after cancel = %v; want context.Canceled", err)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("the command died at once; want it alive for its grace period")
	}
	waitGone(t, pid)
}

// waitGone waits for process pid to end, and fails the test when it is
// still there after 10s.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal("the command outlived its grace period")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readPID waits for the command to write its pid to file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(file)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command wrote no pid to %s", file)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// endMessage is the exec stream's last message, as a client decodes it.
type endMessage struct {
	Type   string
	Result *sandbox.ExecResult
	Error  *sandbox.Error
}

// wsMsg is one message a test sends.
type wsMsg struct {
	typ  websocket.MessageType
	data []byte
}

func text(s string) wsMsg    { return wsMsg{websocket.MessageText, []byte(s)} }
func binary(b ...byte) wsMsg { return wsMsg{websocket.MessageBinary, b} }

// rawExec opens the exec WebSocket of sandbox ex, sends msgs and returns
// the end message, the close status and what came on stdout.
func rawExec(t *testing.T, e *env, msgs ...wsMsg) (endMessage, websocket.StatusCode, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, e.url+"/v1/sandboxes/ex/exec", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tokenA1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	for _, m := range msgs {
		if err := conn.Write(ctx, m.typ, m.data); err != nil {
			t.Fatal(err)
		}
	}
	var (
		end    endMessage
		stdout bytes.Buffer
	)
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if end.Type == "" {
				t.Fatalf("stream ended without an end message: %v", err)
			}
			return end, websocket.CloseStatus(err), stdout.String()
		}
		switch {
		case end.Type != "":
			t.Fatalf("message %q after the end message", data)
		case typ == websocket.MessageText:
			if err := json.Unmarshal(data, &end); err != nil {
				t.Fatalf("bad end message %q: %v", data, err)
			}
		case len(data) > 0 && data[0] == 1:
			stdout.Write(data[1:])
		}
	}
}

func TestExecProtocolErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	for _, msg := range []string{`{`, `{"argv":[]}`, `{"argv":["true"],"shell":"true"}`, `{"nope":1}`, `[]`, `{"argv":["a\u0000b"]}`, `{"timeout":"-1s","argv":["true"]}`} {
		end, status, _ := rawExec(t, e, text(msg))
		if end.Type != "error" || end.Error == nil || end.Error.Code != sandbox.CodeInvalidArgument || end.Error.Message == "" {
			t.Errorf("first message %s answered %+v; want an invalid_argument error", msg, end)
		}
		if status != websocket.StatusNormalClosure {
			t.Errorf("first message %s: close status %d, want 1000", msg, status)
		}
	}
	withStdin := text(`{"shell":"cat","stdin":true}`)
	withTTY := text(`{"shell":"cat","stdin":true,"tty":{"rows":24,"cols":80}}`)
	violations := map[string][]wsMsg{
		"binary first message":       {binary(1, 2, 3)},
		"stdin not asked for":        {text(`{"shell":"sleep 5"}`), binary(0, 'x')},
		"unknown stream":             {withStdin, binary(7, 'x')},
		"empty message":              {withStdin, binary()},
		"text after the request":     {withStdin, text("{}")},
		"stdin after its end":        {withStdin, binary(4), binary(0, 'x')},
		"end of stdin carrying data": {withStdin, binary(4, 'x')},
		// With a terminal, a text message is a control, checked strictly.
		"a control that is not JSON":  {withTTY, text("{")},
		"a control with an odd field": {withTTY, text(`{"resize":{"rows":5,"cols":5},"nope":1}`)},
		"a control with both":         {withTTY, text(`{"resize":{"rows":5,"cols":5},"signal":"INT"}`)},
		"a control with neither":      {withTTY, text(`{}`)},
		"a control after another":     {withTTY, text(`{"signal":"INT"}{"signal":"INT"}`)},
		"a resize beyond the limit":   {withTTY, text(`{"resize":{"rows":5000,"cols":5}}`)},
	}
	for name, msgs := range violations {
		end, status, _ := rawExec(t, e, msgs...)
		if end.Type != "error" || end.Error == nil || end.Error.Code != sandbox.CodeInvalidArgument || end.Error.Hint == "" {
			t.Errorf("%s answered %+v; want an invalid_argument error with a hint", name, end)
		}
		if status != websocket.StatusPolicyViolation {
			t.Errorf("%s: close status %d, want 1008", name, status)
		}
	}
	// With a terminal, well-formed controls go to the command between
	// stdin's messages, and the stream goes on.
	end, status, _ := rawExec(t, e, text(`{"shell":"head -c 1","stdin":true,"tty":{"rows":24,"cols":80}}`),
		text(`{"resize":{"rows":30,"cols":100}}`), text(`{"signal":"WINCH"}`), binary(0, 'a', '\n'))
	if end.Type != "exit" || status != websocket.StatusNormalClosure {
		t.Errorf("a terminal's exec with controls = %+v, close %d; want an exit, 1000", end, status)
	}
	// The protocol, by hand: stdin, its end, output, the exit message.
	end, status, stdout := rawExec(t, e, text(`{"argv":["cat"],"stdin":true}`), binary(0, 'a', 'b'), binary(0, 'c'), binary(4))
	if end.Type != "exit" || end.Result == nil || end.Result.ExitCode != 0 || status != websocket.StatusNormalClosure || stdout != "abc" {
		t.Fatalf("cat over the raw protocol = %+v, close %d, stdout %q; want exit 0, 1000, \"abc\"", end, status, stdout)
	}
}

func TestExecHandshake(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	ctx := t.Context()
	t.Run("no token", func(t *testing.T) {
		_, resp, err := websocket.Dial(ctx, e.url+"/v1/sandboxes/ex/exec", nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Fatalf("dial without a token = %v, %+v; want 401 with WWW-Authenticate", err, resp)
		}
	})
	// A browser's way: the token as a subprotocol, beside hearth.v1,
	// which the daemon selects; only on a WebSocket handshake.
	t.Run("token as a subprotocol", func(t *testing.T) {
		bearer := "bearer." + base64.RawURLEncoding.EncodeToString([]byte(tokenA1))
		conn, _, err := websocket.Dial(ctx, e.url+"/v1/sandboxes/ex/exec", &websocket.DialOptions{Subprotocols: []string{"hearth.v1", bearer}})
		if err != nil {
			t.Fatalf("dial with the token as a subprotocol = %v", err)
		}
		if conn.Subprotocol() != "hearth.v1" {
			t.Errorf("selected subprotocol %q, want hearth.v1", conn.Subprotocol())
		}
		conn.Write(ctx, websocket.MessageText, []byte(`{"argv":["true"]}`))
		if _, msg, err := conn.Read(ctx); err != nil || !strings.Contains(string(msg), `"exit"`) {
			t.Errorf("exec over it = %q, %v; want its exit", msg, err)
		}
		conn.CloseNow()
		for name, protos := range map[string][]string{
			"not base64":    {"hearth.v1", "bearer.%%%"},
			"another token": {"hearth.v1", "bearer." + base64.RawURLEncoding.EncodeToString([]byte("hearth_nope"))},
		} {
			_, resp, err := websocket.Dial(ctx, e.url+"/v1/sandboxes/ex/exec", &websocket.DialOptions{Subprotocols: protos})
			if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: dial = %v, %+v; want 401", name, err, resp)
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/v1/sandboxes", nil)
		req.Header.Set("Sec-WebSocket-Protocol", bearer)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a plain call with the subprotocol header = %v, %v; want 401 (only a handshake may carry it)", resp, err)
		}
	})
	t.Run("cross-origin", func(t *testing.T) {
		_, resp, err := websocket.Dial(ctx, e.url+"/v1/sandboxes/ex/exec", &websocket.DialOptions{HTTPHeader: http.Header{
			"Authorization": {"Bearer " + tokenA1}, "Origin": {"https://evil.example"},
		}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("dial from another origin = %v, %+v; want 403", err, resp)
		}
	})
	t.Run("same origin", func(t *testing.T) {
		conn, _, err := websocket.Dial(ctx, e.url+"/v1/sandboxes/ex/exec", &websocket.DialOptions{HTTPHeader: http.Header{
			"Authorization": {"Bearer " + tokenA1}, "Origin": {e.url},
		}})
		if err != nil {
			t.Fatalf("dial from the daemon's own origin = %v", err)
		}
		conn.CloseNow()
	})
}

// TestExecMaxOutput: with max_output_bytes the exec stream carries no
// output messages; the result holds each stream, a long one cut to its
// head and tail with the whole of it saved in the sandbox (the exec core's
// long-output option, MCP's sandbox_exec's).
func TestExecMaxOutput(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "ex")
	c := e.client()
	var full strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&full, "%d\n", i)
	}

	var out, errb bytes.Buffer
	res, err := c.Exec(t.Context(), "ex", sandbox.ExecRequest{Shell: "seq 1 20000; echo oops >&2", MaxOutputBytes: 1000}, nil, &out, &errb)
	if err != nil {
		t.Fatalf("Exec = %v", err)
	}
	o := res.Output
	if out.Len() != 0 || errb.Len() != 0 || o == nil {
		t.Fatalf("Exec streamed %d+%d bytes, output %+v; want none streamed and the output in the result", out.Len(), errb.Len(), o)
	}
	if !o.Truncated || o.StdoutBytes != int64(full.Len()) || !strings.HasPrefix(o.Stdout, "1\n2\n") || !strings.HasSuffix(o.Stdout, "19999\n20000\n") ||
		!strings.Contains(o.Stdout, "bytes cut; full output in "+o.StdoutFile) || !strings.HasPrefix(o.StdoutFile, "/home/sandbox/.hearth/exec-") {
		t.Fatalf("Exec output = %+v; want stdout cut to head and tail, %d bytes, saved", o, full.Len())
	}
	if o.Stderr != "oops\n" || o.StderrBytes != 5 || o.StderrFile != "" {
		t.Errorf("Exec stderr = %q (%d bytes, file %q); want it whole", o.Stderr, o.StderrBytes, o.StderrFile)
	}
	saved, err := os.ReadFile(filepath.Join(e.home(t, "ex"), strings.TrimPrefix(o.StdoutFile, "/home/sandbox/")))
	if err != nil || string(saved) != full.String() {
		t.Errorf("saved stdout = %d bytes, %v; want the whole %d", len(saved), err, full.Len())
	}

	if _, err := c.Exec(t.Context(), "ex", sandbox.ExecRequest{Shell: "true", MaxOutputBytes: sandbox.MaxOutputBytes + 1}, nil, nil, nil); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
		t.Errorf("Exec with max_output_bytes over the limit = %v; want invalid_argument", err)
	}
}
