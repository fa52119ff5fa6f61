package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

// pty is a pseudo-terminal a test drives: it types on the master and
// reads all the terminal showed; the slave is what the CLI runs on.
type pty struct {
	master, slave *os.File
	mu            sync.Mutex
	seen          strings.Builder
}

// openPTY opens a pseudo-terminal of rows×cols and starts reading what
// it shows.
func openPTY(t *testing.T, rows, cols uint16) *pty {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &pty{master: master, slave: slave}
	p.resize(t, rows, cols)
	t.Cleanup(func() { master.Close(); slave.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			p.mu.Lock()
			p.seen.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *pty) resize(t *testing.T, rows, cols uint16) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
}

// typeKeys types keys on the terminal.
func (p *pty) typeKeys(t *testing.T, keys string) {
	t.Helper()
	if _, err := p.master.WriteString(keys); err != nil {
		t.Fatal(err)
	}
}

// expect waits until the terminal has shown want since mark (an offset of
// what it showed), and returns the offset past it.
func (p *pty) expect(t *testing.T, mark int, want string) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		seen := p.seen.String()
		p.mu.Unlock()
		if i := strings.Index(seen[mark:], want); i >= 0 {
			return mark + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within 20 s; after the mark it showed:\n%q", want, seen[mark:])
		}
	}
}

// termios is the terminal's mode.
func (p *pty) termios(t *testing.T) unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return *tio
}

// runOnPTY starts the hearth CLI with args against d, on p as its
// controlling terminal.
func runOnPTY(t *testing.T, d *daemon, p *pty, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bins.Hearth, args...)
	cmd.Env = append(os.Environ(), "HEARTH_URL="+d.URL, "HEARTH_TOKEN="+d.Token)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd
}

// exitCode waits for cmd and returns its exit code.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not end within 30 s", cmd.Args)
		return -1
	}
}

// TestShell: `hearth shell` on a real pseudo-terminal runs a login shell
// in a sleeping sandbox (woken for it): a typed command's output shows,
// `stty size` inside says the terminal's size and follows a resize, Ctrl-C
// interrupts a `sleep` (status 130), Ctrl-D ends the shell with the exit
// code of its last command, which hearth exits with; the local terminal
// is raw during the session and as it was after. `hearth exec -t` runs
// one command the same way.
func TestShell(t *testing.T) {
	d := newDaemon(t, preferredRuntime(t))
	ctx := ctxT(t)
	if _, _, err := d.Client().Create(ctx, sandbox.CreateRequest{Name: "term"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client().Sleep(ctx, "term"); err != nil {
		t.Fatal(err)
	}

	p := openPTY(t, 30, 100)
	before := p.termios(t)
	if before.Lflag&unix.ECHO == 0 || before.Lflag&unix.ICANON == 0 {
		t.Fatalf("a new terminal is not cooked: lflag %#x", before.Lflag)
	}
	cmd := runOnPTY(t, d, p, "shell", "term")
	mark := 0
	p.typeKeys(t, "echo hi-$((6*7))\r")
	mark = p.expect(t, mark, "hi-42")
	if raw := p.termios(t); raw.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("during the session the local terminal is not raw: lflag %#x", raw.Lflag)
	}
	p.typeKeys(t, "stty size\r")
	mark = p.expect(t, mark, "30 100")

	p.resize(t, 40, 120)
	for i := 0; ; i++ {
		// The echo of what is typed has the sum unworked: the mark is
		// past the output's.
		p.typeKeys(t, fmt.Sprintf("echo size-$((%d+1000))-$(stty size | tr ' ' x)\r", i))
		next := p.expect(t, mark, fmt.Sprintf("size-%d-", i+1000))
		mark = p.expect(t, next, "\n")
		if strings.Contains(p.shown(next, mark), "40x120") {
			break
		}
		if i == 50 {
			t.Fatalf("stty size in the sandbox never followed the resize to 40x120: %q", p.shown(next, mark))
		}
		time.Sleep(50 * time.Millisecond)
	}

	p.typeKeys(t, "sleep 100\r")
	time.Sleep(500 * time.Millisecond)
	began := time.Now()
	p.typeKeys(t, "\x03")
	p.typeKeys(t, "echo interrupted-$?\r")
	mark = p.expect(t, mark, "interrupted-130")
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Ctrl-C took %v to interrupt sleep", took)
	}

	p.typeKeys(t, "sh -c 'exit 7'\r")
	time.Sleep(300 * time.Millisecond)
	p.typeKeys(t, "\x04")
	if code := exitCode(t, cmd); code != 7 {
		t.Errorf("hearth shell ended by Ctrl-D after `exit 7` exited %d, want 7", code)
	}
	if after := p.termios(t); after != before {
		t.Errorf("the local terminal was not restored: %+v, want %+v", after, before)
	}

	mark = p.mark()
	cmd = runOnPTY(t, d, p, "exec", "-t", "term", "--", "sh", "-c", "stty size; tty; exit 3")
	if code := exitCode(t, cmd); code != 3 {
		t.Errorf("hearth exec -t exited %d, want 3", code)
	}
	mark = p.expect(t, mark, "40 120")
	p.expect(t, mark, "/dev/pts/")
	if after := p.termios(t); after != before {
		t.Errorf("after hearth exec -t the local terminal was not restored: %+v, want %+v", after, before)
	}
}

// shown is what the terminal showed between offsets from and to.
func (p *pty) shown(from, to int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen.String()[from:to]
}

// mark is the offset of the end of what the terminal has shown so far.
func (p *pty) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen.Len()
}
