package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// execDaemon is a fake daemon's exec endpoint: it accepts the WebSocket,
// decodes the first message and hands the connection to script.
func execDaemon(t *testing.T, script func(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest)) *fakeDaemon {
	t.Helper()
	return newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			writeJSON(w, 401, map[string]any{"error": map[string]any{"code": "unauthenticated", "message": "missing or invalid token", "hint": "send one", "details": map[string]any{}}})
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer conn.CloseNow()
		conn.SetReadLimit(64 << 20)
		typ, msg, err := conn.Read(r.Context())
		if err != nil {
			t.Errorf("read first message: %v", err)
			return
		}
		var req sandbox.ExecRequest
		if typ != websocket.MessageText || json.Unmarshal(msg, &req) != nil {
			t.Errorf("first message %v %q; want the JSON request as text", typ, msg)
			return
		}
		script(r.Context(), conn, req)
	})
}

func sendOut(ctx context.Context, conn *websocket.Conn, stream byte, s string) error {
	return conn.Write(ctx, websocket.MessageBinary, append([]byte{stream}, s...))
}

func sendEnd(ctx context.Context, conn *websocket.Conn, end any) {
	b, _ := json.Marshal(end)
	conn.Write(ctx, websocket.MessageText, b)
	conn.Close(websocket.StatusNormalClosure, "")
}

// echoScript reads stdin (when asked for) to its end frame, then answers
// with it on stdout, a line on stderr, and exit code 3.
func echoScript(t *testing.T) func(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest) {
	return func(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest) {
		var in bytes.Buffer
		for req.Stdin {
			typ, msg, err := conn.Read(ctx)
			if err != nil {
				t.Errorf("read stdin: %v", err)
				return
			}
			if typ != websocket.MessageBinary || len(msg) == 0 {
				t.Errorf("stdin message %v %q", typ, msg)
				return
			}
			if msg[0] == 4 && len(msg) == 1 {
				break
			}
			if msg[0] != 0 {
				t.Errorf("stdin message with stream %d", msg[0])
				return
			}
			in.Write(msg[1:])
		}
		sendOut(ctx, conn, 1, "argv="+strings.Join(req.Argv, " ")+"\n")
		sendOut(ctx, conn, 9, "a stream from the future")
		conn.Write(ctx, websocket.MessageText, []byte(`{"type":"progress"}`))
		sendOut(ctx, conn, 1, in.String())
		sendOut(ctx, conn, 2, "to stderr\n")
		sendEnd(ctx, conn, map[string]any{"type": "exit", "result": sandbox.ExecResult{ExitCode: 3, DurationMs: 7}})
	}
}

func TestExecStreams(t *testing.T) {
	d := execDaemon(t, echoScript(t))
	c := client.New(d.URL, "tok", nil)
	big := strings.Repeat("stdin bytes\x00\xff", 50_000) // several stdin messages, not text-safe

	tests := []struct {
		name    string
		stdin   io.Reader
		wantOut string
	}{
		{"no stdin", nil, "argv=cat -\n"},
		{"stdin", strings.NewReader(big), "argv=cat -\n" + big},
		{"empty stdin", strings.NewReader(""), "argv=cat -\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			// Stdin set without a reader is cleared: nothing would end it.
			res, err := c.Exec(ctxT(t), "s1", sandbox.ExecRequest{Argv: []string{"cat", "-"}, Stdin: true}, tt.stdin, &out, &errb)
			if err != nil {
				t.Fatalf("Exec = %v", err)
			}
			if res.ExitCode != 3 || res.DurationMs != 7 {
				t.Errorf("result = %+v; want exit code 3", res)
			}
			if out.String() != tt.wantOut || errb.String() != "to stderr\n" {
				t.Errorf("stdout %d bytes, stderr %q; want %d bytes and %q", out.Len(), errb.String(), len(tt.wantOut), "to stderr\n")
			}
		})
	}
	if seen := d.last(t); seen.RawPath != "/v1/sandboxes/s1/exec" || seen.Method != "GET" || seen.Auth != "Bearer tok" {
		t.Errorf("handshake = %+v", seen)
	}
}

func TestExecErrors(t *testing.T) {
	ctx := ctxT(t)
	t.Run("error message", func(t *testing.T) {
		d := execDaemon(t, func(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest) {
			sendEnd(ctx, conn, map[string]any{"type": "error", "error": map[string]any{
				"code": "not_found", "message": `sandbox "s1" not found`, "hint": "list", "details": map[string]any{},
			}})
		})
		_, err := client.New(d.URL, "tok", nil).Exec(ctx, "s1", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
		var e *sandbox.Error
		if !errors.As(err, &e) || e.Code != sandbox.CodeNotFound || e.Hint != "list" {
			t.Fatalf("Exec = %v; want the daemon's not_found", err)
		}
	})
	t.Run("refused handshake", func(t *testing.T) {
		d := execDaemon(t, nil)
		_, err := client.New(d.URL, "wrong", nil).Exec(ctx, "s1", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
		var e *sandbox.Error
		if !errors.As(err, &e) || e.Code != sandbox.CodeUnauthenticated || e.Hint != "send one" {
			t.Fatalf("Exec with a bad token = %v; want the daemon's unauthenticated", err)
		}
	})
	t.Run("stream ends without an end message", func(t *testing.T) {
		d := execDaemon(t, func(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest) {
			sendOut(ctx, conn, 1, "partial")
			conn.Close(websocket.StatusGoingAway, "daemon stopping")
		})
		var out bytes.Buffer
		_, err := client.New(d.URL, "tok", nil).Exec(ctx, "s1", sandbox.ExecRequest{Argv: []string{"true"}}, nil, &out, nil)
		if !sandbox.IsCode(err, sandbox.CodeUnavailable) || out.String() != "partial" {
			t.Fatalf("Exec over a dropped stream = %v, stdout %q; want unavailable after the partial output", err, out.String())
		}
	})
	t.Run("output writer fails", func(t *testing.T) {
		d := execDaemon(t, echoScript(t))
		boom := errors.New("pipe closed")
		_, err := client.New(d.URL, "tok", nil).Exec(ctx, "s1", sandbox.ExecRequest{Argv: []string{"x"}}, nil, failingWriter{boom}, nil)
		if !errors.Is(err, boom) {
			t.Fatalf("Exec into a failing writer = %v; want its error", err)
		}
	})
	t.Run("stdin reader fails", func(t *testing.T) {
		gone := make(chan struct{})
		d := execDaemon(t, func(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest) {
			defer close(gone)
			for {
				if _, _, err := conn.Read(ctx); err != nil {
					return
				}
			}
		})
		boom := errors.New("tty gone")
		_, err := client.New(d.URL, "tok", nil).Exec(ctx, "s1", sandbox.ExecRequest{Argv: []string{"cat"}},
			io.MultiReader(strings.NewReader("some"), failingReader{boom}), nil, nil)
		if !errors.Is(err, boom) {
			t.Fatalf("Exec with a failing stdin = %v; want its error", err)
		}
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Fatal("the daemon did not see the connection end")
		}
	})
}

// TestExecCancel: a caller whose context ends gets its error at once, and
// the daemon sees the connection go, which is what cancels the command.
func TestExecCancel(t *testing.T) {
	gone := make(chan struct{})
	d := execDaemon(t, func(ctx context.Context, conn *websocket.Conn, req sandbox.ExecRequest) {
		defer close(gone)
		sendOut(ctx, conn, 1, "started\n")
		for {
			if _, _, err := conn.Read(ctx); err != nil {
				return
			}
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &notifyWriter{wrote: make(chan struct{}, 1)}
	errc := make(chan error, 1)
	go func() {
		_, err := client.New(d.URL, "tok", nil).Exec(ctx, "s1", sandbox.ExecRequest{Shell: "sleep 300"}, nil, out, nil)
		errc <- err
	}()
	<-out.wrote
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || sandbox.ErrorCode(err) != sandbox.CodeInternal {
			t.Fatalf("Exec after cancel = %v; want context.Canceled, not a daemon error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exec did not return after its context was canceled")
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the daemon did not see the connection end")
	}
}

type notifyWriter struct{ wrote chan struct{} }

func (w *notifyWriter) Write(p []byte) (int, error) {
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}
