package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestQuietNeighbours: on every runtime a sandbox that saturates its CPU
// share is demoted (its cpu cgroup marked idle) within a few seconds, a
// quiet one beside it is not, and the busy one is promoted back once its
// processes end. (The effect on a quiet sandbox's exec round trip is
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
		stop()
		<-done
		// Cancelling the call leaves the command its grace period; the
		// deadline-free way to end it is to kill it from inside.
		c.Exec(ctx, "busy", sandbox.ExecRequest{Shell: "pkill -KILL -f 'while' || true"}, nil, nil, nil)
		waitFor("once its processes ended", "busy", "0")
	})
}
