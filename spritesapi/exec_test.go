package spritesapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/testutil/daemontest"
)

// session is one exec WebSocket as a Sprites client sees it.
type session struct {
	conn *websocket.Conn
	info map[string]any
}

// dial opens an exec WebSocket with query q and reads its session_info.
func (e *env) dial(t *testing.T, name string, q url.Values) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	u := "ws" + strings.TrimPrefix(e.url, "http") + "/v1/sprites/" + name + "/exec?" + q.Encode()
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	if resp.Header.Get("X-Sprite-Capabilities") != "signal" || resp.Header.Get("Sprite-Version") == "" {
		t.Errorf("upgrade headers %v; want X-Sprite-Capabilities: signal and Sprite-Version", resp.Header)
	}
	typ, msg, err := conn.Read(ctx)
	if err != nil || typ != websocket.MessageText {
		t.Fatalf("first message: %v %q %v; want session_info", typ, msg, err)
	}
	s := &session{conn: conn}
	if err := json.Unmarshal(msg, &s.info); err != nil || s.info["type"] != "session_info" {
		t.Fatalf("first message %s; want session_info", msg)
	}
	if _, ok := s.info["session_id"].(string); !ok {
		t.Errorf("session_id in %s is not a string", msg)
	}
	return s
}

// result is what a session produced.
type result struct {
	stdout, stderr bytes.Buffer
	exit           int // -1: none
	closeCode      websocket.StatusCode
	texts          []string
}

// run reads the session to its end.
func (s *session) run(t *testing.T, tty bool) *result {
	t.Helper()
	r := &result{exit: -1}
	for {
		typ, msg, err := s.conn.Read(t.Context())
		if err != nil {
			r.closeCode = websocket.CloseStatus(err)
			return r
		}
		switch {
		case typ == websocket.MessageText:
			r.texts = append(r.texts, string(msg))
			var m struct {
				Type     string `json:"type"`
				ExitCode int    `json:"exit_code"`
			}
			if json.Unmarshal(msg, &m) == nil && m.Type == "exit" && tty {
				r.exit = m.ExitCode
			}
		case tty:
			r.stdout.Write(msg)
		case len(msg) == 0:
		case msg[0] == 1:
			r.stdout.Write(msg[1:])
		case msg[0] == 2:
			r.stderr.Write(msg[1:])
		case msg[0] == 3:
			if len(msg) != 2 {
				t.Errorf("exit frame %v; want [3 code]", msg)
			}
			r.exit = int(msg[1])
		default:
			t.Errorf("unknown stream id in %v", msg)
		}
	}
}

func (s *session) send(t *testing.T, typ websocket.MessageType, b []byte) {
	t.Helper()
	if err := s.conn.Write(t.Context(), typ, b); err != nil {
		t.Fatalf("send %q: %v", b, err)
	}
}

func cmd(argv ...string) url.Values { return url.Values{"cmd": argv, "path": {argv[0]}} }

// The non-TTY framing: session_info, stdout and stderr apart, the exit as
// [3, code] and a 1000 close; env, dir, stdin with its end, and the exit
// of a command that does not exist.
func TestExecFrames(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")

	r := e.dial(t, "box", cmd("sh", "-c", `echo out; echo err >&2; exit 3`)).run(t, false)
	if r.stdout.String() != "out\n" || r.stderr.String() != "err\n" || r.exit != 3 || r.closeCode != websocket.StatusNormalClosure {
		t.Errorf("run = stdout %q stderr %q exit %d close %d; want out, err, 3, 1000", r.stdout.String(), r.stderr.String(), r.exit, r.closeCode)
	}

	q := cmd("sh", "-c", `echo "$GREETING"; pwd`)
	q.Add("env", "GREETING=hi there")
	q.Set("dir", "/tmp")
	if r = e.dial(t, "box", q).run(t, false); r.stdout.String() != "hi there\n/tmp\n" || r.exit != 0 {
		t.Errorf("env and dir: stdout %q exit %d", r.stdout.String(), r.exit)
	}

	q = cmd("cat")
	q.Set("stdin", "true")
	s := e.dial(t, "box", q)
	s.send(t, websocket.MessageBinary, append([]byte{0}, "hello "...))
	s.send(t, websocket.MessageBinary, append([]byte{0}, "world"...))
	s.send(t, websocket.MessageBinary, []byte{4})
	if r = s.run(t, false); r.stdout.String() != "hello world" || r.exit != 0 {
		t.Errorf("stdin: stdout %q exit %d", r.stdout.String(), r.exit)
	}

	// stdin=false: the command reads an empty stdin; stdin frames and an
	// EOF (Go sends one at once) are dropped.
	q = cmd("cat")
	q.Set("stdin", "false")
	s = e.dial(t, "box", q)
	s.send(t, websocket.MessageBinary, []byte{4})
	if r = s.run(t, false); r.stdout.Len() != 0 || r.exit != 0 {
		t.Errorf("no stdin: stdout %q exit %d", r.stdout.String(), r.exit)
	}

	if r = e.dial(t, "box", cmd("no-such-program-here")).run(t, false); r.exit != 127 || !strings.Contains(r.stderr.String(), "command not found") {
		t.Errorf("missing program: exit %d stderr %q; want 127 and a message", r.exit, r.stderr.String())
	}
}

// A signal message ends the command: the exit is 128+signal.
func TestExecSignal(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	for _, sig := range []string{`"TERM"`, `"SIGTERM"`, `15`} {
		s := e.dial(t, "box", cmd("sh", "-c", `echo ready; exec sleep 100`))
		_, msg, err := s.conn.Read(t.Context())
		if err != nil || string(msg) != "\x01ready\n" {
			t.Fatalf("first output %q %v", msg, err)
		}
		s.send(t, websocket.MessageText, []byte(`{"type":"signal","signal":`+sig+`}`))
		if r := s.run(t, false); r.exit != 128+15 {
			t.Errorf("signal %s: exit %d, want 143", sig, r.exit)
		}
	}
}

// TTY mode: raw output, the size from the query, a resize, input typed
// into the terminal, and the exit as a text message.
func TestExecTTY(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	q := cmd("stty", "size")
	q.Set("tty", "true")
	q.Set("rows", "30")
	q.Set("cols", "100")
	s := e.dial(t, "box", q)
	if s.info["tty"] != true || s.info["rows"] != float64(30) || s.info["cols"] != float64(100) {
		t.Errorf("session_info %v; want tty 30x100", s.info)
	}
	if r := s.run(t, true); strings.TrimSpace(r.stdout.String()) != "30 100" || r.exit != 0 || r.closeCode != websocket.StatusNormalClosure {
		t.Errorf("stty size = %q exit %d close %d; want 30 100, 0, 1000", r.stdout.String(), r.exit, r.closeCode)
	}

	q = cmd("sh", "-c", `read line; stty size; echo "got $line"; exit 5`)
	q.Set("tty", "true")
	q.Set("stdin", "true")
	s = e.dial(t, "box", q)
	s.send(t, websocket.MessageText, []byte(`{"type":"resize","rows":40,"cols":120}`))
	time.Sleep(100 * time.Millisecond) // the resize is not ordered with stdin
	s.send(t, websocket.MessageBinary, []byte("typed\n"))
	r := s.run(t, true)
	if out := r.stdout.String(); !strings.Contains(out, "40 120") || !strings.Contains(out, "got typed") || r.exit != 5 {
		t.Errorf("tty session = %q exit %d; want 40 120, got typed, 5", out, r.exit)
	}
}

// A silent command's stream carries keepalive text messages, which the
// session's reader takes as texts, not output.
func TestExecKeepalive(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	r := e.dial(t, "box", cmd("sh", "-c", "sleep 1; echo done")).run(t, false)
	n := 0
	for _, m := range r.texts {
		if m == `{"type":"keepalive"}` {
			n++
		}
	}
	if n < 2 || r.stdout.String() != "done\n" || r.exit != 0 {
		t.Errorf("a 1 s silence with a %v keepalive: %d keepalives, stdout %q, exit %d", keepalive, n, r.stdout.String(), r.exit)
	}
}

// A client that goes away leaves the command max_run_after_disconnect; 0
// kills it at once.
func TestExecDisconnect(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	home := e.d.Home(t, daemontest.AgentA1, "box")
	q := cmd("sh", "-c", `echo started; sleep 2; echo finished > after-disconnect`)
	q.Set("max_run_after_disconnect", "0s")
	s := e.dial(t, "box", q)
	if _, msg, err := s.conn.Read(t.Context()); err != nil || string(msg) != "\x01started\n" {
		t.Fatalf("first output %q %v", msg, err)
	}
	s.conn.CloseNow()
	time.Sleep(3 * time.Second)
	if _, err := os.ReadFile(home + "/after-disconnect"); err == nil {
		t.Errorf("the command ran on after a disconnect with max_run_after_disconnect=0s")
	}
}

// The HTTP exec: stdin is the body, the answer frames each a chunk, the
// exit last.
func TestHTTPExec(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	q := cmd("sh", "-c", `cat; echo err >&2; exit 4`)
	q.Set("stdin", "true")
	resp, body := e.do(t, "POST", "/v1/sprites/box/exec?"+q.Encode(), tok, "from the body")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST exec = %d %s", resp.StatusCode, body)
	}
	var stdout, stderr bytes.Buffer
	rest := body
	// Frames have no lengths: a frame runs to the next stream byte the
	// test knows cannot occur in this output.
	for len(rest) > 0 {
		id := rest[0]
		end := bytes.IndexAny(rest[1:], "\x01\x02\x03")
		if end < 0 || id == 3 {
			end = len(rest) - 1
		}
		payload := rest[1 : 1+end]
		rest = rest[1+end:]
		switch id {
		case 1:
			stdout.Write(payload)
		case 2:
			stderr.Write(payload)
		case 3:
			if !bytes.Equal(payload, []byte{4}) {
				t.Errorf("exit frame payload %v, want [4]", payload)
			}
		}
	}
	if stdout.String() != "from the body" || stderr.String() != "err\n" || body[len(body)-2] != 3 {
		t.Errorf("HTTP exec: stdout %q stderr %q tail %v", stdout.String(), stderr.String(), body[len(body)-2:])
	}
	e.wantError(t, http.StatusNotFound, "not_found", "POST", "/v1/sprites/nope/exec?cmd=true", tok, "")
}
