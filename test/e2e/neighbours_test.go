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
// processes off the reserved CPU (checkReserved); and the busy one is
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
// daemon's default --reserved-cpus (one): after a call to "calm", every
// thread of the demoted "busy" may run only on the CPUs of the instance's
// cgroup parent less its lowest-numbered one, while calm's may run on all;
// reserveHold (2 s) after the last call, busy's threads may run on all
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
	all, rest := parentCPUs.String(), parentCPUs[1:].String()
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
		t.Errorf("the quiet sandbox's threads may run on %v; want all on %s", got, all)
	}
	deadline := time.Now().Add(5 * time.Second)
	for got := allowed("busy"); !only(got, all); got = allowed("busy") {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the last call, the demoted sandbox's threads may run on %v; want all on %s", got, all)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
