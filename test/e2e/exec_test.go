package e2e_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestExecSemantics checks exec's contract on every runtime: timeouts kill
// the whole tree, 124 is only an exit code, stdin streams, large scripts
// need no argv, env and cwd apply, limits contain a fork bomb (a memory hog:
// TestMemoryLimit), and a caller that goes away leaves the command its grace
// period.
func TestExecSemantics(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "ex"}); err != nil {
			t.Fatal(err)
		}
		run := func(req sandbox.ExecRequest, stdin string) (sandbox.ExecResult, string, string) {
			t.Helper()
			var out, errb bytes.Buffer
			var in *strings.Reader
			if req.Stdin {
				in = strings.NewReader(stdin)
			}
			var res sandbox.ExecResult
			var err error
			if in != nil {
				res, err = c.Exec(ctx, "ex", req, in, &out, &errb)
			} else {
				res, err = c.Exec(ctx, "ex", req, nil, &out, &errb)
			}
			if err != nil {
				t.Fatalf("Exec(%+v) = %v", req, err)
			}
			return res, out.String(), errb.String()
		}

		res, out, _ := run(sandbox.ExecRequest{Shell: "echo before; sleep 30 & setsid sleep 31 & sleep 32", Timeout: sandbox.Duration(time.Second)}, "")
		if !res.TimedOut || out != "before\n" {
			t.Fatalf("timeout exec = %+v, %q; want timed_out with the partial output", res, out)
		}
		_, ps, _ := run(sandbox.ExecRequest{Shell: "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"}, "")
		if strings.Contains(ps, "sleep 3") {
			t.Fatalf("after the deadline these remain:\n%s", ps)
		}

		if res, _, _ = run(sandbox.ExecRequest{Shell: "exit 124"}, ""); res.ExitCode != 124 || res.TimedOut {
			t.Fatalf("exit 124 = %+v; want exit code 124, not timed out", res)
		}
		if res, out, _ = run(sandbox.ExecRequest{Argv: []string{"wc", "-c"}, Stdin: true}, strings.Repeat("z", 3<<20)); res.ExitCode != 0 || strings.TrimSpace(out) != "3145728" {
			t.Fatalf("wc -c of 3 MiB stdin = %+v, %q", res, out)
		}
		script := "x=0\n" + strings.Repeat("x=$((x+1))\n", 100_000) + "echo $x\n" // ~1.2 MB
		if res, out, _ = run(sandbox.ExecRequest{Shell: script}, ""); res.ExitCode != 0 || out != "100000\n" {
			t.Fatalf("1.2 MB script = %+v, %q", res, out)
		}
		if _, out, _ = run(sandbox.ExecRequest{Shell: "echo $FOO $HOME; pwd", Env: map[string]string{"FOO": "bar"}, Cwd: "/tmp"}, ""); out != "bar /home/sandbox\n/tmp\n" {
			t.Fatalf("env and cwd = %q", out)
		}
		if _, out, _ = run(sandbox.ExecRequest{Shell: "pwd; id -un"}, ""); out != "/home/sandbox\nsandbox\n" {
			t.Fatalf("default cwd and user = %q", out)
		}
		// The default locale is UTF-8 and comes from the image's locale
		// archive (one file mapped per command, not a dozen).
		if _, out, _ = run(sandbox.ExecRequest{Shell: "echo $LANG; locale charmap; localedef --list-archive"}, ""); out != "C.UTF-8\nUTF-8\nC.utf8\n" {
			t.Fatalf("locale = %q; want LANG C.UTF-8, charmap UTF-8, C.utf8 in the locale archive", out)
		}

		// A fork bomb is contained by the pids limit and the deadline. The
		// leader outlives the deadline: what a command leaves running after
		// it exits on its own is left on purpose (a server started with &).
		// The leader forks exactly once, before any bomb exists, and then
		// execs its sleep: once the bomb has filled the pids limit, any
		// fork of the leader's fails and sh (dash) exits 2 at once. Calling
		// the bomb in the leader would not do: dash forks both halves of
		// `bomb | bomb &` from the calling shell, and on a loaded host the
		// first half can fill the limit before the second is forked.
		if res, _, _ = run(sandbox.ExecRequest{Shell: "bomb() { bomb | bomb & }; bomb & exec sleep 60", Timeout: sandbox.Duration(5 * time.Second)}, ""); !res.TimedOut {
			t.Fatalf("fork bomb = %+v; want timed out", res)
		}
		if res, out, _ = run(sandbox.ExecRequest{Shell: "echo still here"}, ""); res.ExitCode != 0 || out != "still here\n" {
			t.Fatalf("sandbox after a fork bomb: %+v, %q", res, out)
		}
		// The deadline killed the bomb's whole group: its processes go
		// (under gVisor, after a bomb, that can take a minute or two), and
		// what follows runs on a calm sandbox.
		began := time.Now()
		for {
			_, out, _ = run(sandbox.ExecRequest{Shell: "ls -d /proc/[0-9]* | wc -l"}, "")
			if n, err := strconv.Atoi(strings.TrimSpace(out)); err == nil && n < 10 {
				t.Logf("the fork bomb's processes were gone %v after it timed out", time.Since(began).Round(time.Second))
				break
			}
			if time.Since(began) > 4*time.Minute {
				t.Fatalf("4 minutes after the fork bomb timed out, the sandbox still has %s processes", strings.TrimSpace(out))
			}
			time.Sleep(time.Second)
		}
		if sb, err := c.Get(ctx, "ex"); err != nil || sb.Status != sandbox.StatusRunning {
			t.Fatalf("Get(ex) after the abuse = %+v, %v; want running", sb, err)
		}

		// A caller that goes away: the command lives for its grace, then dies.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		var execErr error
		go func() {
			_, execErr = c.Exec(cctx, "ex", sandbox.ExecRequest{Shell: "echo $$ > /tmp/grace.pid; exec sleep 300", Grace: sandbox.Duration(2 * time.Second)}, nil, nil, nil)
			close(done)
		}()
		// The caller leaves once the command runs (after the fork bomb
		// above, its start can take a while under gVisor; and the bomb
		// left the sandbox demoted (quiet neighbours), which on a host
		// saturated by other tests runs last until it is promoted).
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, out, _ := run(sandbox.ExecRequest{Shell: "test -s /tmp/grace.pid && echo started"}, ""); out == "started\n" {
				break
			}
			select {
			case <-done:
				t.Fatalf("the command ended before its caller left: %v", execErr)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the command did not start in 90s")
			}
		}
		cancel()
		<-done
		_, out, _ = run(sandbox.ExecRequest{Shell: "kill -0 $(cat /tmp/grace.pid) && echo alive"}, "")
		if out != "alive\n" {
			t.Fatalf("right after the caller left, the command = %q; want alive during its grace", out)
		}
		time.Sleep(4 * time.Second)
		_, out, _ = run(sandbox.ExecRequest{Shell: "kill -0 $(cat /tmp/grace.pid) 2>/dev/null && echo alive || echo gone"}, "")
		if out != "gone\n" {
			t.Fatalf("after the grace period the command = %q; want gone", out)
		}
	})
}
