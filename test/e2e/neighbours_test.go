package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/sandbox"
)

// TestQuietNeighbours: on every runtime a sandbox that saturates its CPU
// share is demoted (its cpu cgroup marked idle) within a few seconds, a
// quiet one beside it is not; calls to the quiet one keep the busy one's
// processes off the reserved CPU, and the quiet one, called again, on
// one of the busy one's CPUs (checkReserved); and the busy one is
// promoted back once its processes end. (The effect on a quiet sandbox's exec round trip is
// measured by test/load's neighbour scenario.)
func TestQuietNeighbours(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()
		names, err := d.Names()
		if err != nil {
			t.Fatal(err)
		}
		idle := func(name string) string {
			t.Helper()
			sb, err := c.Get(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", names.CgroupParent, sb.ID, "cpu.idle"))
			if err != nil {
				t.Skipf("no v1 cpu.idle on this host: %v", err)
			}
			return strings.TrimSpace(string(b))
		}
		for _, name := range []string{"busy", "calm"} {
			if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
		made := time.Now() // the daemon's last call to calm's agent: its start's
		spin, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Exec(spin, "busy", sandbox.ExecRequest{Shell: "for i in 1 2 3 4; do (while :; do :; done) & done; wait", Timeout: sandbox.Duration(time.Minute)}, nil, nil, nil)
		}()
		waitFor := func(what, name, want string) {
			t.Helper()
			deadline := time.Now().Add(15 * time.Second)
			for idle(name) != want {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s's cpu.idle = %s after 15 s, want %s", what, name, idle(name), want)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		waitFor("while it spins", "busy", "1")
		if got := idle("calm"); got != "0" {
			t.Errorf("the quiet sandbox beside a busy one has cpu.idle %s, want 0", got)
		}
		time.Sleep(time.Until(made.Add(2500 * time.Millisecond))) // the next call one of a new run (reserveHold)
		if res, err := c.Exec(ctx, "calm", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec in the quiet sandbox = %+v, %v", res, err)
		}
		checkReserved(t, ctx, c, names.CgroupParent)
		stop()
		<-done
		// Cancelling the call leaves the command its grace period; the
		// deadline-free way to end it is to kill it from inside.
		c.Exec(ctx, "busy", sandbox.ExecRequest{Shell: "pkill -KILL -f 'while' || true"}, nil, nil, nil)
		waitFor("once its processes ended", "busy", "0")
	})
}

// checkReserved checks, on a host of two or more CPUs, the reserve of the
// daemon's default --reserved-cpus (one), once "calm" was called once:
// every thread of the demoted "busy" may run only on the CPUs of the
// instance's cgroup parent less its lowest-numbered one, and calm's on
// all; called again, every thread of calm may run only on the first of
// busy's CPUs (its sentry and its stubs on one CPU, where it preempts the
// demoted); reserveHold (2 s) after the last call, both may run on all
// again.
func checkReserved(t *testing.T, ctx context.Context, c *client.Client, parent string) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/cpuset", parent)
	b, err := os.ReadFile(filepath.Join(dir, "cpuset.effective_cpus"))
	if err != nil {
		t.Logf("no v1 cpuset hierarchy (%v): the reserve is not checked", err)
		return
	}
	parentCPUs, err := hostusage.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if len(parentCPUs) < 2 {
		t.Logf("the parent's CPUs are %s: no CPU to reserve", parentCPUs)
		return
	}
	all, rest, pin := parentCPUs.String(), parentCPUs[1:].String(), parentCPUs[1:2].String()
	allowed := func(name string) map[string]int {
		sb, err := c.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := os.ReadFile(filepath.Join(dir, sb.ID, "tasks"))
		if err != nil {
			t.Fatal(err)
		}
		lists := map[string]int{}
		for _, tid := range strings.Fields(string(tasks)) {
			status, err := os.ReadFile("/proc/" + tid + "/status")
			if err != nil {
				continue // ended meanwhile
			}
			for line := range strings.SplitSeq(string(status), "\n") {
				if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
					lists[strings.TrimSpace(v)]++
				}
			}
		}
		if len(lists) == 0 {
			t.Fatalf("%s's cpuset cgroup has no thread", name)
		}
		return lists
	}
	only := func(lists map[string]int, want string) bool { return len(lists) == 1 && lists[want] > 0 }
	if got := allowed("busy"); !only(got, rest) {
		t.Errorf("after a call to the quiet sandbox, the demoted one's threads may run on %v (CPUs: threads); want all on %s", got, rest)
	}
	if got := allowed("calm"); !only(got, all) {
		t.Errorf("after one call to the quiet sandbox, its threads may run on %v; want all on %s", got, all)
	}
	if res, err := c.Exec(ctx, "calm", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in the quiet sandbox = %+v, %v", res, err)
	}
	deadline := time.Now().Add(time.Second) // within reserveHold of the call
	for got := allowed("calm"); !only(got, pin); got = allowed("calm") {
		if time.Now().After(deadline) {
			t.Fatalf("after a second call to the quiet sandbox, its threads may run on %v; want all on %s", got, pin)
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline = time.Now().Add(5 * time.Second)
	for _, name := range []string{"busy", "calm"} {
		for got := allowed(name); !only(got, all); got = allowed(name) {
			if time.Now().After(deadline) {
				t.Fatalf("5 s after the last call, %s's threads may run on %v; want all on %s", name, got, all)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
