package agent_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

// TestExecChildStdio: a command's fds 0, 1 and 2 are blocking (a program
// writing to a non-blocking stdout would see EAGAIN) and are all it gets
// of the agent's descriptors, with stdin streamed and without.
func TestExecChildStdio(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	inherited := inheritedFDs(t)
	// Each fd's flags from fdinfo (octal), then the fds the command holds:
	// ls's own directory descriptor is the one more.
	script := `for fd in 0 1 2; do sed -n 's/^flags:[[:space:]]*//p' /proc/self/fdinfo/$fd; done; ls /proc/self/fd | tr '\n' ' '`
	for _, withStdin := range []bool{false, true} {
		var stdin io.Reader // nil: none streamed
		if withStdin {
			stdin = strings.NewReader("")
		}
		var out, errOut bytes.Buffer
		res, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{Shell: script}, stdin, &out, &errOut)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("stdin %v: Exec = %+v, %v; stderr %q", withStdin, res, err, errOut.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 4 {
			t.Fatalf("stdin %v: output %q, want three flags lines and the fds", withStdin, out.String())
		}
		for fd, l := range lines[:3] {
			flags, err := strconv.ParseUint(strings.TrimSpace(l), 8, 64)
			if err != nil {
				t.Fatalf("stdin %v: fd %d flags %q: %v", withStdin, fd, l, err)
			}
			if flags&uint64(os.O_APPEND|0o4000) != 0 { // O_NONBLOCK is 04000
				t.Errorf("stdin %v: fd %d has flags %o: non-blocking or appending", withStdin, fd, flags)
			}
		}
		var extra []string // besides 0, 1, 2 and what this process was given
		for _, fd := range strings.Fields(lines[3]) {
			if n, _ := strconv.Atoi(fd); n > 2 && !inherited[n] {
				extra = append(extra, fd)
			}
		}
		if len(extra) != 1 { // ls's own
			t.Errorf("stdin %v: the command holds fds %s: %v more than 0, 1, 2, ls's own and this test's inherited %v", withStdin, lines[3], len(extra)-1, inherited)
		}
	}
}

// TestExecLeavesNoDescriptors: commands run one after another, with stdin
// streamed and without, leave the agent holding no more descriptors than
// before them.
func TestExecLeavesNoDescriptors(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	run := func(i int) {
		t.Helper()
		var out bytes.Buffer
		var stdin io.Reader // nil: none streamed
		if i%2 == 1 {
			stdin = strings.NewReader("in\n")
		}
		_, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{Shell: "cat; echo err >&2"}, stdin, &out, &out)
		if err != nil {
			t.Fatalf("Exec %d: %v", i, err)
		}
	}
	run(0)
	run(1)
	before := openFDs(t)
	for i := range 20 {
		run(i)
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("the agent's descriptors back to the %d before the commands", before), func() bool {
		return openFDs(t) <= before
	})
}

// openFDs is how many descriptors this process holds.
func openFDs(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// inheritedFDs are this process's descriptors above 2 that an exec keeps
// (not close-on-exec): what its own parent left it, which a command the
// agent runs in this process inherits too. In a sandbox the agent, PID 1,
// is given none.
func inheritedFDs(t testing.TB) map[int]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			out[fd] = true
		}
	}
	return out
}
