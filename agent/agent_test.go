package agent_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"github.com/hearth/hearth/testutil/testenv"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

const (
	nobody = 65534
	// pid1Env makes the test binary serve as a stand-in PID 1 (a child
	// subreaper with ReapOrphans) on the socket it names; see startPID1.
	pid1Env = "HEARTH_AGENT_TEST_PID1_SOCKET"
	homeEnv = "HEARTH_AGENT_TEST_HOME"
)

func TestMain(m *testing.M) {
	// The servers these tests start run in this process, and their
	// commands inherit an ignored SIGHUP (a run under nohup): catch it, as
	// hearth-agent does (keepHangups), so that it has its default action
	// in them.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	if sock := os.Getenv(pid1Env); sock != "" {
		if err := servePID1(sock, os.Getenv(homeEnv)); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: commands run as another user and files are chowned")
	}
}

// testEnv is the default environment of the test servers' commands.
func testEnv(home string) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C", "A=1", "B=2"}
}

// newHome returns a fresh home directory owned by nobody, reachable by
// nobody (t.TempDir's parent is 0700).
func newHome(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return home
}

// shortSocket returns a unix socket path short enough for sun_path.
func shortSocket(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "a.sock")
}

func dialer(sock string) agent.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
}

// startServer serves opts in this process and returns a client for it and
// the home. Commands run as nobody in a fresh home unless opts say
// otherwise.
func startServer(t testing.TB, opts agent.Options) (*agent.Client, string) {
	t.Helper()
	c, home, _ := startServerSock(t, opts)
	return c, home
}

// startServerSock is startServer that also returns the socket's path.
func startServerSock(t testing.TB, opts agent.Options) (*agent.Client, string, string) {
	t.Helper()
	needRoot(t)
	if opts.Home == "" {
		opts.Home = newHome(t)
	}
	if opts.UID == 0 && opts.GID == 0 {
		opts.UID, opts.GID = nobody, nobody
	}
	if opts.Env == nil {
		opts.Env = testEnv(opts.Home)
	}
	sock := shortSocket(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(opts)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return agent.NewClient(dialer(sock)), opts.Home, sock
}

// servePID1 is the stand-in PID 1: a child subreaper (so orphans come to
// it, as they come to PID 1) serving with ReapOrphans until its stdin
// closes.
func servePID1(sock, home string) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return err
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := agent.NewServer(agent.Options{
		UID: nobody, GID: nobody, Home: home, Env: testEnv(home), ReapOrphans: true,
	})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	return srv.Serve(ln)
}

// startPID1 runs servePID1 in a child process and returns a client for it.
func startPID1(t *testing.T) (*agent.Client, string) {
	t.Helper()
	needRoot(t)
	home := newHome(t)
	sock := shortSocket(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pid1Env+"="+sock, homeEnv+"="+home)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("stand-in PID 1: %v", err)
		}
	})
	c := agent.NewClient(dialer(sock))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Ping(ctx)
		cancel()
		if err == nil {
			return c, home
		}
		if time.Now().After(deadline) {
			t.Fatalf("stand-in PID 1 never answered: %v", err)
		}
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// writeFile writes a file in the test's home, owned by nobody.
func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, nobody, nobody); err != nil {
		t.Fatal(err)
	}
}

// alive reports whether pid is a live process: zombies are dead (the host's
// init here does not reap the orphans a test leaves).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// exists reports whether pid is in /proc at all, zombie or not.
func exists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return !errors.Is(err, os.ErrNotExist)
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
	}
}

// pids parses the numbers that a command printed one per line.
func pids(t testing.TB, out string) []int {
	t.Helper()
	var ps []int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			ps = append(ps, n)
		}
	}
	return ps
}

func wantCode(t testing.TB, err error, code sandbox.Code) {
	t.Helper()
	if !sandbox.IsCode(err, code) {
		t.Fatalf("err = %v (code %q), want code %q", err, sandbox.ErrorCode(err), code)
	}
}

// limit reads one row of /proc/<pid>/limits: its soft value.
func limit(t testing.TB, limits, row string) string {
	t.Helper()
	for line := range strings.Lines(limits) {
		if strings.HasPrefix(line, row) {
			f := strings.Fields(line[len(row):])
			if len(f) > 0 {
				return f[0]
			}
		}
	}
	t.Fatalf("no %q in limits:\n%s", row, limits)
	return ""
}
