package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/hearth/hearth/testutil/testenv"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

// asAgentEnv makes the test binary run main, so the tests drive the real
// command: flags, the rlimits it gives commands and its handling of SIGTERM.
const asAgentEnv = "HEARTH_AGENT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asAgentEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startAgent runs this binary as hearth-agent with args and returns a
// client, the process and a channel that receives its exit.
func startAgent(t *testing.T, args ...string) (*agent.Client, *exec.Cmd, <-chan error) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: the agent switches to the sandbox user")
	}
	dir, err := os.MkdirTemp("", "ha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "run", "a.sock")
	home := t.TempDir()
	os.Chmod(filepath.Dir(home), 0o711) // reachable by the sandbox user
	os.Chown(home, 65534, 65534)
	cmd := exec.Command(os.Args[0], append([]string{"-socket", sock, "-uid", "65534", "-gid", "65534", "-home", home}, args...)...)
	cmd.Env = append(os.Environ(), asAgentEnv+"=1")
	var logs testenv.Buffer // written by exec's copier while a cleanup reads it
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Ping(ctx)
		cancel()
		if err == nil {
			return c, cmd, exited
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never answered: %v", err)
		}
	}
}

func TestAgentServesAndStopsOnSIGTERM(t *testing.T) {
	c, cmd, exited := startAgent(t, "-nproc", "321")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	ping, err := c.Ping(ctx)
	if err != nil || ping.Version != agent.ProtocolVersion || ping.PID != cmd.Process.Pid {
		t.Errorf("Ping = %+v, %v; want version %d, pid %d", ping, err, agent.ProtocolVersion, cmd.Process.Pid)
	}

	// The rlimit reaches the command.
	var out bytes.Buffer
	res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "id -u; grep 'Max processes' /proc/self/limits"}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if f := strings.Fields(out.String()); len(f) < 4 || f[0] != "65534" || f[3] != "321" {
		t.Errorf("id and limits = %q, want uid 65534 and 321 processes", out.String())
	}

	// SIGTERM reaches a running command's group, which ends it; the agent
	// answers it and exits cleanly.
	type result struct {
		res sandbox.ExecResult
		err error
	}
	running := make(chan result, 1)
	first := make(chan struct{})
	go func() {
		res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "echo started; sleep 300"}, nil, writerFunc(func(p []byte) {
			select {
			case <-first:
			default:
				close(first)
			}
		}), nil)
		running <- result{res, err}
	}()
	<-first
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-running
	if r.err != nil || r.res.Signal != "SIGTERM" {
		t.Errorf("Exec during shutdown = %+v, %v; want ended by SIGTERM", r.res, r.err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent exit = %v, want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not exit after SIGTERM")
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) {
	f(p)
	return len(p), nil
}

func TestRunBadFlag(t *testing.T) {
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"-no-such-flag"}, nil, &stderr); err == nil {
		t.Errorf("run(-no-such-flag) = nil, want an error")
	}
}

func TestDefaultEnv(t *testing.T) {
	got := defaultEnv([]string{"PATH=/bin", "HOME=/root", "TERM=xterm", "GOMAXPROCS=1", "GOMAXPROCSX=2"}, "/home/sandbox", []string{"GOMAXPROCS"})
	want := []string{"HOME=/home/sandbox", "PATH=/bin", "TERM=xterm", "GOMAXPROCSX=2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("defaultEnv = %q, want %q", got, want)
	}
}

// TestUnsetKeepsVariablesFromCommands: a variable the runtime set for the
// agent alone (--unset) is not in a command's environment; the rest are.
func TestUnsetKeepsVariablesFromCommands(t *testing.T) {
	t.Setenv("GOMAXPROCS", "1")
	t.Setenv("HEARTH_TEST_KEPT", "yes")
	c, _, _ := startAgent(t, "-unset", "GOMAXPROCS")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"env"}}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	env := strings.Split(out.String(), "\n")
	if !slices.Contains(env, "HEARTH_TEST_KEPT=yes") || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
		t.Errorf("a command's environment = %q, want HEARTH_TEST_KEPT and no GOMAXPROCS", env)
	}
}

func TestRunBadUnset(t *testing.T) {
	for _, name := range []string{"", "A=B"} {
		var stderr bytes.Buffer
		if err := run(context.Background(), []string{"-unset", name}, nil, &stderr); err == nil {
			t.Errorf("run(-unset %q) = nil, want an error", name)
		}
	}
}

// TestReserveThreads: the threads made at start stay, idle, so that the
// runtime has them when it cannot create one.
func TestReserveThreads(t *testing.T) {
	const n = 40
	reserveThreads(n)
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	if got := threadCount(t); got < n+1 {
		t.Fatalf("the process has %d threads after reserving %d, want at least %d", got, n, n+1)
	}
}

// threadCount is the Threads line of /proc/self/status.
func threadCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// TestQuiesceAndResume: the quiesce signal closes the agent's socket until
// the resume marker appears; a late signal, one that finds the marker
// already there, is dropped with the marker and the agent keeps serving.
func TestQuiesceAndResume(t *testing.T) {
	c, cmd, _ := startAgent(t)
	sock := cmd.Args[2] // startAgent's -socket
	marker := agent.ResumeMarker(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 10s for %s", what)
			}
		}
	}
	gone := func(p string) func() bool {
		return func() bool { _, err := os.Lstat(p); return errors.Is(err, os.ErrNotExist) }
	}

	if err := cmd.Process.Signal(agent.QuiesceSignal); err != nil {
		t.Fatal(err)
	}
	waitFor("the socket to go", gone(sock))
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("the marker to be taken", gone(marker))
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping after the resume marker = %v", err)
	}

	// Late: the marker is there before the signal. The agent does not go
	// quiet: its socket stays the same file, not one made again (the inode
	// number may come back; its time would not).
	before, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(agent.QuiesceSignal); err != nil {
		t.Fatal(err)
	}
	waitFor("the marker to be taken", gone(marker))
	time.Sleep(100 * time.Millisecond)
	time.Sleep(10 * time.Millisecond) // a socket made again would show a later time
	after, err := os.Lstat(sock)
	if err != nil {
		t.Fatalf("after a late quiesce signal: %v; want the agent listening on", err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("after a late quiesce signal the socket was made again (at %v, first at %v); want the agent listening on", after.ModTime(), before.ModTime())
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping after a late quiesce signal = %v", err)
	}
}

// TestQuietWaitsForOperations: the agent's socket goes (which tells the
// host it is quiet) only once the operations in flight have ended, not
// when the quiesce signal closes its listener: a command running then
// finishes and its result reaches its caller, while the socket is there.
func TestQuietWaitsForOperations(t *testing.T) {
	c, cmd, _ := startAgent(t)
	sock, home := cmd.Args[2], cmd.Args[8] // startAgent's -socket and -home
	// The command's last act leaves a file, so that the test can tell that
	// it had ended when the socket went, however late its caller reads
	// the result the agent sent before removing the socket.
	ended := filepath.Join(home, "ended")
	type result struct {
		res sandbox.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.Exec(t.Context(), sandbox.ExecRequest{Shell: "sleep 0.5; : > ended"}, nil, nil, nil)
		done <- result{res, err}
	}()
	time.Sleep(150 * time.Millisecond) // the command runs
	if err := cmd.Process.Signal(agent.QuiesceSignal); err != nil {
		t.Fatal(err)
	}
	var r result
watch:
	for {
		select {
		case r = <-done:
			break watch
		default:
		}
		if _, err := os.Lstat(sock); err != nil {
			if _, err2 := os.Stat(ended); err2 != nil {
				t.Fatalf("the socket went (%v) while a command ran (%v): the host would take the agent for quiet", err, err2)
			}
			// The command had ended, and its result, sent before the
			// socket went, is on its way to the caller.
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the command running at the quiesce signal never answered its caller")
			}
			break watch
		}
		time.Sleep(time.Millisecond)
	}
	if r.err != nil || r.res.ExitCode != 0 {
		t.Fatalf("a command running at the quiesce signal = %+v, %v; want it finished", r.res, r.err)
	}
}

// TestAgentListenFD: with --listen-fd the agent serves the listening
// socket it inherited (as under runc, where the daemon makes it on the
// host), no command inherits that socket, and the quiesce signal, which
// only a shared socket directory could answer, changes nothing.
func TestAgentListenFD(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: the agent switches to the sandbox user")
	}
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	os.Chmod(filepath.Dir(home), 0o711)
	os.Chown(home, 65534, 65534)
	cmd := exec.Command(os.Args[0], "-listen-fd", "3", "-socket", "/nonexistent/never.sock", "-uid", "65534", "-gid", "65534", "-home", home)
	cmd.Env = append(os.Environ(), asAgentEnv+"=1")
	cmd.ExtraFiles = []*os.File{lf}
	var logs testenv.Buffer // written by exec's copier while a cleanup reads it
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if p, err := c.Ping(ctx); err != nil || p.PID != cmd.Process.Pid {
		t.Fatalf("Ping through the inherited socket = %+v, %v; want the agent's pid %d", p, err, cmd.Process.Pid)
	}
	if err := cmd.Process.Signal(agent.QuiesceSignal); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	var out bytes.Buffer
	res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "ls -l /proc/self/fd/"}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec after the quiesce signal = %+v, %v; want the agent still serving", res, err)
	}
	if strings.Contains(out.String(), "socket:") {
		t.Errorf("a command's descriptors = %q, want no socket (the listener must not leak into commands)", out.String())
	}
	if _, err := os.Stat("/nonexistent"); err == nil {
		t.Errorf("--socket was created despite --listen-fd")
	}
}

// TestCommandsTakeHangups: an agent started with SIGHUP ignored (as under
// nohup, from a daemon or runtime started so) does not hand that to its
// commands: a command's SIGHUP has its default action, so a hang-up, an
// exec's signal control included, ends it.
func TestCommandsTakeHangups(t *testing.T) {
	signal.Ignore(syscall.SIGHUP) // inherited by the agent started next
	c, _, _ := startAgent(t)
	signal.Reset(syscall.SIGHUP)
	var out bytes.Buffer
	res, err := c.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"grep", "^SigIgn:", "/proc/self/status"}}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec grep = %+v, %v, %q", res, err, out.String())
	}
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(out.String(), "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatalf("SigIgn line %q: %v", out.String(), err)
	}
	if mask&(1<<(syscall.SIGHUP-1)) != 0 {
		t.Errorf("a command of an agent started with SIGHUP ignored ignores SIGHUP too (SigIgn %x)", mask)
	}
}
