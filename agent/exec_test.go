package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

// execCase is one command and what it must print and return.
type execCase struct {
	name       string
	req        sandbox.ExecRequest
	stdin      string
	wantStdout string
	wantStderr string
	want       sandbox.ExecResult // DurationMs is not compared
}

func execCases(home string) []execCase {
	return []execCase{
		{name: "echo", req: sandbox.ExecRequest{Shell: "echo hello"}, wantStdout: "hello\n"},
		{name: "argv PATH lookup", req: sandbox.ExecRequest{Argv: []string{"printf", "%s|", "a b", "c"}}, wantStdout: "a b|c|"},
		{name: "stdout and stderr apart", req: sandbox.ExecRequest{Shell: "echo out; echo err >&2; echo out2"},
			wantStdout: "out\nout2\n", wantStderr: "err\n"},
		{name: "exit 3", req: sandbox.ExecRequest{Shell: "exit 3"}, want: sandbox.ExecResult{ExitCode: 3}},
		{name: "exit 124 is not a timeout", req: sandbox.ExecRequest{Shell: "exit 124"}, want: sandbox.ExecResult{ExitCode: 124}},
		{name: "SIGTERM", req: sandbox.ExecRequest{Shell: "kill -TERM $$"}, want: sandbox.ExecResult{ExitCode: -1, Signal: "SIGTERM"}},
		{name: "SIGKILL", req: sandbox.ExecRequest{Shell: "kill -KILL $$"}, want: sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL"}},
		{name: "runs as the sandbox user without groups", req: sandbox.ExecRequest{Shell: "id -u; id -g; id -G"},
			wantStdout: "65534\n65534\n65534\n"},
		{name: "own session", req: sandbox.ExecRequest{Shell: "cut -d' ' -f6 /proc/$$/stat; echo $$"},
			wantStdout: "SAME"},
		{name: "env merged, request wins", req: sandbox.ExecRequest{
			Shell: `echo "$A $B $C $HOME"`, Env: map[string]string{"B": "3", "C": "4"}},
			wantStdout: "1 3 4 " + home + "\n"},
		{name: "cwd defaults to home", req: sandbox.ExecRequest{Argv: []string{"pwd"}}, wantStdout: home + "\n"},
		{name: "relative cwd is under home", req: sandbox.ExecRequest{Argv: []string{"pwd"}, Cwd: "sub"},
			wantStdout: filepath.Join(home, "sub") + "\n"},
		{name: "absolute cwd", req: sandbox.ExecRequest{Argv: []string{"pwd"}, Cwd: "/tmp"}, wantStdout: "/tmp\n"},
		{name: "stdin", req: sandbox.ExecRequest{Argv: []string{"cat"}}, stdin: "piped\x00in\n", wantStdout: "piped\x00in\n"},
		{name: "no stdin reads empty", req: sandbox.ExecRequest{Argv: []string{"wc", "-c"}}, wantStdout: "0\n"},
		{name: "PATH from the request env", req: sandbox.ExecRequest{Argv: []string{"mytool"},
			Env: map[string]string{"PATH": home + "/bin:/usr/bin:/bin"}}, wantStdout: "mytool ran\n"},
		{name: "relative program path", req: sandbox.ExecRequest{Argv: []string{"./bin/mytool"}}, wantStdout: "mytool ran\n"},
	}
}

// prepareHome creates what execCases expect in home.
func prepareHome(t testing.TB, home string) {
	t.Helper()
	for _, d := range []string{"sub", "bin"} {
		if err := os.Mkdir(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(home, "bin", "mytool"), []byte("#!/bin/sh\necho mytool ran\n"), 0o755)
}

func runExecCases(t *testing.T, c *agent.Client, home string) {
	prepareHome(t, home)
	for _, tc := range execCases(home) {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			var stdin *strings.Reader
			if tc.stdin != "" {
				stdin = strings.NewReader(tc.stdin)
			}
			var res sandbox.ExecResult
			var err error
			if stdin != nil {
				res, err = c.Exec(ctxT(t, 20*time.Second), tc.req, stdin, &stdout, &stderr)
			} else {
				res, err = c.Exec(ctxT(t, 20*time.Second), tc.req, nil, &stdout, &stderr)
			}
			if err != nil {
				t.Fatalf("Exec(%+v) = %v", tc.req, err)
			}
			res.DurationMs = 0
			if res != tc.want {
				t.Errorf("Exec(%+v) = %+v, want %+v (stderr %q)", tc.req, res, tc.want, stderr.String())
			}
			got := stdout.String()
			if tc.wantStdout == "SAME" { // the session id is the shell's pid
				if lines := strings.Fields(got); len(lines) != 2 || lines[0] != lines[1] {
					t.Errorf("session id and pid = %q, want equal", got)
				}
			} else if got != tc.wantStdout {
				t.Errorf("stdout = %q, want %q", got, tc.wantStdout)
			}
			if stderr.String() != tc.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr.String(), tc.wantStderr)
			}
		})
	}
}

func TestExec(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	runExecCases(t, c, home)
}

// TestExecPID1 runs the same cases through a server that reaps every child
// itself, as hearth-agent does as PID 1.
func TestExecPID1(t *testing.T) {
	c, home := startPID1(t)
	runExecCases(t, c, home)

	t.Run("orphans are reaped", func(t *testing.T) {
		var out bytes.Buffer
		_, err := c.Exec(ctxT(t, 10*time.Second), sandbox.ExecRequest{Shell: "sleep 0.3 & echo $!"}, nil, &out, nil)
		if err != nil {
			t.Fatal(err)
		}
		ps := pids(t, out.String())
		if len(ps) != 1 {
			t.Fatalf("output %q, want one pid", out.String())
		}
		waitFor(t, 5*time.Second, fmt.Sprintf("orphan %d still in /proc (a zombie nobody reaped)", ps[0]),
			func() bool { return !exists(ps[0]) })
	})
	t.Run("timeout kills the tree", func(t *testing.T) { testTimeoutKillsTree(t, c, true) })
}

func TestExecBinaryLargeOutput(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	out := randomBytes(t, 8<<20)
	errb := randomBytes(t, 1<<20)
	writeFile(t, filepath.Join(home, "out.bin"), out, 0o644)
	writeFile(t, filepath.Join(home, "err.bin"), errb, 0o644)
	var stdout, stderr bytes.Buffer
	res, err := c.Exec(ctxT(t, 60*time.Second), sandbox.ExecRequest{Shell: "cat out.bin; cat err.bin >&2; cat out.bin"}, nil, &stdout, &stderr)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if want := append(append([]byte{}, out...), out...); !bytes.Equal(stdout.Bytes(), want) {
		t.Errorf("stdout: %d bytes, want the %d bytes of out.bin twice", stdout.Len(), len(want))
	}
	if !bytes.Equal(stderr.Bytes(), errb) {
		t.Errorf("stderr: %d bytes, want the %d bytes of err.bin", stderr.Len(), len(errb))
	}
}

func TestExecStdinStreaming(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	t.Run("wc -c of 5 MiB", func(t *testing.T) {
		var stdout bytes.Buffer
		res, err := c.Exec(ctxT(t, 30*time.Second), sandbox.ExecRequest{Argv: []string{"wc", "-c"}},
			bytes.NewReader(randomBytes(t, 5<<20)), &stdout, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec = %+v, %v", res, err)
		}
		if got := strings.TrimSpace(stdout.String()); got != "5242880" {
			t.Errorf("wc -c = %q, want 5242880", got)
		}
	})
	t.Run("cat echoes 3 MiB byte-exact", func(t *testing.T) {
		in := randomBytes(t, 3<<20)
		var stdout bytes.Buffer
		res, err := c.Exec(ctxT(t, 30*time.Second), sandbox.ExecRequest{Argv: []string{"cat"}}, bytes.NewReader(in), &stdout, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec = %+v, %v", res, err)
		}
		if !bytes.Equal(stdout.Bytes(), in) {
			t.Errorf("cat returned %d bytes, want the %d sent", stdout.Len(), len(in))
		}
	})
	t.Run("command that ignores stdin", func(t *testing.T) {
		res, err := c.Exec(ctxT(t, 30*time.Second), sandbox.ExecRequest{Argv: []string{"true"}},
			bytes.NewReader(randomBytes(t, 4<<20)), nil, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec = %+v, %v", res, err)
		}
	})
}

func TestExecLargeScript(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	// 1 MiB of here-document: far beyond one argument's 128 KiB.
	line := strings.Repeat("x", 1023) + "\n"
	body := strings.Repeat(line, 1024)
	script := "cat <<'EOF' | wc -c\n" + body + "EOF\necho done\n"
	var stdout, stderr bytes.Buffer
	res, err := c.Exec(ctxT(t, 30*time.Second), sandbox.ExecRequest{Shell: script}, nil, &stdout, &stderr)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(1 MiB script) = %+v, %v; stderr %q", res, err, stderr.String())
	}
	if want := fmt.Sprintf("%d\ndone\n", len(body)); strings.ReplaceAll(stdout.String(), " ", "") != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
}

// TestExecLargeInlineScript sends a script over maxArgScript inside the
// request itself, as another client may: it still must not go through argv.
func TestExecLargeInlineScript(t *testing.T) {
	_, _, sock := startServerSock(t, agent.Options{})
	script := "x='" + strings.Repeat("y", 200<<10) + "'\necho ${#x}\n"
	conn := rawCall(t, sock, agent.Request{Op: agent.OpExec, Exec: &sandbox.ExecRequest{Shell: script}})
	var stdout []byte
	for {
		kind, payload, err := agent.ReadFrame(conn, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch kind {
		case agent.FrameStdout:
			stdout = append(stdout, payload...)
			continue
		case agent.FrameResult:
		default:
			t.Fatalf("frame %q %s", kind, payload)
		}
		break
	}
	if want := fmt.Sprintf("%d\n", 200<<10); string(stdout) != want {
		t.Errorf("stdout = %q, want %q", stdout, want)
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	testTimeoutKillsTree(t, c, false)
}

// testTimeoutKillsTree runs a command that leaves a grandchild in its own
// session (setsid) and a double-forked orphan in its session, and checks
// that the deadline kills them all and still returns the partial output.
// Without a reaper the host's init, which does not reap, inherits them:
// then zombies count as gone.
func testTimeoutKillsTree(t *testing.T, c *agent.Client, reaped bool) {
	script := `setsid sleep 300 & echo $!
( sleep 301 & echo $! )
sleep 302 & echo $!
echo partial >&2
sleep 303`
	var stdout, stderr bytes.Buffer
	start := time.Now()
	res, err := c.Exec(ctxT(t, 30*time.Second), sandbox.ExecRequest{Shell: script, Timeout: sandbox.Duration(700 * time.Millisecond)},
		nil, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Exec took %v after a 700ms timeout", took)
	}
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGKILL" {
		t.Errorf("Exec = %+v, want timed out by SIGKILL", res)
	}
	if stderr.String() != "partial\n" {
		t.Errorf("stderr = %q, want the partial output", stderr.String())
	}
	ps := pids(t, stdout.String())
	if len(ps) != 3 {
		t.Fatalf("stdout %q, want 3 pids", stdout.String())
	}
	for _, pid := range ps {
		gone := func() bool { return !alive(pid) }
		if reaped {
			gone = func() bool { return !exists(pid) }
		}
		waitFor(t, 2*time.Second, fmt.Sprintf("descendant %d survived the timeout", pid), gone)
	}
}

func TestExecCallerGone(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	marker := filepath.Join(home, "survived")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first line, the shell's pid, makes the caller leave.
	first := &firstLine{onLine: cancel}
	start := time.Now()
	_, err := c.Exec(ctx, sandbox.ExecRequest{
		Shell: "echo $$; sleep 0.5; touch " + marker + "; echo lost; exec sleep 300",
		Grace: sandbox.Duration(1500 * time.Millisecond),
	}, nil, first, nil)
	if err != context.Canceled {
		t.Fatalf("Exec after cancel = %v, want context.Canceled", err)
	}
	ps := pids(t, first.String())
	if len(ps) != 1 {
		t.Fatalf("stdout %q, want the pid", first.String())
	}
	waitFor(t, 3*time.Second, "the command did not run on after its caller left", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if !alive(ps[0]) {
		t.Fatalf("command %d died before its grace period ended", ps[0])
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("command %d outlived its grace", ps[0]), func() bool { return !alive(ps[0]) })
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("killed after %v, before the 1.5s grace", took)
	}
}

// TestExecCallerGoneWhileStdinBlocked: the command never reads its stdin,
// so the agent is stuck writing it and cannot read the connection; it must
// still notice the hangup and start the grace period.
func TestExecCallerGoneWhileStdinBlocked(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &firstLine{onLine: cancel}
	_, err := c.Exec(ctx, sandbox.ExecRequest{
		Shell: "echo $$; exec sleep 300",
		Grace: sandbox.Duration(300 * time.Millisecond),
	}, zeros{}, first, nil)
	if err != context.Canceled {
		t.Fatalf("Exec after cancel = %v, want context.Canceled", err)
	}
	ps := pids(t, first.String())
	if len(ps) != 1 {
		t.Fatalf("stdout %q, want the pid", first.String())
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("command %d outlived its grace", ps[0]), func() bool { return !alive(ps[0]) })
}

// zeros is an endless stdin.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// firstLine records what is written and calls onLine once a newline came.
type firstLine struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	onLine func()
	once   sync.Once
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf.Write(p)
	if bytes.IndexByte(f.buf.Bytes(), '\n') >= 0 {
		f.once.Do(f.onLine)
	}
	return len(p), nil
}

func (f *firstLine) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	line, _, _ := strings.Cut(f.buf.String(), "\n")
	return line
}

func TestExecRlimits(t *testing.T) {
	c, home := startServer(t, agent.Options{NProc: 777})
	var stdout, stderr bytes.Buffer
	res, err := c.Exec(ctxT(t, 10*time.Second), sandbox.ExecRequest{Argv: []string{"cat", "/proc/self/limits"}}, nil, &stdout, &stderr)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v (stderr %q)", res, err, stderr.String())
	}
	if got := limit(t, stdout.String(), "Max processes"); got != "777" {
		t.Errorf("command's RLIMIT_NPROC = %s, want 777", got)
	}
	if got := limit(t, stdout.String(), "Max address space"); got != "unlimited" {
		t.Errorf("command's RLIMIT_AS = %s, want unlimited (programs may reserve more than they use)", got)
	}
	self, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	if got := limit(t, string(self), "Max processes"); got == "777" {
		t.Errorf("the agent's own RLIMIT_NPROC became %s", got)
	}

	t.Run("the program is the command, run as the user", func(t *testing.T) {
		var out bytes.Buffer
		_, err := c.Exec(ctxT(t, 10*time.Second), sandbox.ExecRequest{Shell: `tr '\0' ' ' </proc/$$/cmdline; echo; id -u`}, nil, &out, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := "sh -c tr '\\0' ' ' </proc/$$/cmdline; echo; id -u \n65534\n"; out.String() != want {
			t.Errorf("stdout = %q, want %q", out.String(), want)
		}
	})
	t.Run("fork bomb is contained", func(t *testing.T) {
		c, _ := startServer(t, agent.Options{NProc: 20})
		var stdout bytes.Buffer
		res, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{
			Shell: "i=0; while [ $i -lt 40 ]; do sleep 1 & i=$((i+1)); done 2>/dev/null; echo all-forked",
		}, nil, &stdout, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The shell fails to fork and exits; what matters is that the agent
		// lives on and answers.
		if res.ExitCode == 0 || strings.Contains(stdout.String(), "all-forked") {
			t.Errorf("40 background sleeps under RLIMIT_NPROC 20 = %+v, %q, want a failure", res, stdout.String())
		}
		if _, err := c.Ping(ctxT(t, 5*time.Second)); err != nil {
			t.Errorf("Ping after the fork bomb = %v", err)
		}
	})
	t.Run("exec failure with limits", func(t *testing.T) {
		writeFile(t, filepath.Join(home, "garbage"), []byte("\x7fELF-not-really"), 0o755)
		_, err := c.Exec(ctxT(t, 10*time.Second), sandbox.ExecRequest{Argv: []string{"./garbage"}}, nil, nil, nil)
		wantCode(t, err, sandbox.CodeInvalidArgument)
	})
}

func TestExecErrors(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	writeFile(t, filepath.Join(home, "noexec"), []byte("#!/bin/sh\n"), 0o644)
	writeFile(t, filepath.Join(home, "garbage"), []byte("\x7fELF-not-really"), 0o755)
	writeFile(t, filepath.Join(home, "afile"), nil, 0o644)
	tests := []struct {
		name string
		req  sandbox.ExecRequest
		code sandbox.Code
	}{
		{"unknown command", sandbox.ExecRequest{Argv: []string{"no-such-command-here"}}, sandbox.CodeNotFound},
		{"missing program path", sandbox.ExecRequest{Argv: []string{"/no/such/program"}}, sandbox.CodeNotFound},
		{"not executable", sandbox.ExecRequest{Argv: []string{"./noexec"}}, sandbox.CodePermissionDenied},
		{"not an executable format", sandbox.ExecRequest{Argv: []string{"./garbage"}}, sandbox.CodeInvalidArgument},
		{"missing cwd", sandbox.ExecRequest{Shell: "true", Cwd: "nowhere"}, sandbox.CodeNotFound},
		{"cwd is a file", sandbox.ExecRequest{Shell: "true", Cwd: "afile"}, sandbox.CodeInvalidArgument},
		{"argv and shell", sandbox.ExecRequest{Shell: "true", Argv: []string{"true"}}, sandbox.CodeInvalidArgument},
		{"nothing to run", sandbox.ExecRequest{}, sandbox.CodeInvalidArgument},
		{"NUL in argv", sandbox.ExecRequest{Argv: []string{"echo", "a\x00b"}}, sandbox.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			_, err := c.Exec(ctxT(t, 10*time.Second), tc.req, nil, &stdout, nil)
			wantCode(t, err, tc.code)
			if stdout.Len() != 0 {
				t.Errorf("output %q before the error", stdout.String())
			}
		})
	}
}

func TestExecConcurrent(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			var out bytes.Buffer
			res, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{Shell: fmt.Sprintf("echo %d; exit %d", i, i)}, nil, &out, nil)
			if err != nil || res.ExitCode != i || out.String() != fmt.Sprintf("%d\n", i) {
				t.Errorf("Exec %d = %+v, %q, %v", i, res, out.String(), err)
			}
		})
	}
	wg.Wait()
}

func TestExecBackgroundProcessDoesNotHold(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	var out bytes.Buffer
	start := time.Now()
	res, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{Shell: "sleep 30 & echo $!; echo bye"}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Exec waited %v for a background process holding stdout", took)
	}
	ps := pids(t, out.String())
	if len(ps) != 1 || !strings.HasSuffix(out.String(), "bye\n") {
		t.Fatalf("stdout = %q", out.String())
	}
	if !alive(ps[0]) {
		t.Errorf("background process %d was killed at a normal exit", ps[0])
	}
	syscall.Kill(ps[0], syscall.SIGKILL)
}

func BenchmarkExecTrue(b *testing.B) {
	c, _ := startServer(b, agent.Options{})
	benchExec(b, c)
}

// BenchmarkExecTrueRlimits pays for setting the rlimits (a ptrace stop at
// the exec).
func BenchmarkExecTrueRlimits(b *testing.B) {
	c, _ := startServer(b, agent.Options{NProc: 1000})
	benchExec(b, c)
}

func benchExec(b *testing.B, c *agent.Client) {
	ctx := context.Background()
	req := sandbox.ExecRequest{Argv: []string{"true"}}
	for b.Loop() {
		res, err := c.Exec(ctx, req, nil, nil, nil)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec = %+v, %v", res, err)
		}
	}
}

func BenchmarkHostForkExec(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWorkDir checks Options.WorkDir (an image's working directory): the
// default working directory of commands and the base of relative file
// paths, while HOME stays the user's home.
func TestWorkDir(t *testing.T) {
	home := newHome(t)
	work := filepath.Join(home, "app")
	if err := os.Mkdir(work, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(work, 0o777)
	c, _ := startServer(t, agent.Options{Home: home, WorkDir: work})
	ctx := ctxT(t, 30*time.Second)
	var out bytes.Buffer
	if _, err := c.Exec(ctx, sandbox.ExecRequest{Shell: `pwd; echo "$HOME"`}, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if want := work + "\n" + home + "\n"; out.String() != want {
		t.Errorf("pwd and $HOME = %q, want %q", out.String(), want)
	}
	if _, err := c.WriteFile(ctx, sandbox.WriteRequest{Path: "rel.txt"}, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(work, "rel.txt")); err != nil {
		t.Errorf("a relative path is not under the working directory: %v", err)
	}
}
