package node_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/hearth/hearth/driver"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/layers"
	layersfake "github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
)

// world is a node.Local over driver/fake and layers/fake holding the
// image "default", with the crash points it passed.
type world struct {
	n      *node.Local
	drv    *driverfake.Driver
	lay    *layersfake.Store
	points []string
}

// newWorld builds a world; adjust, when set, changes the node's options
// (wrapping its driver or layer store).
func newWorld(t *testing.T, fo driverfake.Options, adjust func(*node.Options)) *world {
	t.Helper()
	lay := layersfake.New(t)
	if err := lay.Import(t.Context(), "default", fstest.MapFS{"home/sandbox": {Mode: fs.ModeDir | 0o755}}); err != nil {
		t.Fatal(err)
	}
	drv := driverfake.New(fo)
	t.Cleanup(func() { drv.Close() }) // before the roots go
	w := &world{drv: drv, lay: lay}
	opts := node.Options{Driver: drv, Layers: lay, AgentPath: "/nonexistent/hearth-agent",
		Crash: func(p string) { w.points = append(w.points, p) }}
	if adjust != nil {
		adjust(&opts)
	}
	n, err := node.NewLocal(opts)
	if err != nil {
		t.Fatalf("NewLocal() = %v", err)
	}
	w.n = n
	return w
}

// start starts sandbox id from src and wants it running.
func (w *world) start(t *testing.T, id string, src node.Source) {
	t.Helper()
	if err := w.n.Start(t.Context(), node.Spec{ID: id, Root: src, Resources: sandbox.Resources{DiskBytes: 1 << 20}}); err != nil {
		t.Fatalf("Start(%s) = %v", id, err)
	}
}

// file is the path of name in sandbox id's root.
func (w *world) file(t *testing.T, id, name string) string {
	t.Helper()
	info, err := w.lay.Stat(t.Context(), "sb-"+id)
	if err != nil {
		t.Fatalf("Stat(root of %s) = %v", id, err)
	}
	return filepath.Join(info.Path, name)
}

func (w *world) write(t *testing.T, id, data string) {
	t.Helper()
	if err := os.WriteFile(w.file(t, id, "data.txt"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (w *world) read(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile(w.file(t, id, "data.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (w *world) inventory(t *testing.T) node.Inventory {
	t.Helper()
	inv, err := w.n.Recover(t.Context())
	if err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	return inv
}

func TestNewLocalRequires(t *testing.T) {
	w := newWorld(t, driverfake.Options{}, nil)
	for _, tt := range []struct {
		name   string
		adjust func(*node.Options)
	}{
		{"no driver", func(o *node.Options) { o.Driver = nil }},
		{"no layers", func(o *node.Options) { o.Layers = nil }},
		{"no agent path", func(o *node.Options) { o.AgentPath = "" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := node.Options{Driver: w.drv, Layers: w.lay, AgentPath: "/a"}
			tt.adjust(&opts)
			if n, err := node.NewLocal(opts); err == nil {
				t.Errorf("NewLocal(%s) = %v, nil; want an error", tt.name, n)
			}
		})
	}
}

// TestStartPreparesRootOnce: the first Start prepares the root from its
// source and caps it; a later one (a wake) starts on the same root,
// whatever the source says.
func TestStartPreparesRootOnce(t *testing.T) {
	w := newWorld(t, driverfake.Options{}, nil)
	ctx := t.Context()
	w.start(t, "x1", node.Source{Image: "default"})
	if got := w.lay.Limit("sb-x1"); got != 1<<20 {
		t.Errorf("root limit = %d, want %d", got, 1<<20)
	}
	if !slices.Equal(w.points, []string{"start: root prepared"}) {
		t.Errorf("crash points = %q, want the root prepared", w.points)
	}
	w.write(t, "x1", "mine")
	if err := w.n.Stop(ctx, "x1"); err != nil {
		t.Fatal(err)
	}
	w.points = nil
	w.start(t, "x1", node.Source{Checkpoint: "nonexistent"})
	if got := w.read(t, "x1"); got != "mine" || len(w.points) != 0 {
		t.Errorf("after a second Start, data = %q, crash points %q; want the same root, not prepared again", got, w.points)
	}
	if n := w.drv.Count(driverfake.OpStart, "x1"); n != 2 {
		t.Errorf("driver Start calls = %d, want 2", n)
	}
	st, err := w.n.State(ctx, "x1")
	if err != nil || st.Status != node.StatusRunning {
		t.Errorf("State(x1) = %+v, %v; want running", st, err)
	}
}

// TestStartRootError: a root the node cannot prepare is ErrRoot, and
// the runtime is never asked.
func TestStartRootError(t *testing.T) {
	w := newWorld(t, driverfake.Options{}, nil)
	err := w.n.Start(t.Context(), node.Spec{ID: "x1", Root: node.Source{Image: "nope"}})
	if !errors.Is(err, node.ErrRoot) {
		t.Errorf("Start(image nope) = %v, want ErrRoot", err)
	}
	if n := w.drv.Count(driverfake.OpStart, "x1"); n != 0 {
		t.Errorf("driver Start calls = %d, want none", n)
	}
}

// TestStartMemoryWithoutCapability: a start from a memory image on a
// runtime that cannot is an error, never a fresh start in its place.
func TestStartMemoryWithoutCapability(t *testing.T) {
	w := newWorld(t, driverfake.Options{}, nil)
	if err := w.n.Start(t.Context(), node.Spec{ID: "x1", Root: node.Source{Image: "default"}, Memory: "c1"}); err == nil || errors.Is(err, node.ErrRoot) {
		t.Errorf("Start(memory c1) = %v, want a start error", err)
	}
	if n := w.drv.Count(driverfake.OpStart, "x1"); n != 0 {
		t.Errorf("driver Start calls = %d, want none", n)
	}
}

// cheapFreezer is driver/fake with a cgroup freezer's cheap freeze.
type cheapFreezer struct{ *driverfake.Driver }

func (d cheapFreezer) Capabilities() driver.Capabilities {
	c := d.Driver.Capabilities()
	c.CheapFreeze = true
	return c
}

// atomicStore is layers/fake claiming btrfs's atomic snapshots.
type atomicStore struct{ *layersfake.Store }

func (atomicStore) AtomicSnapshots() bool { return true }

// TestCheckpointFreezes: a live checkpoint freezes the sandbox around
// the snapshot only when the snapshot needs it (a store that copies) or
// freezing is cheap, never a sandbox that does not run, and always thaws.
func TestCheckpointFreezes(t *testing.T) {
	for _, tt := range []struct {
		name          string
		cheap, atomic bool
		running       bool
		want          bool
	}{
		{"copying store", false, false, true, true},
		{"atomic store, costly freeze", false, true, true, false},
		{"atomic store, cheap freeze", true, true, true, true},
		{"not running", true, false, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, driverfake.Options{}, func(o *node.Options) {
				if tt.cheap {
					o.Driver = cheapFreezer{o.Driver.(*driverfake.Driver)}
				}
				if tt.atomic {
					o.Layers = atomicStore{o.Layers.(*layersfake.Store)}
				}
			})
			w.start(t, "x1", node.Source{Image: "default"})
			w.points = nil
			if err := w.n.Checkpoint(t.Context(), "x1", "c1", node.CheckpointOptions{Running: tt.running}); err != nil {
				t.Fatalf("Checkpoint() = %v", err)
			}
			froze := w.drv.Count(driverfake.OpFreeze, "x1") > 0
			if froze != tt.want || w.drv.Frozen("x1") {
				t.Errorf("froze = %v (still frozen %v), want %v and thawed", froze, w.drv.Frozen("x1"), tt.want)
			}
			want := []string{"checkpoint: snapshot taken"}
			if tt.want {
				want = []string{"checkpoint: frozen", "checkpoint: snapshot taken"}
			}
			if !slices.Equal(w.points, want) {
				t.Errorf("crash points = %q, want %q", w.points, want)
			}
			if inv := w.inventory(t); !slices.Equal(inv.Checkpoints, []string{"c1"}) {
				t.Errorf("checkpoints = %q, want c1", inv.Checkpoints)
			}
		})
	}
}

// failingSnapshots is a layer store whose snapshots fail.
type failingSnapshots struct{ *layersfake.Store }

func (failingSnapshots) Snapshot(ctx context.Context, name, key string) error {
	return errors.New("no snapshots today")
}

// TestCheckpointMemory: with memory, the driver saves the image around
// the snapshot; a failure leaves neither; a runtime that cannot fails.
func TestCheckpointMemory(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, driverfake.Options{Memory: true}, nil)
	w.start(t, "x1", node.Source{Image: "default"})
	if err := w.n.Checkpoint(ctx, "x1", "c1", node.CheckpointOptions{Running: true, Memory: true}); err != nil {
		t.Fatalf("Checkpoint(memory) = %v", err)
	}
	if inv := w.inventory(t); !slices.Equal(inv.Checkpoints, []string{"c1"}) || !slices.Equal(w.drv.Images(), []string{"c1"}) {
		t.Errorf("checkpoints %q, images %q; want c1 and c1", inv.Checkpoints, w.drv.Images())
	}

	f := newWorld(t, driverfake.Options{Memory: true}, func(o *node.Options) {
		o.Layers = failingSnapshots{o.Layers.(*layersfake.Store)}
	})
	f.start(t, "x1", node.Source{Image: "default"})
	if err := f.n.Checkpoint(ctx, "x1", "c1", node.CheckpointOptions{Running: true, Memory: true}); err == nil {
		t.Fatal("Checkpoint(memory) with failing snapshots = nil, want an error")
	}
	if len(f.drv.Images()) != 0 || f.drv.Frozen("x1") {
		t.Errorf("after a failed memory checkpoint, images %q, frozen %v; want none, thawed", f.drv.Images(), f.drv.Frozen("x1"))
	}

	p := newWorld(t, driverfake.Options{}, nil)
	p.start(t, "x1", node.Source{Image: "default"})
	if p.n.Capabilities().MemoryCheckpoint {
		t.Error("Capabilities().MemoryCheckpoint = true for a driver without memory")
	}
	if err := p.n.Checkpoint(ctx, "x1", "c1", node.CheckpointOptions{Running: true, Memory: true}); err == nil {
		t.Error("Checkpoint(memory) on a runtime that cannot = nil, want an error")
	}
	if inv := p.inventory(t); len(inv.Checkpoints) != 0 {
		t.Errorf("checkpoints = %q, want none", inv.Checkpoints)
	}
}

// TestCheckpointStop: with Stop, a running sandbox ends stopped, with its
// memory image or without, and its checkpoint is whole.
func TestCheckpointStop(t *testing.T) {
	ctx := t.Context()
	for _, memory := range []bool{true, false} {
		w := newWorld(t, driverfake.Options{Memory: true}, nil)
		w.start(t, "x1", node.Source{Image: "default"})
		w.write(t, "x1", "v1")
		if err := w.n.Checkpoint(ctx, "x1", "c1", node.CheckpointOptions{Running: true, Memory: memory, Stop: true}); err != nil {
			t.Fatalf("Checkpoint(memory %v, stop) = %v", memory, err)
		}
		if st, err := w.drv.State(ctx, "x1"); err != nil || st.Status != driver.StatusStopped {
			t.Errorf("memory %v: after Checkpoint(stop), State = %+v, %v; want stopped", memory, st, err)
		}
		wantImages := []string(nil)
		if memory {
			wantImages = []string{"c1"}
		}
		if inv := w.inventory(t); !slices.Equal(inv.Checkpoints, []string{"c1"}) || !slices.Equal(w.drv.Images(), wantImages) {
			t.Errorf("memory %v: checkpoints %q, images %q; want c1 and %q", memory, inv.Checkpoints, w.drv.Images(), wantImages)
		}
		if err := w.n.Rollback(ctx, "x1", "c1"); err != nil {
			t.Fatal(err)
		}
		if got := w.read(t, "x1"); got != "v1" {
			t.Errorf("memory %v: the checkpoint holds %q, want v1", memory, got)
		}
	}
}

// TestRollbackAndFork: Rollback puts a checkpoint's content back in the
// root; a Start from it under another id is a fork; DeleteCheckpoint
// removes its snapshot and image.
func TestRollbackAndFork(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, driverfake.Options{Memory: true}, nil)
	w.start(t, "x1", node.Source{Image: "default"})
	w.write(t, "x1", "v1")
	if err := w.n.Checkpoint(ctx, "x1", "c1", node.CheckpointOptions{Running: true, Memory: true}); err != nil {
		t.Fatal(err)
	}
	w.write(t, "x1", "v2")
	if err := w.n.Stop(ctx, "x1"); err != nil {
		t.Fatal(err)
	}
	if err := w.n.Rollback(ctx, "x1", "c1"); err != nil {
		t.Fatalf("Rollback() = %v", err)
	}
	if got := w.read(t, "x1"); got != "v1" {
		t.Errorf("after Rollback, data = %q, want v1", got)
	}
	if err := w.n.Start(ctx, node.Spec{ID: "x1", Memory: "c1"}); err != nil || w.drv.RestoredFrom("x1") != "c1" {
		t.Errorf("Start(memory c1) = %v, restored from %q; want c1", err, w.drv.RestoredFrom("x1"))
	}
	w.start(t, "x2", node.Source{Image: "default", Checkpoint: "c1"})
	if got := w.read(t, "x2"); got != "v1" {
		t.Errorf("fork's data = %q, want v1", got)
	}
	for range 2 { // the second finds nothing: no error
		if err := w.n.DeleteCheckpoint(ctx, "c1"); err != nil {
			t.Fatalf("DeleteCheckpoint() = %v", err)
		}
	}
	if inv := w.inventory(t); len(inv.Checkpoints) != 0 || len(w.drv.Images()) != 0 {
		t.Errorf("after DeleteCheckpoint, checkpoints %q, images %q; want none", inv.Checkpoints, w.drv.Images())
	}
}

// imageLister is driver/fake listing its memory images, as driver/oci
// does.
type imageLister struct{ *driverfake.Driver }

func (d imageLister) MemoryImages(ctx context.Context) ([]string, error) { return d.Images(), nil }

// walkless is a layer store that cannot list its snapshots.
type walkless struct{ layers.Store }

// TestRecoverInventory: Recover reports the runtime's sandboxes, the
// roots, the checkpoints and the memory images; Delete and RemoveRoot
// take a sandbox off it; a store that cannot list says so.
func TestRecoverInventory(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, driverfake.Options{Memory: true}, func(o *node.Options) {
		o.Driver = imageLister{o.Driver.(*driverfake.Driver)}
	})
	w.start(t, "x1", node.Source{Image: "default"})
	w.start(t, "x2", node.Source{Image: "default"})
	if err := w.n.Checkpoint(ctx, "x1", "c1", node.CheckpointOptions{Running: true, Memory: true}); err != nil {
		t.Fatal(err)
	}
	if err := w.n.Delete(ctx, "x2"); err != nil {
		t.Fatal(err)
	}
	inv := w.inventory(t)
	var ids []string
	for _, st := range inv.Sandboxes {
		ids = append(ids, st.ID)
	}
	slices.Sort(inv.Roots)
	if !inv.Listed || !slices.Equal(ids, []string{"x1"}) || !slices.Equal(inv.Roots, []string{"x1", "x2"}) ||
		!slices.Equal(inv.Checkpoints, []string{"c1"}) || !slices.Equal(inv.MemoryImages, []string{"c1"}) {
		t.Errorf("Recover() = %+v, want x1 running, roots x1 and x2, checkpoint and image c1, listed", inv)
	}
	if err := w.n.RemoveRoot(ctx, "x2"); err != nil {
		t.Fatal(err)
	}
	if err := w.n.RemoveRoot(ctx, "x2"); err != nil {
		t.Errorf("RemoveRoot() of a missing root = %v, want nil", err)
	}
	if inv := w.inventory(t); !slices.Equal(inv.Roots, []string{"x1"}) {
		t.Errorf("roots = %q, want x1", inv.Roots)
	}

	n, err := node.NewLocal(node.Options{Driver: w.drv, Layers: walkless{w.lay}, AgentPath: "/a"})
	if err != nil {
		t.Fatal(err)
	}
	if inv, err := n.Recover(ctx); err != nil || inv.Listed || len(inv.Roots)+len(inv.Checkpoints) != 0 {
		t.Errorf("Recover() over a store that cannot list = %+v, %v; want nothing listed", inv, err)
	}
}

func TestHasImageAndUsage(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, driverfake.Options{}, nil)
	w.start(t, "x1", node.Source{Image: "default"})
	for name, want := range map[string]bool{"default": true, "sb-x1": false, "nope": false} {
		if got, err := w.n.HasImage(ctx, name); err != nil || got != want {
			t.Errorf("HasImage(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	w.write(t, "x1", "0123456789")
	if n, err := w.n.Usage(ctx, "x1"); err != nil || n < 10 {
		t.Errorf("Usage(x1) = %d, %v; want at least 10", n, err)
	}
	if avail, total, err := w.n.MemInfo(ctx); avail != 0 || total != 0 || err != nil {
		t.Errorf("MemInfo() without a reader = %d, %d, %v; want nothing known", avail, total, err)
	}
}
