package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestKillDuringRestore SIGKILLs the real daemon at a random moment of a
// restore, again and again, and checks after each restart that the sandbox
// is whole: usable, and holding either the old content or the checkpoint's,
// with its head agreeing. (lifecycle's crash tests kill at every step with
// fakes; this one does it with btrfs and the OCI runtime.)
func TestKillDuringRestore(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.runtimes[0])
	ctx := ctxT(t)
	c := d.client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "crash"}); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Exec(ctx, "crash", sandbox.ExecRequest{Shell: script}, nil, &out, &out)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q = %+v, %v, %q", script, res, err, out.String())
		}
		return out.String()
	}
	sh("echo saved > data.txt")
	ck, err := c.Checkpoint(ctx, "crash", "saved")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 6 {
		sh("echo changed > data.txt")
		done := make(chan error, 1)
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := c.Restore(rctx, "crash", ck.ID)
			done <- err
		}()
		time.Sleep(time.Duration(rand.IntN(120)) * time.Millisecond)
		d.kill()
		<-done // fails or succeeds; the daemon is gone either way
		d.start()
		c = d.client()
		sb, err := c.Get(ctx, "crash")
		if err != nil {
			t.Fatalf("round %d: Get after the kill = %v", round, err)
		}
		got := sh("cat data.txt")
		switch got {
		case "saved\n":
			if sb.Head != ck.ID {
				t.Fatalf("round %d: content is the checkpoint's but head = %q", round, sb.Head)
			}
		case "changed\n":
			// The restore did not happen; the old content is intact.
		default:
			t.Fatalf("round %d: after the kill data.txt = %q; want the old content or the checkpoint's", round, got)
		}
		if list, err := c.ListCheckpoints(ctx, "crash"); err != nil || len(list) != 1 || list[0].ID != ck.ID {
			t.Fatalf("round %d: checkpoints after the kill = %+v, %v; want the one checkpoint", round, list, err)
		}
		t.Logf("round %d: killed after the restore began; found %q, status %s (%s)", round, got, sb.Status, sb.Reason)
	}
}

// TestKillDuringCheckpointAndSleep SIGKILLs the real daemon at a random
// moment of a checkpoint, then of a sleep, and checks after each restart
// that every listed checkpoint is whole (restoring the newest brings back
// its content) and that the sandbox answers.
func TestKillDuringCheckpointAndSleep(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.runtimes[0])
	ctx := ctxT(t)
	c := d.client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "crash"}); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Exec(ctx, "crash", sandbox.ExecRequest{Shell: script}, nil, &out, &out)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q = %+v, %v, %q", script, res, err, out.String())
		}
		return out.String()
	}
	killDuring := func(op func(context.Context) error) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			done <- op(octx)
		}()
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		d.kill()
		<-done
		d.start()
		c = d.client()
	}
	for round := range 5 {
		want := fmt.Sprintf("round %d\n", round)
		sh("echo 'round " + fmt.Sprint(round) + "' > data.txt")
		before, err := c.ListCheckpoints(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
		killDuring(func(ctx context.Context) error {
			_, err := c.Checkpoint(ctx, "crash", fmt.Sprintf("round %d", round))
			return err
		})
		after, err := c.ListCheckpoints(ctx, "crash")
		if err != nil || len(after) < len(before) || len(after) > len(before)+1 {
			t.Fatalf("round %d: checkpoints %d before the kill, %+v (%v) after; want the same or one more", round, len(before), after, err)
		}
		if len(after) == len(before)+1 {
			newest := after[len(after)-1]
			sh("echo scribble > data.txt")
			if _, err := c.Restore(ctx, "crash", newest.ID); err != nil {
				t.Fatalf("round %d: restore of the checkpoint taken as the daemon died = %v", round, err)
			}
			if got := sh("cat data.txt"); got != want {
				t.Fatalf("round %d: the checkpoint taken as the daemon died holds %q, want %q", round, got, want)
			}
		}
		killDuring(func(ctx context.Context) error { _, err := c.Sleep(ctx, "crash"); return err })
		sb, err := c.Get(ctx, "crash")
		if err != nil || sb.Status != sandbox.StatusRunning && sb.Status != sandbox.StatusSleeping {
			t.Fatalf("round %d: after a kill during sleep: %+v, %v; want running or sleeping", round, sb, err)
		}
		sh("true")
		t.Logf("round %d: %d → %d checkpoints; after the sleep kill: %s (%s)", round, len(before), len(after), sb.Status, sb.Reason)
	}
}
