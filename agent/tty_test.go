package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// console is the stdin of a caller at a terminal: the test types into it
// and sends controls while the command runs.
type console struct {
	*os.File // the read end, which Exec reads
	keys     *os.File
	controls chan sandbox.ExecControl
}

func newConsole(t *testing.T) *console {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Close()
		r.Close()
	})
	return &console{File: r, keys: w, controls: make(chan sandbox.ExecControl, 16)}
}

func (c *console) Controls() <-chan sandbox.ExecControl { return c.controls }

// typeIn sends s to the command's stdin.
func (c *console) typeIn(t *testing.T, s string) {
	t.Helper()
	if _, err := c.keys.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

type execEnd struct {
	res sandbox.ExecResult
	err error
}

// execAsync runs an exec in the background, its output to stdout and its
// stderr to stderr, and returns how it ended when it does.
func execAsync(t *testing.T, c *agent.Client, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) <-chan execEnd {
	t.Helper()
	ended := make(chan execEnd, 1)
	go func() {
		res, err := c.Exec(ctxT(t, 30*time.Second), req, stdin, stdout, stderr)
		ended <- execEnd{res, err}
	}()
	return ended
}

// waitEnd waits for an exec started by execAsync.
func waitEnd(t *testing.T, ended <-chan execEnd) sandbox.ExecResult {
	t.Helper()
	select {
	case e := <-ended:
		if e.err != nil {
			t.Fatalf("Exec = %v", e.err)
		}
		return e.res
	case <-time.After(20 * time.Second):
		t.Fatal("Exec did not return after 20s")
		return sandbox.ExecResult{}
	}
}

func TestExecTTY(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	tests := []struct {
		name   string
		req    sandbox.ExecRequest
		want   []string // in the output, in this order
		stderr string
	}{
		{name: "a pts of the requested size",
			req:  sandbox.ExecRequest{Shell: "tty; stty size", TTY: &sandbox.TTYSize{Rows: 33, Cols: 111}},
			want: []string{"/dev/pts/", "\r\n33 111\r\n"}},
		{name: "zero size is 24x80",
			req:  sandbox.ExecRequest{Argv: []string{"stty", "size"}, TTY: &sandbox.TTYSize{}},
			want: []string{"24 80\r\n"}},
		{name: "zero rows only",
			req:  sandbox.ExecRequest{Argv: []string{"stty", "size"}, TTY: &sandbox.TTYSize{Cols: 132}},
			want: []string{"24 132\r\n"}},
		{name: "controlling terminal of a session leader",
			req: sandbox.ExecRequest{Shell: `echo via-dev-tty >/dev/tty; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo stdio-is-tty
set -- $(cut -d' ' -f6 /proc/$$/stat); [ "$1" = $$ ] && echo session-leader`, TTY: &sandbox.TTYSize{}},
			want: []string{"via-dev-tty\r\n", "stdio-is-tty\r\n", "session-leader\r\n"}},
		{name: "the user owns it",
			req:  sandbox.ExecRequest{Shell: `stat -c 'owner=%u' "$(tty)"`, TTY: &sandbox.TTYSize{}},
			want: []string{"owner=65534\r\n"}},
		{name: "stderr comes as stdout",
			req:  sandbox.ExecRequest{Shell: "echo out; echo err >&2; echo out2", TTY: &sandbox.TTYSize{}},
			want: []string{"out\r\n", "err\r\n", "out2\r\n"}},
		{name: "TERM defaults to xterm-256color",
			req:  sandbox.ExecRequest{Shell: `echo "term=$TERM"`, TTY: &sandbox.TTYSize{}},
			want: []string{"term=xterm-256color\r\n"}},
		{name: "TERM from the request",
			req:  sandbox.ExecRequest{Shell: `echo "term=$TERM"`, TTY: &sandbox.TTYSize{}, Env: map[string]string{"TERM": "vt100"}},
			want: []string{"term=vt100\r\n"}},
		{name: "without a terminal stdout and stderr stay apart",
			req:  sandbox.ExecRequest{Shell: `echo out; echo err >&2; [ -t 1 ] || echo "no-tty term=$TERM"`},
			want: []string{"out\nno-tty term=\n"}, stderr: "err\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			res, err := c.Exec(ctxT(t, 20*time.Second), tc.req, nil, &stdout, &stderr)
			if err != nil || res.ExitCode != 0 || res.Signal != "" {
				t.Fatalf("Exec(%+v) = %+v, %v; output %q", tc.req, res, err, stdout.String())
			}
			out := stdout.String()
			for _, w := range tc.want {
				i := strings.Index(out, w)
				if i < 0 {
					t.Fatalf("stdout = %q, want %q in it (after the lines before)", stdout.String(), w)
				}
				out = out[i+len(w):]
			}
			if stderr.String() != tc.stderr {
				t.Errorf("stderr = %q, want %q", stderr.String(), tc.stderr)
			}
		})
	}
}

func TestExecTTYStdin(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	tty := &sandbox.TTYSize{Rows: 40, Cols: 100}
	t.Run("read a line", func(t *testing.T) {
		// The end of stdin comes long before the command ends, and must
		// not hang up its terminal: it still writes and exits 0.
		var out bytes.Buffer
		res, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{
			Shell: "read x; sleep 0.3; echo got:$x", TTY: tty,
		}, strings.NewReader("hello\n"), &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec = %+v, %v; output %q", res, err, out.String())
		}
		// The terminal echoes the line, then the command answers.
		if want := "hello\r\ngot:hello\r\n"; out.String() != want {
			t.Errorf("stdout = %q, want %q", out.String(), want)
		}
	})
	t.Run("^D is end of file", func(t *testing.T) {
		var out bytes.Buffer
		res, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{
			Shell: "wc -l; echo after-eof", TTY: tty,
		}, strings.NewReader("a\nb\n\x04"), &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec = %+v, %v; output %q", res, err, out.String())
		}
		if !strings.HasSuffix(out.String(), "2\r\nafter-eof\r\n") {
			t.Errorf("stdout = %q, want wc -l to count 2 lines and end", out.String())
		}
	})
	t.Run("typed while it runs", func(t *testing.T) {
		con := newConsole(t)
		var out testenv.Buffer
		ended := execAsync(t, c, sandbox.ExecRequest{
			Shell: "while read x; do echo got:$x; [ $x = bye ] && exit 4; done", TTY: tty,
		}, con, &out, nil)
		for _, word := range []string{"one", "two", "bye"} {
			con.typeIn(t, word+"\n")
			out.WaitFor(t, "got:"+word+"\r\n", 10*time.Second)
		}
		if res := waitEnd(t, ended); res.ExitCode != 4 {
			t.Errorf("Exec = %+v, want exit 4", res)
		}
	})
}

// TestExecTTYBackgroundProcessDoesNotHold: a process that left the
// session, and so escaped the terminal's hangup at the command's exit,
// holds the terminal open; the exec still ends after a short drain, and
// leaves it running.
func TestExecTTYBackgroundProcessDoesNotHold(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	var out bytes.Buffer
	start := time.Now()
	// The shell waits until the background process has left its session:
	// until then, the shell's exit would SIGHUP it.
	res, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{
		Shell: `setsid sh -c 'echo $$ >bg.pid; exec sleep 30' &
until [ -s bg.pid ]; do sleep 0.01; done; cat bg.pid; echo bye`,
		TTY: &sandbox.TTYSize{},
	}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Exec waited %v for a background process holding the terminal", took)
	}
	ps := pids(t, out.String())
	if len(ps) != 1 || !strings.HasSuffix(out.String(), "bye\r\n") {
		t.Fatalf("stdout = %q, want a pid then bye", out.String())
	}
	if !alive(ps[0]) {
		t.Errorf("background process %d was killed at a normal exit", ps[0])
	}
	syscall.Kill(ps[0], syscall.SIGKILL)
}

// TestExecTTYResize: a resize while the command runs and reads its stdin
// reaches it as SIGWINCH and a new size.
func TestExecTTYResize(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	con := newConsole(t)
	var out testenv.Buffer
	ended := execAsync(t, c, sandbox.ExecRequest{
		Shell: `trap 'echo "winch $(stty size)"; exit 7' WINCH
stty size; read x; echo got:$x
while :; do sleep 0.05; done`,
		TTY:     &sandbox.TTYSize{Rows: 10, Cols: 20},
		Timeout: sandbox.Duration(10 * time.Second), // should the resize be missed
	}, con, &out, nil)
	out.WaitFor(t, "10 20\r\n", 10*time.Second)
	con.typeIn(t, "first\n")
	out.WaitFor(t, "got:first\r\n", 10*time.Second)
	con.controls <- sandbox.ExecControl{Resize: &sandbox.TTYSize{Rows: 30, Cols: 90}}
	res := waitEnd(t, ended)
	if res.ExitCode != 7 {
		t.Errorf("Exec = %+v, want exit 7 from the WINCH trap (output %q)", res, out.String())
	}
	if !strings.Contains(out.String(), "winch 30 90\r\n") {
		t.Errorf("stdout = %q, want the new size 30 90 seen at SIGWINCH", out.String())
	}
}

func TestExecSignalControl(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	tests := []struct {
		name     string
		tty      *sandbox.TTYSize
		controls []sandbox.ExecControl
		want     string
	}{
		{"TERM", nil, []sandbox.ExecControl{{Signal: "TERM"}}, "SIGTERM"},
		{"SIGTERM on a terminal", &sandbox.TTYSize{}, []sandbox.ExecControl{{Signal: "SIGTERM"}}, "SIGTERM"},
		{"sigterm", nil, []sandbox.ExecControl{{Signal: "sigterm"}}, "SIGTERM"},
		{"by number", nil, []sandbox.ExecControl{{Signal: "15"}}, "SIGTERM"},
		{"INT by number on a terminal", &sandbox.TTYSize{}, []sandbox.ExecControl{{Signal: "2"}}, "SIGINT"},
		{"bad controls are skipped", nil, []sandbox.ExecControl{
			{Signal: "NOPE"},
			{Signal: "0"},
			{Signal: "65"},
			{Signal: "TERM", Resize: &sandbox.TTYSize{}}, // both: invalid
			{},                                     // neither: invalid
			{Resize: &sandbox.TTYSize{Rows: 1001}}, // too large
			{Resize: &sandbox.TTYSize{Rows: 5}},    // no terminal
			{Signal: "usr1"},
		}, "SIGUSR1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			con := newConsole(t)
			for _, ctl := range tc.controls {
				con.controls <- ctl
			}
			// The timeout ends a command that a control missed.
			req := sandbox.ExecRequest{Argv: []string{"sleep", "100"}, TTY: tc.tty, Timeout: sandbox.Duration(10 * time.Second)}
			res, err := c.Exec(ctxT(t, 20*time.Second), req, con, nil, nil)
			if err != nil {
				t.Fatalf("Exec = %v", err)
			}
			if res.ExitCode != -1 || res.Signal != tc.want || res.TimedOut {
				t.Errorf("Exec(sleep 100) after %v = %+v, want ended by %s", tc.controls, res, tc.want)
			}
		})
	}

	t.Run("the whole process group", func(t *testing.T) {
		con := newConsole(t)
		var out testenv.Buffer
		ended := execAsync(t, c, sandbox.ExecRequest{Shell: "sleep 100 & echo $!; wait"}, con, &out, nil)
		out.WaitFor(t, "\n", 10*time.Second)
		ps := pids(t, out.String())
		if len(ps) != 1 {
			t.Fatalf("stdout %q, want the background pid", out.String())
		}
		con.controls <- sandbox.ExecControl{Signal: "TERM"}
		if res := waitEnd(t, ended); res.Signal != "SIGTERM" {
			t.Errorf("Exec = %+v, want ended by SIGTERM", res)
		}
		waitFor(t, 5*time.Second, fmt.Sprintf("background sleep %d outlived the TERM to its group", ps[0]),
			func() bool { return !alive(ps[0]) })
	})

	t.Run("while stdin streams", func(t *testing.T) {
		con := newConsole(t)
		var out testenv.Buffer
		ended := execAsync(t, c, sandbox.ExecRequest{Argv: []string{"cat"}}, con, &out, nil)
		con.typeIn(t, "abc\n")
		out.WaitFor(t, "abc\n", 10*time.Second)
		con.controls <- sandbox.ExecControl{Signal: "SIGHUP"}
		if res := waitEnd(t, ended); res.Signal != "SIGHUP" {
			t.Errorf("Exec(cat) = %+v, want ended by SIGHUP", res)
		}
	})
}

// TestExecTTYRlimits: a command on a terminal still starts under ptrace,
// which sets its rlimits at its exec.
func TestExecTTYRlimits(t *testing.T) {
	c, _ := startServer(t, agent.Options{NProc: 777})
	var out bytes.Buffer
	res, err := c.Exec(ctxT(t, 10*time.Second), sandbox.ExecRequest{
		Shell: "tty; stty size; cat /proc/self/limits", TTY: &sandbox.TTYSize{Rows: 50, Cols: 60},
	}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v; output %q", res, err, out.String())
	}
	text := strings.ReplaceAll(out.String(), "\r\n", "\n")
	if !strings.HasPrefix(text, "/dev/pts/") || !strings.Contains(text, "\n50 60\n") {
		t.Errorf("stdout = %q, want a pts of 50 rows and 60 columns", out.String())
	}
	if got := limit(t, text, "Max processes"); got != "777" {
		t.Errorf("RLIMIT_NPROC on a terminal = %s, want 777", got)
	}
}

// TestExecTTYPID1: a command on a terminal under a server that reaps
// every child itself, as hearth-agent does as PID 1.
func TestExecTTYPID1(t *testing.T) {
	c, _ := startPID1(t)
	con := newConsole(t)
	var out testenv.Buffer
	ended := execAsync(t, c, sandbox.ExecRequest{Shell: "stty size; read x; echo got:$x", TTY: &sandbox.TTYSize{Rows: 12, Cols: 34}}, con, &out, nil)
	out.WaitFor(t, "12 34\r\n", 10*time.Second)
	con.typeIn(t, "pid1\n")
	if res := waitEnd(t, ended); res.ExitCode != 0 || !strings.Contains(out.String(), "got:pid1\r\n") {
		t.Errorf("Exec = %+v, output %q; want exit 0 after got:pid1", res, out.String())
	}
}

// TestExecControlsWithChoppyConn: stdin and controls are sent from two
// goroutines; over a connection whose writes are not atomic, frames still
// arrive whole.
func TestExecControlsWithChoppyConn(t *testing.T) {
	_, _, sock := startServerSock(t, agent.Options{})
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		conn, err := dialer(sock)(ctx)
		return choppyConn{conn}, err
	})
	in := randomBytes(t, 1<<20)
	con := &streamWithControls{Reader: bytes.NewReader(in), controls: make(chan sandbox.ExecControl)}
	go func() {
		defer close(con.controls)
		for range 200 { // without a terminal, resizes are ignored
			con.controls <- sandbox.ExecControl{Resize: &sandbox.TTYSize{Rows: 5, Cols: 5}}
		}
	}()
	var out bytes.Buffer
	res, err := c.Exec(ctxT(t, 60*time.Second), sandbox.ExecRequest{Argv: []string{"cat"}}, con, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("cat returned %d bytes, want the %d sent", out.Len(), len(in))
	}
}

// streamWithControls is a stdin with controls.
type streamWithControls struct {
	io.Reader
	controls chan sandbox.ExecControl
}

func (s *streamWithControls) Controls() <-chan sandbox.ExecControl { return s.controls }

// choppyConn writes in small pieces, as a connection may: Write is then
// not atomic with respect to concurrent writers.
type choppyConn struct{ net.Conn }

func (c choppyConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k, err := c.Conn.Write(p[:min(len(p), 7)])
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
		runtime.Gosched() // let another writer in
	}
	return n, nil
}
