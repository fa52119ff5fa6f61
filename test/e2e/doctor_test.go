package e2e_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestDoctor: `hearth doctor` against node n0 of two real daemons on one
// Postgres store finds nothing wrong (and checks this host: runsc or runc,
// btrfs, networking), then, once n1 is SIGKILLed and its heartbeats stop,
// exits 1 with a line naming n1 and its last heartbeat.
func TestDoctor(t *testing.T) {
	ds := sharedDaemons(t, 2)
	n0, n1 := ds[0], ds[1]
	ctx := ctxT(t)
	waitHealth(t, ctx, n0, "a leader", func(h sandbox.ClusterHealth) bool { return h.Leader != "" })

	out, stderr, code := n0.CLI("", "doctor")
	if code != 0 || stderr != "" {
		t.Fatalf("hearth doctor on a healthy deployment = exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, name := range []string{"daemon", "store", "schema", "leader", "nodes", "clock", "versions", "runtime", "btrfs", "network"} {
		if !regexp.MustCompile(`(?m)^ok ` + name + `: `).MatchString(out) {
			t.Errorf("hearth doctor printed no %q line:\n%s", "ok "+name+": …", out)
		}
	}
	t.Logf("hearth doctor on a healthy deployment:\n%s", out)
	if !strings.Contains(out, "ok nodes: 2 live: n0, n1\n") {
		t.Errorf("hearth doctor does not count both nodes live:\n%s", out)
	}

	n1.Kill()
	waitHealth(t, ctx, n0, "n1 dead", func(h sandbox.ClusterHealth) bool {
		for _, n := range h.Nodes {
			if n.Name == "n1" {
				return !n.Live
			}
		}
		return false
	})
	out, stderr, code = n0.CLI("", "doctor")
	if code != 1 {
		t.Fatalf("hearth doctor with n1 killed = exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	t.Logf("hearth doctor with n1 killed:\n%s", out)
	dead := regexp.MustCompile(`(?m)^doctor: nodes: node n1 is not live: its last heartbeat was at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+s ago\)`)
	if !dead.MatchString(out) || !regexp.MustCompile(`(?m)^doctor: \d+ problems?$`).MatchString(out) {
		t.Errorf("hearth doctor with n1 killed printed\n%s\nwant a line matching %s and the count", out, dead)
	}

	out, _, code = n0.CLI("", "doctor", "--json")
	if code != 1 || !strings.Contains(out, `"problems": `) || !strings.Contains(out, "node n1 is not live") {
		t.Errorf("hearth doctor --json with n1 killed = exit %d\n%s\nwant 1 and the problem", code, out)
	}
}

// waitHealth waits up to 20 s until d's cluster health satisfies ok,
// described by what for the failure.
func waitHealth(t *testing.T, ctx context.Context, d *daemon, what string, ok func(sandbox.ClusterHealth) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := health(t, ctx, d)
		if ok(h) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, the health of %s shows no %s: %+v", d.URL, what, h)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
