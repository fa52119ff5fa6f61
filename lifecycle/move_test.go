package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/fstest"

	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/layers"
	layersfake "github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// moveEnv is an env whose node ("local") moves sandboxes to a second node
// "b" on its store, with a layer store and runtime of its own; moved
// records each Options.Moved call.
type moveEnv struct {
	*env
	b      *lifecycle.Service
	layB   *layersfake.Store
	nodeB  node.Node
	drvB   *driverfake.Driver
	moved  []string
	refuse error // when set, b refuses every root sent to it
	full   bool  // when set, node local has no room for a sandbox to wake
	quota  error // when set, the fleet refuses every sandbox placed on b
	// fetched are the image layers b fetched from local, in order.
	fetched []string
}

func newMoveEnv(t *testing.T) *moveEnv {
	t.Helper()
	return newMoveEnvOn(t, driverfake.Options{}, driverfake.Options{})
}

// newMoveEnvOn is newMoveEnv with node local's runtime made with runtime
// and node b's with runtimeB.
func newMoveEnvOn(t *testing.T, runtime, runtimeB driverfake.Options) *moveEnv {
	t.Helper()
	m := &moveEnv{layB: layersfake.New(t)}
	if err := m.layB.Import(t.Context(), "default", fstest.MapFS{"etc/hostname": {Data: []byte("default\n"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	drv, drvB := driverfake.New(runtime), driverfake.New(runtimeB)
	t.Cleanup(func() { drv.Close(); drvB.Close() })
	m.drvB = drvB
	m.env = newEnv(t, func(o *envOptions) {
		o.Driver = drv
		o.Move = func(ctx context.Context, target string, sb sandbox.Sandbox, ck string, memory bool, r io.Reader) error {
			if target != "b" {
				return sandbox.Errorf(sandbox.CodeUnavailable, "no node %s", target)
			}
			if m.refuse != nil && ck == "" {
				io.Copy(io.Discard, io.LimitReader(r, 10))
				return m.refuse
			}
			return m.b.Sandboxes.ReceiveSnapshot(ctx, "local", sb.ID, ck, memory, r)
		}
		o.Fits = func(context.Context, sandbox.Sandbox) bool { return !m.full }
		o.PickNode = func(context.Context, sandbox.Sandbox) (string, error) { return "b", nil }
		o.PlaceOn = func(ctx context.Context, sb sandbox.Sandbox, check bool) error {
			switch {
			case sb.Node != "b":
				return sandbox.Errorf(sandbox.CodeUnavailable, "no node %s", sb.Node)
			case m.quota != nil || check:
				return m.quota
			}
			_, err := m.b.Sandboxes.StartPlaced(ctx, sb.Tenant, sb.Name, sb.ID)
			return err
		}
		o.Moved = func(_ context.Context, sb sandbox.Sandbox, from string) {
			m.moved = append(m.moved, sb.Name+" "+from+"->"+sb.Node)
		}
	})
	optsB := m.opts
	optsB.Driver, optsB.Layers, optsB.NodeName, optsB.Move, optsB.Moved, optsB.Fits, optsB.PlaceOn = drvB, m.layB, "b", nil, nil, nil, nil
	// b fetches the image layers it lacks from node local.
	optsB.FetchLayer = func(ctx context.Context, key, base string) (io.ReadCloser, error) {
		var sent bytes.Buffer
		if err := m.svc.Images.SendLayer(ctx, "b", key, base, &sent); err != nil {
			return nil, err
		}
		m.fetched = append(m.fetched, key)
		return io.NopCloser(&sent), nil
	}
	m.nodeB = optsB.node(t)
	m.b = m.newService(t, optsB)
	return m
}

// TestMove: an operator moves a sleeping sandbox to another node: its
// files and its checkpoint are there when it wakes (a restore there puts
// the checkpoint's files back), its row names that node, the old node
// keeps nothing of it, and the fleet is told once. Agents may not move
// sandboxes, and a running sandbox is refused as it is; the receiving
// node takes nothing the rows do not name.
func TestMove(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	sb := m.create(t, a1, "mv")
	if _, err := m.svc.Files.WriteFile(ctx, a1, "mv", sandbox.WriteRequest{Path: "kept"}, strings.NewReader("before the move")); err != nil {
		t.Fatal(err)
	}
	ref := sandbox.Ref(sb.Tenant, sb.Name)
	_, err := m.svc.Sandboxes.Move(ctx, op, ref, "b")
	wantCode(t, "move of a running sandbox", err, sandbox.CodeFailedPrecondition)
	if _, err := m.svc.Sandboxes.Sleep(ctx, a1, "mv"); err != nil {
		t.Fatal(err)
	}
	_, err = m.svc.Sandboxes.Move(ctx, a1, "mv", "b")
	wantCode(t, "move by an agent", err, sandbox.CodePermissionDenied)
	_, err = m.svc.Sandboxes.Move(ctx, op, ref, "local")
	wantCode(t, "move to its own node", err, sandbox.CodeInvalidArgument)

	ck, err := m.svc.Checkpoints.Checkpoint(ctx, a1, "mv", sandbox.CheckpointRequest{Label: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Files.WriteFile(ctx, a1, "mv", sandbox.WriteRequest{Path: "kept"}, strings.NewReader("after the checkpoint")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Sandboxes.Sleep(ctx, a1, "mv"); err != nil {
		t.Fatal(err)
	}
	// Node b takes no checkpoint this sandbox lacks, nor a root of a
	// sandbox that is not the sender's.
	err = m.b.Sandboxes.ReceiveSnapshot(ctx, "local", sb.ID, "nope", false, strings.NewReader("x"))
	wantCode(t, "a checkpoint the sandbox lacks", err, sandbox.CodeNotFound)
	err = m.b.Sandboxes.ReceiveSnapshot(ctx, "c", sb.ID, "", false, strings.NewReader("x"))
	wantCode(t, "a root from a node that is not the sandbox's", err, sandbox.CodeFailedPrecondition)

	// A target that fails leaves the sandbox whole where it was.
	m.refuse = sandbox.Errorf(sandbox.CodeUnavailable, "node b is full")
	_, err = m.svc.Sandboxes.Move(ctx, op, ref, "b")
	wantCode(t, "move to a node that refuses", err, sandbox.CodeUnavailable)
	m.refuse = nil
	if row := m.row(t, "mv"); row.Node != "local" || row.Status != sandbox.StatusSleeping {
		t.Fatalf("after a failed move: node %s, %s; want local, sleeping", row.Node, row.Status)
	}
	if _, err := m.lay.Stat(ctx, "sb-"+sb.ID); err != nil {
		t.Fatalf("after a failed move the root is gone here: %v", err)
	}
	if _, err := m.layB.Stat(ctx, "sb-"+sb.ID); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("after a failed move node b holds a root: %v", err)
	}

	moved, err := m.svc.Sandboxes.Move(ctx, op, ref, "b")
	if err != nil || moved.Node != "b" || moved.Status != sandbox.StatusSleeping {
		t.Fatalf("Move = %+v, %v; want the sandbox asleep on b", moved, err)
	}
	if row := m.row(t, "mv"); row.Node != "b" {
		t.Errorf("the row names node %s after the move, want b", row.Node)
	}
	for _, key := range []string{"sb-" + sb.ID, "ck-" + ck.ID} {
		if _, err := m.lay.Stat(ctx, key); !errors.Is(err, layers.ErrNotFound) {
			t.Errorf("the old node still holds %s after the move: %v", key, err)
		}
		if _, err := m.layB.Stat(ctx, key); err != nil {
			t.Errorf("the new node lacks %s after the move: %v", key, err)
		}
	}
	if len(m.moved) != 1 || m.moved[0] != sb.Name+" local->b" {
		t.Errorf("Moved calls = %q, want one from local to b", m.moved)
	}
	var got bytes.Buffer
	if err := m.b.Files.ReadFile(ctx, a1, "mv", "kept", &got); err != nil || got.String() != "after the checkpoint" {
		t.Errorf("read through b after the move = %q, %v", got.String(), err)
	}
	// Its checkpoint moved with it: a restore on b puts the file back.
	if _, err := m.b.Checkpoints.Restore(ctx, a1, "mv", ck.ID); err != nil {
		t.Fatalf("restore on b of the moved checkpoint = %v", err)
	}
	got.Reset()
	if err := m.b.Files.ReadFile(ctx, a1, "mv", "kept", &got); err != nil || got.String() != "before the move" {
		t.Errorf("read through b after the restore = %q, %v", got.String(), err)
	}
	if row := m.row(t, "mv"); row.Status != sandbox.StatusRunning || row.Node != "b" {
		t.Errorf("after a call through b: %s on %s; want running on b", row.Status, row.Node)
	}
	err = m.svc.Files.ReadFile(ctx, a1, "mv", "kept", io.Discard)
	wantCode(t, "a call through the old node", err, sandbox.CodeUnavailable)
}

// TestWakeMovesWhenFull: a sleeping sandbox that does not fit on its node
// awake moves, when a call wakes it, to the node PickNode chooses; the
// call is unavailable naming that node (moved_to), where the retried call
// wakes it with its files. One that fits wakes where it is.
func TestWakeMovesWhenFull(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	sb := m.create(t, a1, "full")
	if _, err := m.svc.Files.WriteFile(ctx, a1, "full", sandbox.WriteRequest{Path: "f"}, strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	for _, full := range []bool{false, true} {
		if _, err := m.svc.Sandboxes.Sleep(ctx, a1, "full"); err != nil {
			t.Fatal(err)
		}
		m.full = full
		err := m.svc.Files.ReadFile(ctx, a1, "full", "f", io.Discard)
		if !full {
			if err != nil || m.row(t, "full").Node != "local" {
				t.Fatalf("a call on a sandbox that fits = %v, node %s; want woken on local", err, m.row(t, "full").Node)
			}
			continue
		}
		se := wantCode(t, "a call on a sandbox that does not fit", err, sandbox.CodeUnavailable)
		if se.Details["moved_to"] != "b" || m.row(t, "full").Node != "b" {
			t.Fatalf("details %v, node %s; want moved to b", se.Details, m.row(t, "full").Node)
		}
	}
	var got bytes.Buffer
	if err := m.b.Files.ReadFile(ctx, a1, "full", "f", &got); err != nil || got.String() != "kept" {
		t.Errorf("the retried call through b = %q, %v", got.String(), err)
	}
	if _, err := m.lay.Stat(ctx, "sb-"+sb.ID); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("the full node kept the root: %v", err)
	}
}

// TestForkWhenFull: a fork made on a node with no room for it runs on
// the node PickNode chooses, from the checkpoint's files, and the full
// node keeps nothing of it. When the send fails it starts on its own node
// after all; when the fleet's quota refuses it, nothing of it is left
// anywhere.
func TestForkWhenFull(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	src := m.written(t, "src", "at the checkpoint")
	ck, err := m.svc.Checkpoints.Checkpoint(ctx, a1, "src", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Files.WriteFile(ctx, a1, "src", sandbox.WriteRequest{Path: "kept"}, strings.NewReader("after it")); err != nil {
		t.Fatal(err)
	}
	m.full = true
	twin, err := m.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "twin")
	if err != nil || twin.Node != "b" || twin.Status != sandbox.StatusRunning || twin.Reason != "forked from "+src.Name+" at checkpoint "+ck.ID {
		t.Fatalf("Fork on a full node = %s on %q (%q), %v; want running on b, forked", twin.Status, twin.Node, twin.Reason, err)
	}
	m.wantFile(t, m.b, "twin", "at the checkpoint")
	if _, err := m.lay.Stat(ctx, "sb-"+twin.ID); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("the full node kept a root of the fork: %v", err)
	}

	m.refuse = sandbox.Errorf(sandbox.CodeUnavailable, "node b is full too")
	here, err := m.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "here")
	m.refuse = nil
	if err != nil || here.Node != "local" {
		t.Fatalf("Fork when the send fails = node %q, %v; want local", here.Node, err)
	}
	m.wantFile(t, m.svc, "here", "at the checkpoint")
	if _, err := m.layB.Stat(ctx, "sb-"+here.ID); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("node b holds a root of the fork whose send failed: %v", err)
	}

	m.quota = sandbox.Errorf(sandbox.CodeBudgetExceeded, "budget exceeded")
	_, err = m.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "over")
	m.quota = nil
	wantCode(t, "a fork the fleet's quota refuses", err, sandbox.CodeBudgetExceeded)
	if _, err := m.db.Sandboxes().Get(ctx, twin.Tenant, "over"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused fork left its row: %v", err)
	}
	if here, there := rootKeys(t, m.lay), rootKeys(t, m.layB); len(here) != 2 || len(there) != 1 {
		t.Errorf("roots after the refused fork: %q here, %q on b; want src's and here's here, twin's on b", here, there)
	}
}

// TestForkMemoryWhenFull: a fork of a memory checkpoint on a node with
// no room for it resumes its processes on the node that takes it: the
// checkpoint's memory image follows the fork's root there, the fork
// starts from it, and that node's copy goes once it has; the checkpoint
// keeps its own. A node whose runtime keeps no memory image runs the
// fork afresh, said. A node keeps a memory image for a fork only when
// the fork's row names it and it is a memory checkpoint of a sandbox of
// the sending node, and only while the fork is to start there.
func TestForkMemoryWhenFull(t *testing.T) {
	mem := driverfake.Options{Memory: true}
	m := newMoveEnvOn(t, mem, mem)
	ctx := t.Context()
	src := m.written(t, "src", "at the checkpoint")
	ck, err := m.svc.Checkpoints.Checkpoint(ctx, a1, "src", sandbox.CheckpointRequest{Memory: true})
	if err != nil || !ck.Memory {
		t.Fatalf("memory Checkpoint = %+v, %v", ck, err)
	}
	m.full = true
	twin, err := m.svc.Checkpoints.Fork(ctx, a1, "src", ck.ID, "twin")
	if want := "forked from " + src.Name + " at checkpoint " + ck.ID + " with its processes"; err != nil || twin.Node != "b" || twin.Status != sandbox.StatusRunning || twin.Reason != want {
		t.Fatalf("Fork of a memory checkpoint on a full node = %s on %q (%q), %v; want running on b, %q", twin.Status, twin.Node, twin.Reason, err, want)
	}
	if from := m.drvB.RestoredFrom(twin.ID); from != ck.ID {
		t.Errorf("b started the fork from memory image %q, want the checkpoint's, %s", from, ck.ID)
	}
	m.wantFile(t, m.b, "twin", "at the checkpoint")
	if got := m.drvB.Images(); len(got) != 0 {
		t.Errorf("b kept memory images %q after the fork started; want its copy gone", got)
	}
	if got := m.drv.Images(); len(got) != 1 || got[0] != ck.ID {
		t.Errorf("memory images of the checkpoint's node = %q; want the checkpoint's, kept", got)
	}

	// Forged rows: b takes no image they do not name, nor one of a
	// checkpoint without memory or of a sandbox on another node.
	plain, err := m.svc.Checkpoints.Checkpoint(ctx, a1, "src", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	other := m.create(t, a1, "other")
	for i, c := range []struct {
		reason, ck string
		code       sandbox.Code
	}{
		{"moving to node b with the memory of checkpoint " + ck.ID + " of sandbox " + src.ID + ": forked", plain.ID, sandbox.CodeFailedPrecondition},
		{"moving to node b: forked", ck.ID, sandbox.CodeFailedPrecondition},
		{"moving to node b with the memory of checkpoint " + plain.ID + " of sandbox " + src.ID, plain.ID, sandbox.CodeNotFound},
		{"moving to node b with the memory of checkpoint " + ck.ID + " of sandbox " + other.ID, ck.ID, sandbox.CodeNotFound},
	} {
		sb := other
		sb.ID, sb.Name, sb.Status, sb.Reason = fmt.Sprintf("forged%d", i), fmt.Sprintf("forged-%d", i), sandbox.StatusCreating, c.reason
		if err := m.db.Sandboxes().Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		var stream bytes.Buffer
		if err := m.drv.SendMemory(ctx, ck.ID, &stream); err != nil {
			t.Fatal(err)
		}
		err := m.b.Sandboxes.ReceiveSnapshot(ctx, "local", sb.ID, c.ck, true, &stream)
		wantCode(t, "the memory image "+c.ck+" for a row saying "+c.reason, err, c.code)
	}
	if got := m.drvB.Images(); len(got) != 0 {
		t.Errorf("b kept memory images %q for forged rows", got)
	}

	// A fork whose image b received but whose node then undid the create:
	// b's sweep keeps the copy while the row says the fork comes, and
	// removes it once the row is gone.
	gone := other
	gone.ID, gone.Name, gone.Status = "abandoned", "abandoned", sandbox.StatusCreating
	gone.Reason = "moving to node b with the memory of checkpoint " + ck.ID + " of sandbox " + src.ID + ": forked"
	if err := m.db.Sandboxes().Create(ctx, gone); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if err := m.drv.SendMemory(ctx, ck.ID, &stream); err != nil {
		t.Fatal(err)
	}
	if err := m.b.Sandboxes.ReceiveSnapshot(ctx, "local", gone.ID, ck.ID, true, &stream); err != nil {
		t.Fatalf("b's receive of the memory image a fork's row names = %v", err)
	}
	lifecycle.Sweep(ctx, m.b)
	if got := m.drvB.Images(); len(got) != 1 {
		t.Fatalf("b's images after a sweep while the fork comes = %q; want the copy kept", got)
	}
	if err := m.db.Sandboxes().Delete(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	lifecycle.Sweep(ctx, m.b)
	if got := m.drvB.Images(); len(got) != 0 {
		t.Errorf("b's images after a sweep once the fork's create was undone = %q; want the copy gone", got)
	}

	plainB := newMoveEnvOn(t, mem, driverfake.Options{})
	psrc := plainB.written(t, "src", "at the checkpoint")
	pck, err := plainB.svc.Checkpoints.Checkpoint(ctx, a1, "src", sandbox.CheckpointRequest{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	plainB.full = true
	fresh, err := plainB.svc.Checkpoints.Fork(ctx, a1, "src", pck.ID, "fresh")
	if want := "forked from " + psrc.Name + " at checkpoint " + pck.ID + " (its processes started afresh: their memory did not reach node b)"; err != nil || fresh.Node != "b" || fresh.Reason != want {
		t.Fatalf("Fork onto a node without memory images = on %q (%q), %v; want on b, %q", fresh.Node, fresh.Reason, err, want)
	}
	plainB.wantFile(t, plainB.b, "fresh", "at the checkpoint")
}

// TestRestoreMovesWhenFull: a restore of a sleeping sandbox whose node
// has no room for it moves it, checkpoints and all, to the node PickNode
// chooses, and is answered moved_to there, where the retried restore puts
// the checkpoint's files back.
func TestRestoreMovesWhenFull(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	sb := m.written(t, "back", "at the checkpoint")
	ck, err := m.svc.Checkpoints.Checkpoint(ctx, a1, "back", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Files.WriteFile(ctx, a1, "back", sandbox.WriteRequest{Path: "kept"}, strings.NewReader("after it")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Sandboxes.Sleep(ctx, a1, "back"); err != nil {
		t.Fatal(err)
	}
	m.full = true
	_, err = m.svc.Checkpoints.Restore(ctx, a1, "back", ck.ID)
	se := wantCode(t, "a restore on a full node", err, sandbox.CodeUnavailable)
	if se.Details["moved_to"] != "b" || m.row(t, "back").Node != "b" {
		t.Fatalf("details %v, node %s; want moved to b", se.Details, m.row(t, "back").Node)
	}
	if _, err := m.lay.Stat(ctx, "sb-"+sb.ID); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("the full node kept the root: %v", err)
	}
	if _, err := m.b.Checkpoints.Restore(ctx, a1, "back", ck.ID); err != nil {
		t.Fatalf("the retried restore on b = %v", err)
	}
	m.wantFile(t, m.b, "back", "at the checkpoint")
}

// TestForkReceivedOnly: node b keeps a root sent to it only for a
// sandbox being created whose row says it moves to b, and starts the
// sandbox of such a row only on that root, never on a fresh one.
func TestForkReceivedOnly(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	base := m.create(t, a1, "base")
	for i, reason := range []string{"moving to node bb: forked", "moving to node c", "create requested"} {
		sb := base
		sb.ID, sb.Name, sb.Status, sb.Reason = fmt.Sprintf("forged%d", i), fmt.Sprintf("forged-%d", i), sandbox.StatusCreating, reason
		if err := m.db.Sandboxes().Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		err := m.b.Sandboxes.ReceiveSnapshot(ctx, "local", sb.ID, "", false, strings.NewReader("x"))
		wantCode(t, "a root of a create whose row says "+reason, err, sandbox.CodeFailedPrecondition)
	}
	err := m.b.Sandboxes.ReceiveSnapshot(ctx, "local", base.ID, "", false, strings.NewReader("x"))
	wantCode(t, "a root of a running sandbox", err, sandbox.CodeFailedPrecondition)

	lost := base
	lost.ID, lost.Name, lost.Status, lost.Reason = "lost", "lost", sandbox.StatusCreating, "moving to node b: forked"
	if err := m.db.Sandboxes().Create(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if _, err := m.b.Sandboxes.StartPlaced(ctx, lost.Tenant, lost.Name, lost.ID); err == nil {
		t.Fatal("StartPlaced of a fork whose root never came = nil; want an error")
	}
	if _, err := m.layB.Stat(ctx, "sb-lost"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("b made a root for a fork whose root never came: %v", err)
	}
	if _, err := m.db.Sandboxes().Get(ctx, lost.Tenant, "lost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the failed start left its row: %v", err)
	}
}

// wantFile wants file kept of sandbox name, read through svc, to hold
// want.
func (m *moveEnv) wantFile(t *testing.T, svc *lifecycle.Service, name, want string) {
	t.Helper()
	var got bytes.Buffer
	if err := svc.Files.ReadFile(t.Context(), a1, name, "kept", &got); err != nil || got.String() != want {
		t.Errorf("kept of %s = %q, %v; want %q", name, got.String(), err, want)
	}
}

// rootKeys are the sandbox roots lay holds.
func rootKeys(t *testing.T, lay *layersfake.Store) []string {
	t.Helper()
	var out []string
	err := lay.Walk(t.Context(), func(info layers.Info) error {
		if strings.HasPrefix(info.Key, "sb-") {
			out = append(out, info.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMoveKilledAfterSwitch: a node killed once a move switched the row
// to the new node, before it removed its copy: when it recovers, the row
// stays the new node's, which has the sandbox whole, and the old node
// removes its copy (root and checkpoint) instead of adopting it back,
// since the store records node b as another data dir's.
func TestMoveKilledAfterSwitch(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	m.twoDataDirs(t)
	sb := m.written(t, "mv", "moved")
	ck, err := m.svc.Checkpoints.Checkpoint(ctx, a1, "mv", sandbox.CheckpointRequest{Label: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.svc.Sandboxes.Sleep(ctx, a1, "mv"); err != nil {
		t.Fatal(err)
	}
	m.killMoveAt(t, "move: row switched", sb)
	if _, err := m.lay.Stat(ctx, "sb-"+sb.ID); err != nil {
		t.Fatalf("the killed node no longer holds the root; the test kills too late: %v", err)
	}
	if err := m.restart(t).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if row := m.row(t, "mv"); row.Node != "b" {
		t.Fatalf("after the old node recovered the row names %s; want b, which has the sandbox", row.Node)
	}
	for _, key := range []string{"sb-" + sb.ID, "ck-" + ck.ID} {
		if _, err := m.lay.Stat(ctx, key); !errors.Is(err, layers.ErrNotFound) {
			t.Errorf("the old node still holds %s after it recovered: %v", key, err)
		}
	}
	var got bytes.Buffer
	if err := m.b.Files.ReadFile(ctx, a1, "mv", "kept", &got); err != nil || got.String() != "moved" {
		t.Errorf("read through b = %q, %v", got.String(), err)
	}
}

// TestAdoptsRowsOfFormerName: a row naming a node that the store records
// from this node's own data dir (this node under a former name) is
// adopted by the node that holds it.
func TestAdoptsRowsOfFormerName(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	if _, err := e.db.Nodes().Heartbeat(ctx, store.Node{Name: "old-name", Instance: "i-local"}); err != nil {
		t.Fatal(err)
	}
	e.opts.Instance = "i-local"
	sb := e.create(t, a1, "renamed")
	sb.Node = "old-name"
	if err := e.db.Sandboxes().Update(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := e.restart(t).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.row(t, sb.Name); got.Node != "local" || got.Status != sandbox.StatusRunning {
		t.Fatalf("row after Recover = node %q, %s; want adopted by local, running", got.Node, got.Status)
	}
}

// TestMoveKilledBeforeSwitch: a node killed once it sent a sandbox to
// node b, before the row switched: node b, recovering meanwhile, keeps
// what it received (the row says the sandbox is moving there), neither
// adopting nor removing it; the old node, recovering, has the sandbox
// whole, asleep, and the move's retry finishes it.
func TestMoveKilledBeforeSwitch(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	m.twoDataDirs(t)
	sb := m.written(t, "mv", "moved")
	if _, err := m.svc.Sandboxes.Sleep(ctx, a1, "mv"); err != nil {
		t.Fatal(err)
	}
	m.killMoveAt(t, "move: sent", sb)
	if row := m.row(t, "mv"); row.Node != "local" || row.Reason != "moving to node b" {
		t.Fatalf("after the kill the row is on %s, %q; want local, moving to node b", row.Node, row.Reason)
	}
	optsB := m.opts
	optsB.Driver, optsB.Layers, optsB.NodeName, optsB.Instance, optsB.Move, optsB.Moved, optsB.Fits = driverfake.New(driverfake.Options{}), m.layB, "b", "i-b", nil, nil, nil
	if err := m.newService(t, optsB).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.layB.Stat(ctx, "sb-"+sb.ID); err != nil {
		t.Errorf("node b, recovering while the sandbox moved there, dropped what it received: %v", err)
	}
	if row := m.row(t, "mv"); row.Node != "local" {
		t.Fatalf("node b's Recover took the row: it names %s", row.Node)
	}
	svc := m.restart(t)
	if err := svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if row := m.row(t, "mv"); row.Node != "local" || row.Status != sandbox.StatusSleeping || row.Reason == "moving to node b" {
		t.Fatalf("after the old node recovered: %s on %s, %q; want asleep on local, its move no longer under way", row.Status, row.Node, row.Reason)
	}
	if moved, err := svc.Sandboxes.Move(ctx, op, sandbox.Ref(sb.Tenant, sb.Name), "b"); err != nil || moved.Node != "b" {
		t.Fatalf("the move's retry = %+v, %v; want it on b", moved, err)
	}
	var got bytes.Buffer
	if err := m.b.Files.ReadFile(ctx, a1, "mv", "kept", &got); err != nil || got.String() != "moved" {
		t.Errorf("read through b after the retried move = %q, %v", got.String(), err)
	}
}

// written creates sandbox name for a1 with file kept holding data.
func (m *moveEnv) written(t *testing.T, name, data string) sandbox.Sandbox {
	t.Helper()
	sb := m.create(t, a1, name)
	if _, err := m.svc.Files.WriteFile(t.Context(), a1, name, sandbox.WriteRequest{Path: "kept"}, strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	return sb
}

// killMoveAt moves sb to node b on a daemon killed at point.
func (m *moveEnv) killMoveAt(t *testing.T, point string, sb sandbox.Sandbox) {
	t.Helper()
	ref := sandbox.Ref(sb.Tenant, sb.Name)
	m.killAt(t, point, func(ctx context.Context, svc *lifecycle.Service) error {
		_, err := svc.Sandboxes.Move(ctx, op, ref, "b")
		return err
	})
}
