package lifecycle_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hearth/hearth/driver"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/sandbox"
)

func TestCheckpointRestore(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, a1, "web")
	e.exec(t, a1, "web", "echo v1 > data.txt")
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Label: "before"})
	if err != nil || ck.ID == "" || ck.Label != "before" || ck.SandboxID != sb.ID || ck.Parent != "" || ck.SizeBytes != int64(len("v1\n")) {
		t.Fatalf("Checkpoint = %+v, %v; want the root's usage (3 bytes) as its size", ck, err)
	}
	if row := e.row(t, "web"); row.Head != ck.ID || row.Status != sandbox.StatusRunning {
		t.Fatalf("row after Checkpoint = head %q %s; want head %s, running", row.Head, row.Status, ck.ID)
	}
	for round := 1; round <= 2; round++ {
		e.exec(t, a1, "web", "echo v2 > data.txt; echo x > extra.txt")
		got, err := e.svc.Checkpoints.Restore(ctx, a1, "web", ck.ID)
		if err != nil || got.Status != sandbox.StatusRunning || got.Head != ck.ID || !strings.Contains(got.Reason, "restored") {
			t.Fatalf("Restore #%d = %+v, %v", round, got, err)
		}
		if out, _ := e.exec(t, a1, "web", "cat data.txt; test -e extra.txt && echo extra"); out != "v1\n" {
			t.Fatalf("after Restore #%d = %q, want v1 and no extra.txt", round, out)
		}
	}
	ck2, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Label: ""})
	if err != nil || ck2.Parent != ck.ID {
		t.Fatalf("second Checkpoint = %+v, %v; want parent %s", ck2, err, ck.ID)
	}
	list, err := e.svc.Checkpoints.ListCheckpoints(ctx, a1, "web")
	if err != nil || len(list) != 2 || list[0].ID != ck.ID || list[1].ID != ck2.ID {
		t.Fatalf("ListCheckpoints = %+v, %v", list, err)
	}

	// Errors: unknown checkpoint, another agent, a bad label.
	if _, err := e.svc.Checkpoints.Restore(ctx, a1, "web", "cnosuch"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Restore(unknown) = %v, want not_found", err)
	}
	if _, err := e.svc.Checkpoints.Checkpoint(ctx, a2, "web", sandbox.CheckpointRequest{Label: ""}); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Checkpoint by another agent = %v, want not_found", err)
	}
	if _, err := e.svc.Checkpoints.ListCheckpoints(ctx, a2, "web"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("ListCheckpoints by another agent = %v, want not_found", err)
	}
	if _, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Label: "bad\nlabel"}); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
		t.Errorf("Checkpoint(bad label) = %v, want invalid_argument", err)
	}

	// Delete: gone from the list and the layer store; its child still restores.
	if err := e.svc.Checkpoints.DeleteCheckpoint(ctx, a1, "web", ck.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lay.Stat(ctx, "ck-"+ck.ID); err == nil {
		t.Errorf("the deleted checkpoint's snapshot is still there")
	}
	if err := e.svc.Checkpoints.DeleteCheckpoint(ctx, a1, "web", ck.ID); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("second DeleteCheckpoint = %v, want not_found", err)
	}
	if _, err := e.svc.Checkpoints.Restore(ctx, a1, "web", ck2.ID); err != nil {
		t.Fatalf("Restore(child of the deleted) = %v", err)
	}

	// Destroy removes every checkpoint's snapshot.
	if err := e.svc.Sandboxes.Destroy(ctx, a1, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lay.Stat(ctx, "ck-"+ck2.ID); err == nil {
		t.Errorf("a checkpoint's snapshot outlived its sandbox")
	}
}

func TestFork(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.create(t, a1, "src")
	e.exec(t, a1, "src", "echo base > data.txt")
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "src", sandbox.CheckpointRequest{Label: ""})
	if err != nil {
		t.Fatal(err)
	}
	fk, err := e.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "copy")
	if err != nil || fk.Status != sandbox.StatusRunning || fk.Owner != "a1" || !strings.Contains(fk.Reason, "forked") {
		t.Fatalf("Fork = %+v, %v", fk, err)
	}
	e.exec(t, a1, "copy", "echo changed > data.txt")
	if out, _ := e.exec(t, a1, "src", "cat data.txt"); out != "base\n" {
		t.Fatalf("the source after the fork wrote = %q, want base", out)
	}
	if out, _ := e.exec(t, a1, "copy", "cat data.txt"); out != "changed\n" {
		t.Fatalf("the fork = %q, want changed", out)
	}
	if _, err := e.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "copy"); !sandbox.IsCode(err, sandbox.CodeAlreadyExists) {
		t.Errorf("Fork onto an existing name = %v, want already_exists", err)
	}
	if _, err := e.svc.Checkpoints.Fork(ctx, a2, "src", ck.ID, "theirs"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Fork by another agent = %v, want not_found", err)
	}
	if _, err := e.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "Bad_Name"); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
		t.Errorf("Fork to a bad name = %v, want invalid_argument", err)
	}
}

// TestForkMemory: a fork of a checkpoint that holds memory starts from
// that image (the driver restores the source's image into the fork) on
// the checkpoint's files, and says so; with the image gone it starts
// afresh, and says that; a source with a network never resumes in a
// fork (which has none, and runsc restores only into the network the
// image was taken with), which the reason says too.
func TestForkMemory(t *testing.T) {
	drv := driverfake.New(driverfake.Options{Memory: true, Egress: true})
	t.Cleanup(func() { drv.Close() })
	e := newEnv(t, func(o *envOptions) { o.Driver = drv })
	ctx := t.Context()
	src := e.create(t, a1, "src")
	e.exec(t, a1, "src", "echo v1 > data.txt")
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "src", sandbox.CheckpointRequest{Memory: true})
	if err != nil || !ck.Memory {
		t.Fatalf("memory Checkpoint = %+v, %v", ck, err)
	}
	e.exec(t, a1, "src", "echo v2 > data.txt")
	fk, err := e.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "twin")
	if want := "forked from " + src.Name + " at checkpoint " + ck.ID + " with its processes"; err != nil || fk.Status != sandbox.StatusRunning || fk.Reason != want {
		t.Fatalf("Fork of a memory checkpoint = %+v, %v; want running, reason %q", fk, err, want)
	}
	if from := drv.RestoredFrom(fk.ID); from != ck.ID {
		t.Errorf("the driver restored the fork from %q, want the source's image %s", from, ck.ID)
	}
	if out, _ := e.exec(t, a1, "twin", "cat data.txt"); out != "v1\n" {
		t.Errorf("the fork's data.txt = %q, want v1 (the checkpoint's)", out)
	}
	if got := drv.Images(); len(got) != 1 || got[0] != ck.ID {
		t.Errorf("images after the fork = %q, want the checkpoint's alone, kept", got)
	}

	drv.DeleteMemory(ctx, ck.ID)
	fk2, err := e.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "twin2")
	if err != nil || fk2.Status != sandbox.StatusRunning || !strings.Contains(fk2.Reason, "started afresh") || drv.RestoredFrom(fk2.ID) != "" {
		t.Errorf("Fork without the image = %+v, %v (restored from %q); want a fresh start, said", fk2, err, drv.RestoredFrom(fk2.ID))
	}
	if out, _ := e.exec(t, a1, "twin2", "cat data.txt"); out != "v1\n" {
		t.Errorf("the fresh fork's data.txt = %q, want v1", out)
	}

	if _, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "net", Network: sandbox.NetworkEgress}); err != nil {
		t.Fatal(err)
	}
	nck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "net", sandbox.CheckpointRequest{Memory: true})
	if err != nil || !nck.Memory {
		t.Fatalf("memory Checkpoint of an egress sandbox = %+v, %v", nck, err)
	}
	nfk, err := e.svc.Checkpoints.Fork(ctx, a1, "net", nck.ID, "nettwin")
	if err != nil || !strings.Contains(nfk.Reason, "started afresh") || drv.Count(driverfake.OpRestoreMemory, nfk.ID) != 0 {
		t.Errorf("Fork of an egress sandbox's memory checkpoint = %+v, %v (%d restores); want a fresh start, said, and no restore tried",
			nfk, err, drv.Count(driverfake.OpRestoreMemory, nfk.ID))
	}
}

func TestSleepWake(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, a1, "web")
	e.exec(t, a1, "web", "echo kept > data.txt")
	got, err := e.svc.Sandboxes.Sleep(ctx, a1, "web")
	if err != nil || got.Status != sandbox.StatusSleeping || got.Reason != "asked to sleep" {
		t.Fatalf("Sleep = %+v, %v", got, err)
	}
	if st, err := e.runtimeState(t, sb.ID); err == nil && st.Status == "running" {
		t.Fatalf("the runtime still runs a sleeping sandbox")
	}
	if got, err := e.svc.Sandboxes.Sleep(ctx, a1, "web"); err != nil || got.Status != sandbox.StatusSleeping {
		t.Fatalf("second Sleep = %+v, %v; want a no-op", got, err)
	}
	// A checkpoint of a sleeping sandbox does not wake it.
	if _, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Label: "asleep"}); err != nil {
		t.Fatal(err)
	}
	if row := e.row(t, "web"); row.Status != sandbox.StatusSleeping {
		t.Fatalf("after a checkpoint the sleeping sandbox is %s", row.Status)
	}
	got, err = e.svc.Sandboxes.Wake(ctx, a1, "web")
	if err != nil || got.Status != sandbox.StatusRunning {
		t.Fatalf("Wake = %+v, %v", got, err)
	}
	if out, _ := e.exec(t, a1, "web", "cat data.txt"); out != "kept\n" {
		t.Fatalf("after the wake = %q, want kept", out)
	}
	if _, err := e.svc.Sandboxes.Sleep(ctx, a2, "web"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Sleep by another agent = %v, want not_found", err)
	}
}

// TestIdleSleep: the sweep puts a sandbox to sleep once nobody called it
// for the idle window, and reads do not count as calls; a call renews the
// window. (That a running command keeps a sandbox awake is checked end to
// end, in test/e2e, with real time.)
func TestIdleSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(o *envOptions) {
			o.Now = time.Now // synctest's fake clock
			o.IdleTimeout = 10 * time.Minute
			o.SweepInterval = time.Minute
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		e.create(t, a1, "called")
		e.create(t, a1, "idle")
		var wg sync.WaitGroup
		wg.Go(func() { e.svc.Run(ctx) })
		for range 15 {
			time.Sleep(time.Minute)
			e.svc.Sandboxes.Get(ctx, a1, "idle") // reads renew nothing
			if _, err := e.svc.Files.Stat(ctx, a1, "called", "."); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if row := e.row(t, "idle"); row.Status != sandbox.StatusSleeping || !strings.Contains(row.Reason, "idle") {
			t.Errorf("idle after 15m = %s %q; want sleeping because idle", row.Status, row.Reason)
		}
		if row := e.row(t, "called"); row.Status != sandbox.StatusRunning {
			t.Errorf("called every minute, after 15m = %s %q; want running", row.Status, row.Reason)
		}
		cancel()
		wg.Wait()
	})
}

// TestMemoryCheckpoint: with a driver that can, a checkpoint asked with
// memory is taken through the driver (the root snapshotted while the
// sandbox is held still), says so, and its restore starts the sandbox from
// its image; deleting it, or destroying the sandbox, deletes the image. A
// driver that cannot, a sleeping sandbox and a running command are
// refused, with nothing left behind.
func TestMemoryCheckpoint(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.create(t, a1, "plain")
	_, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "plain", sandbox.CheckpointRequest{Memory: true})
	if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) || !strings.Contains(err.Error(), "cannot checkpoint memory") {
		t.Errorf("memory Checkpoint with a driver that cannot = %v, want invalid_argument", err)
	}
	if list, _ := e.svc.Checkpoints.ListCheckpoints(ctx, a1, "plain"); len(list) != 0 {
		t.Errorf("a refused checkpoint left %+v", list)
	}

	drv := driverfake.New(driverfake.Options{Memory: true})
	t.Cleanup(func() { drv.Close() })
	e = newEnv(t, func(o *envOptions) { o.Driver = drv })
	sb := e.create(t, a1, "web")
	e.exec(t, a1, "web", "echo v1 > data.txt")
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Label: "warm", Memory: true})
	if err != nil || !ck.Memory || ck.Label != "warm" {
		t.Fatalf("memory Checkpoint = %+v, %v; want one with memory", ck, err)
	}
	if got := drv.Images(); len(got) != 1 || got[0] != ck.ID {
		t.Errorf("images after the checkpoint = %q, want [%s]", got, ck.ID)
	}
	if drv.Count(driverfake.OpCheckpointMemory, sb.ID) != 1 || drv.Frozen(sb.ID) {
		t.Errorf("CheckpointMemory calls %d, frozen %v; want one call, thawed", drv.Count(driverfake.OpCheckpointMemory, sb.ID), drv.Frozen(sb.ID))
	}
	e.exec(t, a1, "web", "echo v2 > data.txt")
	got, err := e.svc.Checkpoints.Restore(ctx, a1, "web", ck.ID)
	if err != nil || got.Reason != "restored to checkpoint "+ck.ID+" with its processes" {
		t.Fatalf("Restore = %+v, %v; want it restored with its processes", got, err)
	}
	if from := drv.RestoredFrom(sb.ID); from != ck.ID {
		t.Errorf("the driver restored from %q, want the image %s", from, ck.ID)
	}
	if out, _ := e.exec(t, a1, "web", "cat data.txt"); out != "v1\n" {
		t.Errorf("after the restore data.txt = %q, want v1 (the snapshot taken with the image)", out)
	}
	// An image gone: the restore starts the processes afresh, and says so.
	drv.DeleteMemory(ctx, ck.ID)
	if got, err := e.svc.Checkpoints.Restore(ctx, a1, "web", ck.ID); err != nil || !strings.Contains(got.Reason, "started afresh") || drv.RestoredFrom(sb.ID) != "" {
		t.Errorf("Restore without its image = %+v, %v; want a fresh start, said", got, err)
	}

	// A running command: refused, nothing taken.
	started := &firstWrite{c: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.svc.Processes.Exec(context.WithoutCancel(ctx), a1, "web", sandbox.ExecRequest{Shell: "echo started; sleep 1"}, nil, started, nil)
	}()
	<-started.c
	if _, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Memory: true}); !sandbox.IsCode(err, sandbox.CodeUnavailable) || !strings.Contains(err.Error(), "running") {
		t.Errorf("memory Checkpoint under a running command = %v, want unavailable", err)
	}
	<-done

	ck2, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{})
	if err != nil || ck2.Memory {
		t.Fatalf("plain Checkpoint = %+v, %v; want one without memory", ck2, err)
	}
	ck3, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Checkpoints.DeleteCheckpoint(ctx, a1, "web", ck3.ID); err != nil {
		t.Fatal(err)
	}
	if got := drv.Images(); len(got) != 0 {
		t.Errorf("images after deleting the checkpoint = %q, want none", got)
	}
	if _, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Sandboxes.Sleep(ctx, a1, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Memory: true}); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
		t.Errorf("memory Checkpoint of a sleeping sandbox = %v, want invalid_argument", err)
	}
	if err := e.svc.Sandboxes.Destroy(ctx, a1, "web"); err != nil {
		t.Fatal(err)
	}
	if got := drv.Images(); len(got) != 0 {
		t.Errorf("images after destroying the sandbox = %q, want none", got)
	}
}

// firstWrite closes c at its first write.
type firstWrite struct {
	once sync.Once
	c    chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.c) })
	return len(p), nil
}

// TestCheckpointSleep: a checkpoint asked to sleep leaves a running
// sandbox asleep, its Pod's room given back (Asleep): with memory, its
// driver stopped it at the image (never thawed), and a restore of the
// checkpoint resumes its processes from the image; without, it sleeps
// and the checkpoint holds its files. A checkpoint that fails leaves it
// running as it was, with no checkpoint.
func TestCheckpointSleep(t *testing.T) {
	ctx := t.Context()
	drv := driverfake.New(driverfake.Options{Memory: true})
	t.Cleanup(func() { drv.Close() })
	var asleep []string
	e := newEnv(t, func(o *envOptions) {
		o.Driver = drv
		o.Asleep = func(_ context.Context, sb sandbox.Sandbox, a bool) {
			if a {
				asleep = append(asleep, sb.Name)
			}
		}
	})
	sb := e.create(t, a1, "web")
	e.exec(t, a1, "web", "echo v1 > data.txt")
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Memory: true, Sleep: true})
	if err != nil || !ck.Memory {
		t.Fatalf("Checkpoint(memory, sleep) = %+v, %v; want one with memory", ck, err)
	}
	got, err := e.svc.Sandboxes.Get(ctx, a1, "web")
	if err != nil || got.Status != sandbox.StatusSleeping || got.Head != ck.ID || got.Reason != "asleep since checkpoint "+ck.ID {
		t.Errorf("after Checkpoint(memory, sleep) the sandbox = %s %q head %s, %v; want sleeping since %s", got.Status, got.Reason, got.Head, err, ck.ID)
	}
	if st, err := drv.State(ctx, sb.ID); err != nil || st.Status != driver.StatusStopped || drv.Count(driverfake.OpThaw, sb.ID) != 0 {
		t.Errorf("the driver has it %+v, %v, thawed %d times; want stopped, never thawed", st, err, drv.Count(driverfake.OpThaw, sb.ID))
	}
	if !slices.Equal(asleep, []string{sb.Name}) {
		t.Errorf("Asleep told of %q, want [%s]", asleep, sb.Name)
	}
	if got, err := e.svc.Checkpoints.Restore(ctx, a1, "web", ck.ID); err != nil || !strings.HasSuffix(got.Reason, "with its processes") || drv.RestoredFrom(sb.ID) != ck.ID {
		t.Errorf("Restore = %q, %v, from %q; want it resumed from %s", got.Reason, err, drv.RestoredFrom(sb.ID), ck.ID)
	}

	// Files only: asleep, its checkpoint holding what it wrote.
	e.exec(t, a1, "web", "echo v2 > data.txt")
	ck2, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Sleep: true})
	if got, _ := e.svc.Sandboxes.Get(ctx, a1, "web"); err != nil || ck2.Memory || got.Status != sandbox.StatusSleeping {
		t.Fatalf("Checkpoint(sleep) = %+v, %v, sandbox %s; want a files checkpoint and the sandbox asleep", ck2, err, got.Status)
	}
	e.exec(t, a1, "web", "echo v3 > data.txt")
	if _, err := e.svc.Checkpoints.Restore(ctx, a1, "web", ck2.ID); err != nil {
		t.Fatal(err)
	}
	if out, _ := e.exec(t, a1, "web", "cat data.txt"); out != "v2\n" {
		t.Errorf("restored to the sleeping checkpoint, data.txt = %q, want v2", out)
	}

	// A failed checkpoint: running as it was, nothing recorded.
	f := newEnv(t, func(o *envOptions) { o.Layers = failingSnapshots{o.Layers} })
	f.create(t, a1, "web")
	if _, err := f.svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Sleep: true}); err == nil {
		t.Fatal("Checkpoint(sleep) with failing snapshots = nil, want an error")
	}
	if got, _ := f.svc.Sandboxes.Get(ctx, a1, "web"); got.Status != sandbox.StatusRunning || got.Head != "" {
		t.Errorf("after a failed Checkpoint(sleep) the sandbox = %s head %q; want running, no head", got.Status, got.Head)
	}
	if list, _ := f.svc.Checkpoints.ListCheckpoints(ctx, a1, "web"); len(list) != 0 {
		t.Errorf("a failed checkpoint left %+v", list)
	}
}
