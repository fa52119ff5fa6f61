package e2e_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestCheckpoints walks the save points an agent uses on every runtime:
// checkpoint → change → restore → the change is gone and the old file is
// back; restore twice; fork independence; checkpoint of a live process
// keeps it running; sleep → exec wakes it with its files intact.
func TestCheckpoints(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "cp"}); err != nil {
			t.Fatal(err)
		}
		sh := func(name, script string) string {
			t.Helper()
			var out bytes.Buffer
			res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: script}, nil, &out, &out)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec %q in %s = %+v, %v, %q", script, name, res, err, out.String())
			}
			return out.String()
		}
		// A background writer keeps running through the checkpoint.
		sh("cp", "echo v1 > data.txt; (i=0; while :; do i=$((i+1)); echo $i > /tmp/tick; sleep 0.05; done) > /dev/null 2>&1 &")
		time.Sleep(200 * time.Millisecond)
		ck, err := c.Checkpoint(ctx, "cp", "before change")
		if err != nil || ck.ID == "" || ck.Label != "before change" || ck.CreatedAt.IsZero() {
			t.Fatalf("Checkpoint = %+v, %v", ck, err)
		}
		before := sh("cp", "cat /tmp/tick")
		time.Sleep(300 * time.Millisecond)
		if after := sh("cp", "cat /tmp/tick"); after == before {
			t.Fatalf("the background writer stopped at the checkpoint: tick %q then %q", before, after)
		}

		sh("cp", "echo v2 > data.txt; echo new > extra.txt")
		if got := sh("cp", "cat data.txt"); got != "v2\n" {
			t.Fatalf("data.txt = %q, want v2", got)
		}
		for round := 1; round <= 2; round++ {
			sb, err := c.Restore(ctx, "cp", ck.ID)
			if err != nil || sb.Status != sandbox.StatusRunning || sb.Head != ck.ID {
				t.Fatalf("Restore #%d = %+v, %v; want running with head %s", round, sb, err, ck.ID)
			}
			if got := sh("cp", "cat data.txt; ls extra.txt 2>&1 || true"); !strings.HasPrefix(got, "v1\n") || !strings.Contains(got, "No such file") {
				t.Fatalf("after restore #%d: %q; want v1 back and extra.txt gone", round, got)
			}
			sh("cp", "echo v3 > data.txt")
		}

		// The size is what the sandbox wrote since its last restore: the
		// 3 MiB blob and a few small files.
		sh("cp", "head -c 3145728 /dev/urandom > blob")
		ck2, err := c.Checkpoint(ctx, "cp", "")
		if err != nil || ck2.Parent != ck.ID || ck2.SizeBytes < 3<<20 || ck2.SizeBytes > 5<<20 || ck.SizeBytes <= 0 {
			t.Fatalf("second Checkpoint = %+v, %v (first's size %d); want parent %s, 3-5 MiB, and a first size above 0", ck2, err, ck.SizeBytes, ck.ID)
		}
		list, err := c.ListCheckpoints(ctx, "cp")
		if err != nil || len(list) != 2 || list[0].ID != ck.ID || list[1].ID != ck2.ID {
			t.Fatalf("ListCheckpoints = %+v, %v; want [%s %s]", list, err, ck.ID, ck2.ID)
		}

		// Fork: a new sandbox from the first checkpoint, independent.
		fk, err := c.Fork(ctx, "cp", ck.ID, "cp-fork")
		if err != nil || fk.Status != sandbox.StatusRunning {
			t.Fatalf("Fork = %+v, %v", fk, err)
		}
		if got := sh("cp-fork", "cat data.txt"); got != "v1\n" {
			t.Fatalf("fork's data.txt = %q, want v1", got)
		}
		sh("cp-fork", "echo forked > data.txt")
		if got := sh("cp", "cat data.txt"); got != "v3\n" {
			t.Fatalf("the original's data.txt after the fork wrote = %q, want v3", got)
		}

		// Delete a checkpoint; its child and the fork keep working.
		if err := c.DeleteCheckpoint(ctx, "cp", ck.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Restore(ctx, "cp", ck.ID); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("Restore(deleted) = %v; want not_found", err)
		}
		if _, err := c.Restore(ctx, "cp", ck2.ID); err != nil {
			t.Fatalf("Restore(child of the deleted) = %v", err)
		}
		if got := sh("cp", "cat data.txt"); got != "v3\n" {
			t.Fatalf("after restoring the second checkpoint data.txt = %q, want v3", got)
		}
		if got := sh("cp-fork", "cat data.txt"); got != "forked\n" {
			t.Fatalf("the fork after its checkpoint was deleted = %q", got)
		}

		// Sleep, then a call wakes it with its files.
		sb, err := c.Sleep(ctx, "cp")
		if err != nil || sb.Status != sandbox.StatusSleeping {
			t.Fatalf("Sleep = %+v, %v", sb, err)
		}
		if got := processesMentioning(sb.ID); len(got) != 0 {
			t.Fatalf("a sleeping sandbox still has processes: %v", got)
		}
		if got := sh("cp", "cat data.txt"); got != "v3\n" {
			t.Fatalf("exec on the sleeping sandbox = %q, want v3", got)
		}
		if sb, err = c.Get(ctx, "cp"); err != nil || sb.Status != sandbox.StatusRunning || !strings.Contains(sb.Reason, "woken") {
			t.Fatalf("after the waking exec: %+v, %v", sb, err)
		}
		if err := c.Destroy(ctx, "cp"); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, d, sb.ID)
		if err := c.Destroy(ctx, "cp-fork"); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, d, fk.ID)
		assertNothingLeft(t, d, ck2.ID) // its snapshot went with its sandbox
	})
}

// TestIdleSleep: a sandbox nobody calls goes to sleep after the idle window
// and the next call wakes it; a running command keeps it awake.
func TestIdleSleep(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.runtimes[0], "--idle-timeout", "2s")
	ctx := ctxT(t)
	c := d.client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "nap"}); err != nil {
		t.Fatal(err)
	}
	// A command longer than the window: no sleep under it.
	if res, err := c.Exec(ctx, "nap", sandbox.ExecRequest{Shell: "sleep 4; echo done > done.txt"}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("long exec = %+v, %v", res, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var sb sandbox.Sandbox
	for {
		var err error
		if sb, err = c.Get(ctx, "nap"); err != nil {
			t.Fatal(err)
		}
		if sb.Status == sandbox.StatusSleeping || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if sb.Status != sandbox.StatusSleeping || !strings.Contains(sb.Reason, "idle") {
		t.Fatalf("after the idle window: %s %q; want sleeping because idle", sb.Status, sb.Reason)
	}
	var out bytes.Buffer
	if res, err := c.Exec(ctx, "nap", sandbox.ExecRequest{Argv: []string{"cat", "done.txt"}}, nil, &out, &out); err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("exec on the sleeping sandbox = %+v, %v, %q", res, err, out.String())
	}
}

// TestDiskLimit: a sandbox cannot write past its size's disk limit; the
// write fails inside it with a clear error, get reports the bytes used and
// the status says the disk is full; a restore frees it again.
func TestDiskLimit(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.client()
		sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "disk"}) // small: 2 GiB
		if err != nil {
			t.Fatal(err)
		}
		if sb.Resources.DiskBytes != 2<<30 {
			t.Fatalf("small sandbox disk limit = %d, want 2 GiB", sb.Resources.DiskBytes)
		}
		ck, err := c.Checkpoint(ctx, "disk", "empty")
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res, err := c.Exec(ctx, "disk", sandbox.ExecRequest{Shell: "fallocate -l 1900M a && head -c 300M /dev/zero > b; echo rc=$?", Timeout: sandbox.Duration(2 * time.Minute)}, nil, &out, &out)
		if err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), "quota exceeded") || strings.Contains(out.String(), "rc=0") {
			t.Fatalf("writing 2.2 GB into a 2 GiB sandbox = %+v, %v, %q; want a disk quota error", res, err, out.String())
		}
		got, err := c.Get(ctx, "disk")
		if err != nil || got.DiskUsedBytes < 1900<<20 || !strings.HasPrefix(got.Reason, "disk full") {
			t.Fatalf("Get after filling the disk = used %d, reason %q, %v; want ≥ 1900 MiB and a disk full reason", got.DiskUsedBytes, got.Reason, err)
		}
		if _, err := c.Restore(ctx, "disk", ck.ID); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if res, err := c.Exec(ctx, "disk", sandbox.ExecRequest{Shell: "head -c 100M /dev/zero > c && echo ok"}, nil, &out, &out); err != nil || res.ExitCode != 0 || out.String() != "ok\n" {
			t.Fatalf("a write after the restore = %+v, %v, %q", res, err, out.String())
		}
	})
}
