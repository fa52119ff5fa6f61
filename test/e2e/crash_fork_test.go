package e2e_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// crashRounds is how many times a test below kills the daemon under
// runtime: fewer under runsc, whose sandboxes take longer to start and
// stop.
func crashRounds(runtime string) int {
	if runtime == "runsc" {
		return 12
	}
	return 20
}

// TestKillDuringFork SIGKILLs the real daemon at a random moment of a fork,
// round after round, and checks after each restart that the fork happened
// whole or not at all: the new sandbox runs (or wakes on exec), holds
// exactly the checkpoint's content and is independent of its source; or it
// does not exist, nothing of it is left, and forking it again works. The
// source and its checkpoint are untouched either way.
func TestKillDuringFork(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "src"}); err != nil {
			t.Fatal(err)
		}
		d.sh(ctx, "src", "echo saved > data.txt; mkdir dir; echo deep > dir/file")
		ck, err := c.Checkpoint(ctx, "src", sandbox.CheckpointRequest{Label: "saved"})
		if err != nil {
			t.Fatal(err)
		}
		d.sh(ctx, "src", "echo changed > data.txt; echo new > extra.txt")
		// wantSource wants the source as the setup left it: running, its
		// one checkpoint its head, its own content.
		wantSource := func(round int) {
			t.Helper()
			sb, err := c.Get(ctx, "src")
			if err != nil || sb.Status != sandbox.StatusRunning || sb.Head != ck.ID {
				t.Fatalf("round %d: the source after the kill = %+v, %v; want running at head %s", round, sb, err, ck.ID)
			}
			if list, err := c.ListCheckpoints(ctx, "src"); err != nil || len(list) != 1 || list[0].ID != ck.ID {
				t.Fatalf("round %d: the source's checkpoints after the kill = %+v, %v; want %s alone", round, list, err, ck.ID)
			}
			if got := d.sh(ctx, "src", "cat data.txt extra.txt"); got != "changed\nnew\n" {
				t.Fatalf("round %d: the source's files after the kill = %q; want its own", round, got)
			}
		}
		// The checkpoint's content, as a fork no kill interrupted shows
		// it; it also measures how long a fork takes.
		const content = "cat data.txt dir/file; ls -A . dir"
		began := time.Now()
		if _, err := c.Fork(ctx, "src", ck.ID, "fork-ref"); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		want := d.sh(ctx, "fork-ref", content)
		if !strings.HasPrefix(want, "saved\ndeep\n") || strings.Contains(want, "extra.txt") {
			t.Fatalf("a fork of the checkpoint holds %q; want data.txt saved, dir/file deep, no extra.txt", want)
		}
		if err := c.Destroy(ctx, "fork-ref"); err != nil {
			t.Fatal(err)
		}
		// wantFork wants name to be a whole fork of the checkpoint, and
		// independent of the source; it returns the fork as found.
		wantFork := func(round int, name string) sandbox.Sandbox {
			t.Helper()
			fk, err := c.Get(ctx, name)
			if err != nil || fk.Status == sandbox.StatusCreating || fk.Head != "" {
				t.Fatalf("round %d: %s = %+v, %v; want a created sandbox with no head", round, name, fk, err)
			}
			if got := d.sh(ctx, name, content); got != want {
				t.Fatalf("round %d: %s holds %q; want the checkpoint's content %q", round, name, got, want)
			}
			if now, err := c.Get(ctx, name); err != nil || now.Status != sandbox.StatusRunning {
				t.Fatalf("round %d: %s after an exec = %+v, %v; want running", round, name, now, err)
			}
			if list, err := c.ListCheckpoints(ctx, name); err != nil || len(list) != 0 {
				t.Fatalf("round %d: %s lists checkpoints %+v, %v; want a tree of its own, empty", round, name, list, err)
			}
			d.sh(ctx, name, "echo forked > data.txt")
			d.sh(ctx, "src", "echo "+name+" > after-fork.txt")
			if got := d.sh(ctx, "src", "cat data.txt"); got != "changed\n" {
				t.Fatalf("round %d: the source's data.txt after %s wrote its own = %q", round, name, got)
			}
			if got := d.sh(ctx, name, "cat data.txt; cat after-fork.txt 2>&1 || true"); !strings.HasPrefix(got, "forked\n") || !strings.Contains(got, "No such file") {
				t.Fatalf("round %d: %s after the source wrote after-fork.txt = %q; want its own data.txt and no after-fork.txt", round, name, got)
			}
			return fk
		}

		r := crashRand(t)
		rounds := crashRounds(runtime)
		span := took * 5 / 4
		t.Logf("an uninterrupted fork took %v; kills spread over %v", took, span)
		for round, delay := range killDelays(r, rounds, span) {
			name := fmt.Sprintf("fork-%d", round)
			forkErr := d.killDuring(ctx, delay, func(ctx context.Context, c *client.Client) error {
				_, err := c.Fork(ctx, "src", ck.ID, name)
				return err
			})
			c = d.Client()
			d.wantWhole(ctx)
			wantSource(round)
			var outcome string
			fk, err := c.Get(ctx, name)
			switch {
			case err == nil && fk.Status == sandbox.StatusCreating:
				// wantWhole failed the test: the restart left the fork
				// half made. The destroy below lets the next rounds run.
				outcome = "left creating"
			case err == nil:
				fk = wantFork(round, name)
				outcome = fmt.Sprintf("forked, found %s (%s)", fk.Status, fk.Reason)
			case sandbox.IsCode(err, sandbox.CodeNotFound):
				if forkErr == nil {
					t.Fatalf("round %d: the daemon acknowledged the fork, but %s is gone after the kill", round, name)
				}
				outcome = "not forked"
				if id := undoneCreate(d.Out.String(), name); id != "" {
					outcome = "not forked, " + id + " undone at the restart"
					assertNothingLeft(t, d, id)
					// The caller, who got no answer, hears why.
					if !strings.Contains(err.Error(), "interrupted by a daemon restart") {
						t.Errorf("round %d: Get(%s) after its undone create = %v; want it to say the create was interrupted", round, name, err)
					}
				}
				if _, err := c.Fork(ctx, "src", ck.ID, name); err != nil {
					t.Fatalf("round %d: forking %s again after the kill = %v", round, name, err)
				}
				fk = wantFork(round, name)
			default:
				t.Fatalf("round %d: Get(%s) after the kill = %v", round, name, err)
			}
			if err := c.Destroy(ctx, name); err != nil {
				t.Fatalf("round %d: Destroy(%s) = %v", round, name, err)
			}
			assertNothingLeft(t, d, fk.ID)
			t.Logf("round %d: killed %v after the fork began (it returned %v): %s", round, delay.Round(time.Millisecond), forkErr, outcome)
		}
	})
}

// undoneCreate returns the id of the sandbox name whose create (or fork)
// the daemon's Recover undid, as its output says, or "".
func undoneCreate(out, name string) string {
	re := regexp.MustCompile(`msg="undoing a create interrupted by a daemon stop".* sandbox=` + regexp.QuoteMeta(name) + ` id=(\S+)`)
	if m := re.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// TestKillDuringDestroy SIGKILLs the real daemon at a random moment of a
// destroy, round after round, and checks after each restart that the
// sandbox is whole (usable, its files and checkpoints intact) or entirely
// gone: no process, mount, cgroup, runtime container, root, checkpoint
// snapshot or row left, and its name free for a new sandbox that lists no
// checkpoint.
func TestKillDuringDestroy(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()
		// create makes the sandbox victim, which starts with no
		// checkpoint even where a destroyed one had some, and gives it
		// two checkpoints and content of its own.
		create := func() (sandbox.Sandbox, []sandbox.Checkpoint) {
			t.Helper()
			sb, created, err := c.Create(ctx, sandbox.CreateRequest{Name: "victim"})
			if err != nil || !created {
				t.Fatalf("Create(victim) = %+v, %v, %v; want a new sandbox", sb, created, err)
			}
			if list, err := c.ListCheckpoints(ctx, "victim"); err != nil || len(list) != 0 {
				t.Fatalf("a new victim lists checkpoints %+v, %v; want none", list, err)
			}
			var cks []sandbox.Checkpoint
			for _, data := range []string{"one", "two"} {
				d.sh(ctx, "victim", "echo "+data+" > data.txt")
				ck, err := c.Checkpoint(ctx, "victim", sandbox.CheckpointRequest{Label: data})
				if err != nil {
					t.Fatal(err)
				}
				cks = append(cks, ck)
			}
			d.sh(ctx, "victim", "echo three > data.txt")
			return sb, cks
		}
		// wantGone wants nothing left of sb and its checkpoints.
		wantGone := func(round int, sb sandbox.Sandbox, cks []sandbox.Checkpoint) {
			t.Helper()
			if got, err := c.Get(ctx, "victim"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
				t.Fatalf("round %d: Get(victim) = %+v, %v; want not_found", round, got, err)
			}
			ids := []string{sb.ID}
			for _, ck := range cks {
				ids = append(ids, ck.ID)
			}
			for _, id := range ids {
				assertNothingLeft(t, d, id)
			}
		}

		sb, cks := create()
		began := time.Now()
		if err := c.Destroy(ctx, "victim"); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		wantGone(-1, sb, cks)

		r := crashRand(t)
		rounds := crashRounds(runtime)
		span := took * 5 / 4
		t.Logf("an uninterrupted destroy took %v; kills spread over %v", took, span)
		for round, delay := range killDelays(r, rounds, span) {
			sb, cks := create()
			destroyErr := d.killDuring(ctx, delay, func(ctx context.Context, c *client.Client) error {
				return c.Destroy(ctx, "victim")
			})
			c = d.Client()
			d.wantWhole(ctx)
			outcome := "gone"
			got, err := c.Get(ctx, "victim")
			switch {
			case err == nil:
				if destroyErr == nil {
					t.Fatalf("round %d: the daemon acknowledged the destroy, but victim is there after the kill: %+v", round, got)
				}
				outcome = fmt.Sprintf("whole, %s (%s)", got.Status, got.Reason)
				if got.ID != sb.ID || got.Head != cks[1].ID {
					t.Fatalf("round %d: victim after the kill = %+v; want %s at head %s", round, got, sb.ID, cks[1].ID)
				}
				list, err := c.ListCheckpoints(ctx, "victim")
				if err != nil || !slices.EqualFunc(list, cks, func(a, b sandbox.Checkpoint) bool { return a.ID == b.ID }) {
					t.Fatalf("round %d: victim's checkpoints after the kill = %+v, %v; want %+v", round, list, err, cks)
				}
				if data := d.sh(ctx, "victim", "cat data.txt"); data != "three\n" {
					t.Fatalf("round %d: victim's data.txt after the kill = %q; want three", round, data)
				}
				for i, want := range []string{"one\n", "two\n"} {
					if _, err := c.Restore(ctx, "victim", cks[i].ID); err != nil {
						t.Fatalf("round %d: Restore(%s) after the kill = %v", round, cks[i].ID, err)
					}
					if data := d.sh(ctx, "victim", "cat data.txt"); data != want {
						t.Fatalf("round %d: victim's data.txt restored to %s = %q; want %q", round, cks[i].ID, data, want)
					}
				}
				if err := c.Destroy(ctx, "victim"); err != nil {
					t.Fatalf("round %d: Destroy(victim) = %v", round, err)
				}
			case !sandbox.IsCode(err, sandbox.CodeNotFound):
				t.Fatalf("round %d: Get(victim) after the kill = %v", round, err)
			}
			wantGone(round, sb, cks)
			t.Logf("round %d: killed %v after the destroy began (it returned %v): %s", round, delay.Round(time.Millisecond), destroyErr, outcome)
		}
		// The name is free again, for a sandbox of its own.
		create()
	})
}
