package drivertest

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// testTTY: a command run with a terminal gets a pseudo-terminal of the
// sandbox's devpts (gVisor's own under runsc) of the requested size, owned
// by the sandbox user, as its controlling terminal; it reads what is typed
// into it, sees a resize as SIGWINCH and a new size, and a signal control
// ends it.
func (s *suite) testTTY(t *testing.T) {
	tg := s.cfg.New(t)
	spec := s.spec(t)
	s.start(t, tg.Driver, spec)
	c := agentClient(tg.Driver, spec.ID)
	ctx := t.Context()

	var out bytes.Buffer
	res, err := c.Exec(ctx, sandbox.ExecRequest{
		Shell: `tty; stty size; stat -c 'owner=%u' "$(tty)"; echo via-dev-tty >/dev/tty`,
		TTY:   &sandbox.TTYSize{Rows: 33, Cols: 111},
	}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%s, tty) = %+v, %v: %q", spec.ID, res, err, out.String())
	}
	want := "\r\n33 111\r\nowner=" + strconv.Itoa(spec.UID) + "\r\nvia-dev-tty\r\n"
	if got := out.String(); !strings.HasPrefix(got, "/dev/pts/") || !strings.HasSuffix(got, want) {
		t.Errorf("Exec(%s, tty; stty size; owner; /dev/tty) = %q, want a /dev/pts path then %q", spec.ID, got, want)
	}

	// Typing and resizing while it runs.
	keys, typed := io.Pipe()
	defer typed.Close()
	in := &console{Reader: keys, controls: make(chan sandbox.ExecControl, 1)}
	var screen testenv.Buffer
	type end struct {
		res sandbox.ExecResult
		err error
	}
	ended := make(chan end, 1)
	go func() {
		res, err := c.Exec(ctx, sandbox.ExecRequest{
			Shell: `trap 'echo "winch $(stty size)"; exit 7' WINCH
stty size; read x; echo got:$x
while :; do sleep 0.05; done`,
			TTY:     &sandbox.TTYSize{Rows: 10, Cols: 20},
			Timeout: sandbox.Duration(30 * time.Second),
		}, in, &screen, nil)
		ended <- end{res, err}
	}()
	screen.WaitFor(t, "10 20\r\n", 20*time.Second)
	if _, err := typed.Write([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	screen.WaitFor(t, "got:typed\r\n", 20*time.Second)
	in.controls <- sandbox.ExecControl{Resize: &sandbox.TTYSize{Rows: 30, Cols: 90}}
	if e := <-ended; e.err != nil || e.res.ExitCode != 7 || !strings.Contains(screen.String(), "winch 30 90\r\n") {
		t.Errorf("Exec(%s, resized to 30x90) = %+v, %v: %q; want exit 7 from the WINCH trap after \"winch 30 90\"", spec.ID, e.res, e.err, screen.String())
	}

	// A signal control.
	in = &console{Reader: strings.NewReader(""), controls: make(chan sandbox.ExecControl, 1)}
	in.controls <- sandbox.ExecControl{Signal: "TERM"}
	res, err = c.Exec(ctx, sandbox.ExecRequest{
		Argv:    []string{"sleep", "100"},
		TTY:     &sandbox.TTYSize{},
		Timeout: sandbox.Duration(30 * time.Second),
	}, in, nil, nil)
	if err != nil || res.ExitCode != -1 || res.Signal != "SIGTERM" {
		t.Errorf("Exec(%s, sleep 100) with a TERM control = %+v, %v; want ended by SIGTERM", spec.ID, res, err)
	}
}

// console is a stdin with controls (sandbox.ExecControls).
type console struct {
	io.Reader
	controls chan sandbox.ExecControl
}

func (c *console) Controls() <-chan sandbox.ExecControl { return c.controls }
