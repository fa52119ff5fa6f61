package lifecycle_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/hearth/hearth/driver"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/layers"
	layersfake "github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// The crash tests kill the daemon at every crash point of every operation
// (the points where lifecycle calls Service.crash, between two durable
// steps), start the next daemon on the same store, layers and runtime, run
// Recover, and want the old state or the new one, whole: rows, snapshots,
// runtime and content agree, and the sandbox works. From the old state,
// retrying the operation must reach the new one.
//
// A kill is emulated in the operation's goroutine: the hook marks the
// daemon dead and calls runtime.Goexit. Goexit runs deferred functions,
// which a SIGKILL does not, so the dead daemon's store, layers and runtime
// refuse (and record) every change asked after the kill, as none would
// reach them from a killed process; the only one lifecycle asks is the
// Thaw that Checkpoint defers after a Freeze, and the test checks that the
// sandbox is left frozen, as a real kill leaves it, until Recover thaws it.

// crashCase is one operation killed at each of its points.
type crashCase struct {
	name string
	// opts, when set, adjusts the service's options.
	opts func(*envOptions)
	// setup makes what the operation acts on.
	setup func(t *testing.T, e *env) scene
	// run is the operation.
	run func(ctx context.Context, svc *lifecycle.Service, sc scene) error
	// points are the crash points run passes, in order, and whether a
	// kill there leaves the new state (else the old).
	points []crashPoint
	// old and new want the old state and the new one, on e.svc.
	old, new func(t *testing.T, e *env, sc scene)
}

type crashPoint struct {
	name string
	new  bool
}

// checkpointCase is a checkpoint of a running sandbox, killed at each of
// its points; with memory, a memory checkpoint (the fake driver's), which
// passes one point more.
func checkpointCase(memory bool) crashCase {
	c := crashCase{
		name: "Checkpoint",
		setup: func(t *testing.T, e *env) scene {
			sb := e.create(t, a1, "web")
			e.write(t, "web", "v1")
			ck := e.checkpoint(t, "web", "first")
			e.write(t, "web", "v2")
			return scene{sb: sb, cks: []sandbox.Checkpoint{ck}, data: "v2"}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			_, err := svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Label: "second", Memory: memory})
			return err
		},
		points: []crashPoint{
			{"checkpoint: row inserted", false},
			{"checkpoint: head moved", false},
			{"checkpoint: frozen", false},
			{"checkpoint: snapshot taken", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			// Its processes never stopped: the next daemon adopted them.
			e.wantRow(t, "web", sandbox.StatusRunning, "adopted")
			e.wantTree(t, "web", sc.cks[0].ID, sc.cks...)
			e.wantData(t, "web", sc.data)
		},
		new: func(t *testing.T, e *env, sc scene) {
			cks := e.checkpoints(t, "web")
			if len(cks) != 2 || cks[0].ID != sc.cks[0].ID || cks[1].Parent != sc.cks[0].ID || cks[1].Label != "second" {
				t.Fatalf("checkpoints = %+v, want %s and a child of it labelled second", cks, sc.cks[0].ID)
			}
			// A memory checkpoint killed before its row said memory is
			// one of the files, whatever image the driver got.
			if cks[1].Memory && !slices.Contains(e.drv.Images(), cks[1].ID) {
				t.Fatalf("checkpoint %s says memory, but the driver has images %q", cks[1].ID, e.drv.Images())
			}
			e.wantRow(t, "web", sandbox.StatusRunning, "")
			e.wantTree(t, "web", cks[1].ID, cks...)
			e.wantData(t, "web", sc.data)
			// The new checkpoint holds what the sandbox held, and the old
			// one still restores.
			e.write(t, "web", "v3")
			e.restore(t, "web", cks[1].ID)
			e.wantData(t, "web", sc.data)
			e.restore(t, "web", cks[0].ID)
			e.wantData(t, "web", "v1")
		},
	}
	if memory {
		c.name = "MemoryCheckpoint"
		c.opts = func(o *envOptions) { o.Driver = driverfake.New(driverfake.Options{Memory: true}) }
		setup := c.setup
		c.setup = func(t *testing.T, e *env) scene {
			t.Cleanup(func() { e.drv.Close() })
			return setup(t, e)
		}
		c.points = append(c.points, crashPoint{"checkpoint: memory saved", true})
	}
	return c
}

// sleepingCheckpointCase is a memory checkpoint that leaves its sandbox
// asleep, killed at each of its points: before the snapshot the sandbox
// runs on, adopted; after it, it sleeps (Recover stops it if the kill
// came before the node did), its checkpoint holding what it held.
func sleepingCheckpointCase() crashCase {
	c := checkpointCase(true)
	c.name = "SleepingCheckpoint"
	c.run = func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
		_, err := svc.Checkpoints.Checkpoint(ctx, a1, "web", sandbox.CheckpointRequest{Label: "second", Memory: true, Sleep: true})
		return err
	}
	c.new = func(t *testing.T, e *env, sc scene) {
		cks := e.checkpoints(t, "web")
		if len(cks) != 2 || cks[1].Parent != sc.cks[0].ID || cks[1].Label != "second" {
			t.Fatalf("checkpoints = %+v, want %s and a child of it labelled second", cks, sc.cks[0].ID)
		}
		e.wantRow(t, "web", sandbox.StatusSleeping, "asleep since checkpoint "+cks[1].ID)
		if st, err := e.drv.State(t.Context(), sc.sb.ID); err != nil || st.Status != driver.StatusStopped {
			t.Fatalf("the runtime has web %+v, %v; want it stopped", st, err)
		}
		e.wantTree(t, "web", cks[1].ID, cks...)
		e.restore(t, "web", cks[1].ID)
		e.wantData(t, "web", sc.data)
	}
	return c
}

// scene is what a crash case's setup made: sandbox web (or src, for
// Fork), its checkpoints, oldest first, and what data.txt holds in it.
type scene struct {
	sb   sandbox.Sandbox
	cks  []sandbox.Checkpoint
	data string
}

var crashCases = []crashCase{
	{
		name:  "Create",
		setup: func(t *testing.T, e *env) scene { return scene{} },
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			_, _, err := svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "web"})
			return err
		},
		points: []crashPoint{
			{"create: row inserted", false},
			{"start: root prepared", false},
			{"create: started", false},
		},
		old: func(t *testing.T, e *env, sc scene) { e.wantGone(t, "web") },
		new: func(t *testing.T, e *env, sc scene) {
			e.wantRow(t, "web", sandbox.StatusRunning, "")
			e.write(t, "web", "new")
			e.wantData(t, "web", "new")
		},
	},
	{
		name: "CreateFromPool",
		opts: func(o *envOptions) { o.WarmPool = map[string]int{"small": 1} },
		setup: func(t *testing.T, e *env) scene {
			lifecycle.FillPool(t.Context(), e.svc)
			return scene{}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			_, _, err := svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "web"})
			return err
		},
		points: []crashPoint{
			{"claim: member picked", false},
			{"claim: row rewritten", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			e.wantGone(t, "web")
			if n := len(e.members(t)); n != 1 {
				t.Fatalf("the pool holds %d members, want the 1 not claimed", n)
			}
		},
		new: func(t *testing.T, e *env, sc scene) {
			// Recover adopted it: its reason now says so.
			if row := e.row(t, "web"); row.Status != sandbox.StatusRunning || row.Owner != a1.Agent || row.Tenant != a1.Tenant || row.ExpiresAt.IsZero() {
				t.Fatalf("web = %+v; want a1's, running, with an expiry", row)
			}
			if n := len(e.members(t)); n != 0 {
				t.Fatalf("the pool holds %d members, want none: the claim took it", n)
			}
			e.write(t, "web", "new")
			e.wantData(t, "web", "new")
		},
	},
	{
		// The sweep removes a member the runtime lost; a control plane
		// could claim it until the member is marked leaving.
		name: "RemoveFromPool",
		opts: func(o *envOptions) { o.WarmPool = map[string]int{"small": 1} },
		setup: func(t *testing.T, e *env) scene {
			lifecycle.FillPool(t.Context(), e.svc)
			m := e.wantMembers(t, 1)[0]
			if err := e.drv.Faults().Die(m.ID, false); err != nil {
				t.Fatal(err)
			}
			return scene{sb: m}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			lifecycle.Sweep(ctx, svc)
			return nil
		},
		points: []crashPoint{
			{"pool: member to remove read", false},
			{"release: runtime deleted", true},
			{"release: row deleted", true},
			{"release: snapshot removed", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			if ms := e.members(t); len(ms) != 1 || ms[0].ID != sc.sb.ID {
				t.Fatalf("the pool's members are %q, want the dead member %s still there", ids(ms...), sc.sb.ID)
			}
		},
		new: func(t *testing.T, e *env, sc scene) {
			// Removed, or leaving: the next refill removes it and makes
			// a new member.
			for _, m := range e.members(t) {
				if m.ID == sc.sb.ID && m.Status == sandbox.StatusRunning {
					t.Fatalf("the dead member %s is still a running member", m.ID)
				}
			}
			lifecycle.FillPool(t.Context(), e.svc)
			if m := e.wantMembers(t, 1)[0]; m.ID == sc.sb.ID {
				t.Fatalf("the pool's member is still the dead one, %s", m.ID)
			}
		},
	},
	{
		name: "Destroy",
		setup: func(t *testing.T, e *env) scene {
			sb := e.create(t, a1, "web")
			e.write(t, "web", "v1")
			return scene{sb: sb, cks: []sandbox.Checkpoint{e.checkpoint(t, "web", "first")}, data: "v1"}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			return svc.Sandboxes.Destroy(ctx, a1, "web")
		},
		points: []crashPoint{
			{"destroy: begun", false},
			{"destroy: reason recorded", true},
			{"release: runtime deleted", true},
			{"release: row deleted", true},
			{"release: snapshot removed", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			// Killed before the destroy recorded why: the sandbox is
			// whole and running.
			e.wantTree(t, "web", sc.cks[0].ID, sc.cks...)
			e.wantData(t, "web", sc.data)
		},
		new: func(t *testing.T, e *env, sc scene) { e.wantGone(t, "web") },
	},
	checkpointCase(false),
	checkpointCase(true),
	sleepingCheckpointCase(),
	{
		name: "DeleteCheckpoint",
		setup: func(t *testing.T, e *env) scene {
			sb := e.create(t, a1, "web")
			e.write(t, "web", "v1")
			ck1 := e.checkpoint(t, "web", "first")
			e.write(t, "web", "v2")
			ck2 := e.checkpoint(t, "web", "second")
			return scene{sb: sb, cks: []sandbox.Checkpoint{ck1, ck2}, data: "v2"}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			return svc.Checkpoints.DeleteCheckpoint(ctx, a1, "web", sc.cks[0].ID)
		},
		points: []crashPoint{
			{"delete checkpoint: row deleted", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			e.wantTree(t, "web", sc.cks[1].ID, sc.cks...)
			e.wantData(t, "web", sc.data)
		},
		new: func(t *testing.T, e *env, sc scene) {
			e.wantTree(t, "web", sc.cks[1].ID, sc.cks[1])
			e.write(t, "web", "v3")
			e.restore(t, "web", sc.cks[1].ID)
			e.wantData(t, "web", sc.data)
		},
	},
	{
		name: "Restore",
		setup: func(t *testing.T, e *env) scene {
			sb := e.create(t, a1, "web")
			e.write(t, "web", "v1")
			ck1 := e.checkpoint(t, "web", "first")
			e.write(t, "web", "v2")
			ck2 := e.checkpoint(t, "web", "second")
			e.write(t, "web", "v3") // written after the last checkpoint
			return scene{sb: sb, cks: []sandbox.Checkpoint{ck1, ck2}, data: "v3"}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			_, err := svc.Checkpoints.Restore(ctx, a1, "web", sc.cks[0].ID)
			return err
		},
		points: []crashPoint{
			{"restore: stopped", false},
			{"restore: row marked", true},
			{"restore: root reset", true},
			{"restore: started", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			// Restore had stopped its processes: the next call wakes it.
			e.wantTree(t, "web", sc.cks[1].ID, sc.cks...)
			e.wantData(t, "web", sc.data)
		},
		new: func(t *testing.T, e *env, sc scene) {
			e.wantRow(t, "web", "", "restored to checkpoint "+sc.cks[0].ID)
			e.wantTree(t, "web", sc.cks[0].ID, sc.cks...)
			e.wantData(t, "web", "v1")
		},
	},
	{
		name:  "Fork",
		setup: forkSetup,
		run:   forkRun,
		points: []crashPoint{
			{"create: row inserted", false},
			{"start: root prepared", false},
			{"create: started", false},
		},
		old: forkOld,
		new: func(t *testing.T, e *env, sc scene) {
			e.wantRow(t, "copy", sandbox.StatusRunning, "forked")
			e.wantTree(t, "copy", "")
			e.wantData(t, "copy", "v1")
			e.wantTree(t, "src", sc.cks[0].ID, sc.cks...)
			e.wantData(t, "src", sc.data)
		},
	},
	{
		name: "Sleep",
		setup: func(t *testing.T, e *env) scene {
			sb := e.create(t, a1, "web")
			e.write(t, "web", "v1")
			return scene{sb: sb, data: "v1"}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			_, err := svc.Sandboxes.Sleep(ctx, a1, "web")
			return err
		},
		points: []crashPoint{
			{"sleep: row updated", false},
		},
		old: func(t *testing.T, e *env, sc scene) {
			e.wantRow(t, "web", sandbox.StatusRunning, "adopted")
			e.wantData(t, "web", sc.data)
		},
		new: func(t *testing.T, e *env, sc scene) {
			e.wantRow(t, "web", sandbox.StatusSleeping, "asked to sleep")
			e.wantData(t, "web", sc.data)
		},
	},
	moveCrashCase(),
	forkElsewhereCrashCase(false),
	forkElsewhereCrashCase(true),
	{
		name: "Wake",
		setup: func(t *testing.T, e *env) scene {
			sb := e.create(t, a1, "web")
			e.write(t, "web", "v1")
			if _, err := e.svc.Sandboxes.Sleep(t.Context(), a1, "web"); err != nil {
				t.Fatal(err)
			}
			return scene{sb: sb, data: "v1"}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			_, err := svc.Sandboxes.Wake(ctx, a1, "web")
			return err
		},
		points: []crashPoint{
			{"wake: started", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			e.wantRow(t, "web", sandbox.StatusSleeping, "")
			e.wantData(t, "web", sc.data)
		},
		new: func(t *testing.T, e *env, sc scene) {
			e.wantRow(t, "web", sandbox.StatusRunning, "")
			e.wantData(t, "web", sc.data)
		},
	},
}

// TestCrash kills each operation at each of its crash points.
func TestCrash(t *testing.T) {
	for _, tc := range crashCases {
		for _, pt := range tc.points {
			t.Run(tc.name+"/"+pt.name, func(t *testing.T) {
				e := newEnv(t, tc.opts)
				sc := tc.setup(t, e)
				afterlife := e.killAt(t, pt.name, func(ctx context.Context, svc *lifecycle.Service) error {
					return tc.run(ctx, svc, sc)
				})
				// Only Checkpoint's deferred Thaw runs after the kill; a
				// real kill leaves the sandbox frozen.
				switch {
				case len(afterlife) == 0:
				case slices.Equal(afterlife, []string{"Thaw"}):
					if !e.drv.Frozen(sc.sb.ID) {
						t.Errorf("after a kill at %q, %s is not frozen; want it frozen, as a killed daemon leaves it", pt.name, sc.sb.Name)
					}
				default:
					t.Errorf("after the kill at %q the daemon still asked %q", pt.name, afterlife)
				}

				e.svc = e.restart(t)
				if err := e.svc.Recover(t.Context()); err != nil {
					t.Fatalf("Recover() = %v", err)
				}
				e.wantWhole(t)
				if pt.new {
					tc.new(t, e, sc)
					return
				}
				tc.old(t, e, sc)
				// From the old state, the operation works when retried.
				if err := tc.run(t.Context(), e.svc, sc); err != nil {
					t.Fatalf("%s retried after Recover = %v", tc.name, err)
				}
				e.wantWhole(t)
				tc.new(t, e, sc)
			})
		}
	}
}

// TestCrashPoints wants the crash cases to name every crash point each
// operation passes, in order, and every point the code has.
func TestCrashPoints(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range crashCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			sc := tc.setup(t, e)
			var seen []string
			hook := func(point string) {
				if !slices.Contains(seen, point) {
					seen = append(seen, point)
				}
			}
			opts := e.opts
			opts.crash = hook // the points inside node.Local's calls
			svc := e.newService(t, opts)
			lifecycle.SetCrashHook(svc, hook)
			if err := tc.run(t.Context(), svc, sc); err != nil {
				t.Fatalf("%s = %v", tc.name, err)
			}
			var want []string
			for _, pt := range tc.points {
				want = append(want, pt.name)
				covered[pt.name] = true
			}
			if !slices.Equal(seen, want) {
				t.Errorf("%s passes the crash points %q, the test kills it at %q", tc.name, seen, want)
			}
		})
	}

	// lifecycle's points, and those inside node.Local's calls.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	inNode, err := filepath.Glob("../node/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, inNode...)
	call := regexp.MustCompile(`(?:s|l)\.crash\("([^"]+)"\)`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllSubmatch(src, -1) {
			if !covered[string(m[1])] {
				t.Errorf("%s has the crash point %q, which no crash case kills", f, m[1])
			}
		}
	}
}

// killAt runs op on a daemon over e's store, layers and runtime, kills it
// at point, and returns the changes it asked for after its death, which
// were refused. It fails the test if op ends without passing point.
func (e *env) killAt(t *testing.T, point string, op func(context.Context, *lifecycle.Service) error) (afterlife []string) {
	t.Helper()
	g := &grave{}
	opts := e.opts
	opts.Store = mortalStore{e.db, g}
	opts.Layers = mortalLayers{e.lay, g}
	opts.Driver = mortalDriver{e.drv, g}
	hook := func(p string) {
		if p == point {
			g.kill()
			runtime.Goexit()
		}
	}
	opts.crash = hook // the points inside node.Local's calls
	svc := e.newService(t, opts)
	lifecycle.SetCrashHook(svc, hook)
	returned := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		returned <- op(t.Context(), svc)
	}()
	<-ended
	select {
	case err := <-returned:
		t.Fatalf("the operation returned %v without passing %q", err, point)
	default:
	}
	return g.afterlife()
}

// grave is shared by a daemon's store, layers and runtime: once it is
// dead, they refuse every change and record it.
type grave struct {
	mu    sync.Mutex
	dead  bool
	tried []string
}

var errKilled = errors.New("the daemon was killed")

func (g *grave) kill() {
	g.mu.Lock()
	g.dead = true
	g.mu.Unlock()
}

// deny returns errKilled, and records call, once the daemon is dead.
func (g *grave) deny(call string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.dead {
		return nil
	}
	g.tried = append(g.tried, call)
	return errKilled
}

func (g *grave) afterlife() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.tried)
}

// mortalStore is a store whose sandbox and checkpoint writes fail once
// the daemon is dead.
type mortalStore struct {
	store.Store
	g *grave
}

func (s mortalStore) Sandboxes() store.Sandboxes {
	return mortalSandboxes{s.Store.Sandboxes(), s.g}
}

func (s mortalStore) Checkpoints() store.Checkpoints {
	return mortalCheckpoints{s.Store.Checkpoints(), s.g}
}

type mortalSandboxes struct {
	store.Sandboxes
	g *grave
}

func (s mortalSandboxes) Create(ctx context.Context, sb sandbox.Sandbox) error {
	if err := s.g.deny("CreateSandbox"); err != nil {
		return err
	}
	return s.Sandboxes.Create(ctx, sb)
}

func (s mortalSandboxes) Update(ctx context.Context, sb sandbox.Sandbox) error {
	if err := s.g.deny("UpdateSandbox"); err != nil {
		return err
	}
	return s.Sandboxes.Update(ctx, sb)
}

func (s mortalSandboxes) Swap(ctx context.Context, was, sb sandbox.Sandbox) (bool, error) {
	if err := s.g.deny("UpdateSandbox"); err != nil {
		return false, err
	}
	return s.Sandboxes.Swap(ctx, was, sb)
}

func (s mortalSandboxes) Delete(ctx context.Context, id string) error {
	if err := s.g.deny("DeleteSandbox"); err != nil {
		return err
	}
	return s.Sandboxes.Delete(ctx, id)
}

func (s mortalSandboxes) DeleteIf(ctx context.Context, was sandbox.Sandbox) (bool, error) {
	if err := s.g.deny("DeleteSandbox"); err != nil {
		return false, err
	}
	return s.Sandboxes.DeleteIf(ctx, was)
}

type mortalCheckpoints struct {
	store.Checkpoints
	g *grave
}

func (s mortalCheckpoints) Create(ctx context.Context, c sandbox.Checkpoint) error {
	if err := s.g.deny("CreateCheckpoint"); err != nil {
		return err
	}
	return s.Checkpoints.Create(ctx, c)
}

func (s mortalCheckpoints) Delete(ctx context.Context, id string) error {
	if err := s.g.deny("DeleteCheckpoint"); err != nil {
		return err
	}
	return s.Checkpoints.Delete(ctx, id)
}

type mortalLayers struct {
	*layersfake.Store
	g *grave
}

func (l mortalLayers) Prepare(ctx context.Context, key, parent string) (string, error) {
	if err := l.g.deny("Prepare"); err != nil {
		return "", err
	}
	return l.Store.Prepare(ctx, key, parent)
}

func (l mortalLayers) Commit(ctx context.Context, name, key string) error {
	if err := l.g.deny("Commit"); err != nil {
		return err
	}
	return l.Store.Commit(ctx, name, key)
}

func (l mortalLayers) Snapshot(ctx context.Context, name, key string) error {
	if err := l.g.deny("Snapshot"); err != nil {
		return err
	}
	return l.Store.Snapshot(ctx, name, key)
}

func (l mortalLayers) Reset(ctx context.Context, key, parent string) (string, error) {
	if err := l.g.deny("Reset"); err != nil {
		return "", err
	}
	return l.Store.Reset(ctx, key, parent)
}

func (l mortalLayers) Remove(ctx context.Context, key string) error {
	if err := l.g.deny("Remove"); err != nil {
		return err
	}
	return l.Store.Remove(ctx, key)
}

type mortalDriver struct {
	*driverfake.Driver
	g *grave
}

func (d mortalDriver) Start(ctx context.Context, spec driver.Spec) error {
	if err := d.g.deny("Start"); err != nil {
		return err
	}
	return d.Driver.Start(ctx, spec)
}

func (d mortalDriver) Stop(ctx context.Context, id string) error {
	if err := d.g.deny("Stop"); err != nil {
		return err
	}
	return d.Driver.Stop(ctx, id)
}

func (d mortalDriver) Delete(ctx context.Context, id string) error {
	if err := d.g.deny("Delete"); err != nil {
		return err
	}
	return d.Driver.Delete(ctx, id)
}

func (d mortalDriver) Freeze(ctx context.Context, id string) error {
	if err := d.g.deny("Freeze"); err != nil {
		return err
	}
	return d.Driver.Freeze(ctx, id)
}

func (d mortalDriver) Thaw(ctx context.Context, id string) error {
	if err := d.g.deny("Thaw"); err != nil {
		return err
	}
	return d.Driver.Thaw(ctx, id)
}

// wantWhole wants the host to hold whole sandboxes only: no row still
// creating; a root for each row and no other; a snapshot for each
// checkpoint row and no other; a head that is empty or one of the
// sandbox's checkpoints (these tests never delete a head); nothing frozen;
// no runtime sandbox without a row; and one running exactly under each row
// that says running.
func (e *env) wantWhole(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	rows, err := e.db.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var wantRoots, wantCks []string
	owned := map[string]bool{}
	for _, sb := range rows {
		owned[sb.ID] = true
		if sb.Node != "" && sb.Node != cmp.Or(e.opts.NodeName, "local") {
			continue // another node's: this one holds nothing of it
		}
		wantRoots = append(wantRoots, "sb-"+sb.ID)
		if sb.Status == sandbox.StatusCreating {
			t.Errorf("%s is still creating", sb.Name)
		}
		if e.drv.Frozen(sb.ID) {
			t.Errorf("%s is frozen", sb.Name)
		}
		cks, err := e.db.Checkpoints().List(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cks {
			wantCks = append(wantCks, "ck-"+c.ID)
		}
		if sb.Head != "" && !slices.ContainsFunc(cks, func(c sandbox.Checkpoint) bool { return c.ID == sb.Head }) {
			t.Errorf("%s's head %s is none of its checkpoints %+v", sb.Name, sb.Head, cks)
		}
		st, err := e.drv.State(ctx, sb.ID)
		if running := err == nil && st.Status == driver.StatusRunning; running != (sb.Status == sandbox.StatusRunning) {
			t.Errorf("%s's row says %s, the runtime %+v, %v", sb.Name, sb.Status, st, err)
		}
	}
	var roots, cks []string
	if err := e.lay.Walk(ctx, func(info layers.Info) error {
		switch {
		case strings.HasPrefix(info.Key, "sb-") && info.Kind == layers.KindActive:
			roots = append(roots, info.Key)
		case strings.HasPrefix(info.Key, "ck-") && info.Kind == layers.KindCommitted:
			cks = append(cks, info.Key)
		case info.Key != "default":
			t.Errorf("the layer store holds %+v", info)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"roots", roots, wantRoots}, {"checkpoint snapshots", cks, wantCks}} {
		slices.Sort(c.got)
		if slices.Sort(c.want); !slices.Equal(c.got, c.want) {
			t.Errorf("the layer store holds %s %q, the rows %q", c.what, c.got, c.want)
		}
	}
	for _, id := range e.holdings(t).runtime {
		if !owned[id] {
			t.Errorf("the runtime holds %s, which no row owns", id)
		}
	}
}

// wantGone wants no sandbox called name.
func (e *env) wantGone(t *testing.T, name string) {
	t.Helper()
	if sb, err := e.find(t, name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSandbox(%s) = %+v, %v; want it gone", name, sb, err)
	}
}

// wantRow wants sandbox name's row to have status (any when "") and a
// reason containing reason.
func (e *env) wantRow(t *testing.T, name string, status sandbox.Status, reason string) {
	t.Helper()
	row := e.row(t, name)
	if status != "" && row.Status != status || !strings.Contains(row.Reason, reason) {
		t.Fatalf("%s = %s %q; want %s, %q", name, row.Status, row.Reason, status, reason)
	}
}

// wantTree wants sandbox name's head to be head and its checkpoints cks.
func (e *env) wantTree(t *testing.T, name, head string, cks ...sandbox.Checkpoint) {
	t.Helper()
	var got, want []string
	for _, c := range e.checkpoints(t, name) {
		got = append(got, c.ID)
	}
	for _, c := range cks {
		want = append(want, c.ID)
	}
	if row := e.row(t, name); row.Head != head || !slices.Equal(got, want) {
		t.Fatalf("%s has head %q and checkpoints %q; want %q and %q", name, row.Head, got, head, want)
	}
}

// wantData wants data.txt of sandbox name, read through an exec (which
// wakes it), to hold want.
func (e *env) wantData(t *testing.T, name, want string) {
	t.Helper()
	if got := e.shell(t, name, "cat data.txt"); got != want+"\n" {
		t.Fatalf("data.txt of %s = %q, want %q", name, got, want)
	}
}

// write makes data.txt of sandbox name hold data.
func (e *env) write(t *testing.T, name, data string) {
	t.Helper()
	e.shell(t, name, "echo "+data+" > data.txt")
}

// shell runs a command in sandbox name and returns its stdout. Unlike
// e.exec it gives up after a while: a frozen sandbox never answers.
func (e *env) shell(t *testing.T, name, shell string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	res, err := e.svc.Processes.Exec(ctx, a1, name, sandbox.ExecRequest{Shell: shell}, nil, &out, &errb)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%s, %q) = %+v, %v (stderr %q)", name, shell, res, err, errb.String())
	}
	return out.String()
}

func (e *env) checkpoint(t *testing.T, name, label string) sandbox.Checkpoint {
	t.Helper()
	c, err := e.svc.Checkpoints.Checkpoint(t.Context(), a1, name, sandbox.CheckpointRequest{Label: label})
	if err != nil {
		t.Fatalf("Checkpoint(%s, %q) = %v", name, label, err)
	}
	return c
}

func (e *env) checkpoints(t *testing.T, name string) []sandbox.Checkpoint {
	t.Helper()
	cks, err := e.svc.Checkpoints.ListCheckpoints(t.Context(), a1, name)
	if err != nil {
		t.Fatalf("ListCheckpoints(%s) = %v", name, err)
	}
	return cks
}

func (e *env) restore(t *testing.T, name, id string) {
	t.Helper()
	if _, err := e.svc.Checkpoints.Restore(t.Context(), a1, name, id); err != nil {
		t.Fatalf("Restore(%s, %s) = %v", name, id, err)
	}
}

// moveCrashCase is a move of sleeping sandbox "web", with a checkpoint,
// to node b of the env's store (another data dir, as the store's node
// rows say). Killed before the row switched, the sandbox is whole and
// asleep here and the retry moves it; after, it is b's, and this node
// holds nothing of it.
func moveCrashCase() crashCase {
	var b *lifecycle.Service // node b of the case's env, made by setup
	return crashCase{
		name: "Move",
		opts: func(o *envOptions) {
			o.Move = moveTo(&b)
		},
		setup: func(t *testing.T, e *env) scene {
			e.twoDataDirs(t)
			b = e.nodeB(t)
			sb := e.create(t, a1, "web")
			e.write(t, "web", "v1")
			ck, err := e.svc.Checkpoints.Checkpoint(t.Context(), a1, "web", sandbox.CheckpointRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.svc.Sandboxes.Sleep(t.Context(), a1, "web"); err != nil {
				t.Fatal(err)
			}
			return scene{sb: sb, cks: []sandbox.Checkpoint{ck}, data: "v1"}
		},
		run: func(ctx context.Context, svc *lifecycle.Service, sc scene) error {
			_, err := svc.Sandboxes.Move(ctx, op, sandbox.Ref(sc.sb.Tenant, sc.sb.Name), "b")
			return err
		},
		points: []crashPoint{
			{"move: sent", false},
			{"move: row switched", true},
		},
		old: func(t *testing.T, e *env, sc scene) {
			// Not woken: the retry moves a sleeping sandbox.
			e.wantRow(t, "web", sandbox.StatusSleeping, "cut short")
			if row := e.row(t, "web"); row.Node != "local" {
				t.Fatalf("web is on %s; want local", row.Node)
			}
		},
		new: func(t *testing.T, e *env, sc scene) {
			if row := e.row(t, "web"); row.Node != "b" || row.Status != sandbox.StatusSleeping {
				t.Fatalf("web is %s on %s; want asleep on b", row.Status, row.Node)
			}
			var out bytes.Buffer
			if _, err := b.Processes.Exec(t.Context(), a1, "web", sandbox.ExecRequest{Shell: "cat data.txt"}, nil, &out, io.Discard); err != nil || out.String() != sc.data+"\n" {
				t.Fatalf("data.txt of web through b = %q, %v; want %q", out.String(), err, sc.data)
			}
		},
	}
}

// forkSetup is a fork's scene: sandbox "src" with data.txt v1 at its
// checkpoint, v2 now.
func forkSetup(t *testing.T, e *env) scene {
	sb := e.create(t, a1, "src")
	e.write(t, "src", "v1")
	ck := e.checkpoint(t, "src", "first")
	e.write(t, "src", "v2")
	return scene{sb: sb, cks: []sandbox.Checkpoint{ck}, data: "v2"}
}

// forkRun forks src's checkpoint into "copy".
func forkRun(ctx context.Context, svc *lifecycle.Service, sc scene) error {
	_, err := svc.Checkpoints.Fork(ctx, a1, "src", sc.cks[0].ID, "copy")
	return err
}

// forkOld wants no copy, and src as it was.
func forkOld(t *testing.T, e *env, sc scene) {
	e.wantGone(t, "copy")
	e.wantTree(t, "src", sc.cks[0].ID, sc.cks...)
	e.wantData(t, "src", sc.data)
}

// forkElsewhereCrashCase is a fork made on a node with no room for it:
// its root goes to node b of the env's store, which runs it. Killed
// after the send, before b took the row, the create is undone here (b's
// copy is an orphan of b's) and the retry forks it again; once done, the
// fork is b's, with the checkpoint's files, and this node holds nothing
// of it. With memory, the checkpoint holds its processes' memory (the
// fake driver's), whose image follows the root to b (one point more),
// and the fork resumes from it there.
func forkElsewhereCrashCase(memory bool) crashCase {
	var b *lifecycle.Service // node b of the case's env, made by setup
	c := crashCase{
		name: "ForkElsewhere",
		opts: func(o *envOptions) {
			o.Move = moveTo(&b)
			o.Fits = func(context.Context, sandbox.Sandbox) bool { return false }
			o.PickNode = func(context.Context, sandbox.Sandbox) (string, error) { return "b", nil }
			o.PlaceOn = func(ctx context.Context, sb sandbox.Sandbox, check bool) error {
				if check {
					return nil
				}
				_, err := b.Sandboxes.StartPlaced(ctx, sb.Tenant, sb.Name, sb.ID)
				return err
			}
		},
		setup: func(t *testing.T, e *env) scene {
			e.twoDataDirs(t)
			b = e.nodeB(t)
			return forkSetup(t, e)
		},
		run: forkRun,
		points: []crashPoint{
			{"create: row inserted", false},
			{"fork: sent", false},
		},
		old: forkOld,
		new: func(t *testing.T, e *env, sc scene) {
			row := e.row(t, "copy")
			if row.Node != "b" || row.Status != sandbox.StatusRunning || !strings.HasPrefix(row.Reason, "forked") || memory != strings.HasSuffix(row.Reason, "with its processes") {
				t.Fatalf("copy is %s on %s (%q); want running on b, forked (with its processes: %v)", row.Status, row.Node, row.Reason, memory)
			}
			if _, err := e.lay.Stat(t.Context(), "sb-"+row.ID); !errors.Is(err, layers.ErrNotFound) {
				t.Errorf("this node holds a root of the fork b runs: %v", err)
			}
			var out bytes.Buffer
			if _, err := b.Processes.Exec(t.Context(), a1, "copy", sandbox.ExecRequest{Shell: "cat data.txt"}, nil, &out, io.Discard); err != nil || out.String() != "v1\n" {
				t.Fatalf("data.txt of copy through b = %q, %v; want v1", out.String(), err)
			}
			e.wantData(t, "src", sc.data)
		},
	}
	if memory {
		c.name = "ForkMemoryElsewhere"
		opts := c.opts
		c.opts = func(o *envOptions) {
			opts(o)
			o.Driver = driverfake.New(driverfake.Options{Memory: true})
		}
		c.setup = func(t *testing.T, e *env) scene {
			e.twoDataDirs(t)
			b = e.nodeB(t)
			sb := e.create(t, a1, "src")
			e.write(t, "src", "v1")
			ck, err := e.svc.Checkpoints.Checkpoint(t.Context(), a1, "src", sandbox.CheckpointRequest{Label: "first", Memory: true})
			if err != nil || !ck.Memory {
				t.Fatalf("memory Checkpoint(src) = %+v, %v", ck, err)
			}
			e.write(t, "src", "v2")
			return scene{sb: sb, cks: []sandbox.Checkpoint{ck}, data: "v2"}
		}
		c.points = append(c.points, crashPoint{"fork: memory sent", false})
	}
	return c
}

// moveTo is an Options.Move that delivers to node *b, the service setup
// makes, as sent by node "local".
func moveTo(b **lifecycle.Service) func(ctx context.Context, target string, sb sandbox.Sandbox, ck string, memory bool, r io.Reader) error {
	return func(ctx context.Context, _ string, sb sandbox.Sandbox, ck string, memory bool, r io.Reader) error {
		return (*b).Sandboxes.ReceiveSnapshot(ctx, "local", sb.ID, ck, memory, r)
	}
}

// nodeB starts node b of e's store, with a runtime (with memory images
// when e's has them) and a layer store (holding the default image) of
// its own.
func (e *env) nodeB(t *testing.T) *lifecycle.Service {
	t.Helper()
	layB := layersfake.New(t)
	if err := layB.Import(t.Context(), "default", fstest.MapFS{"etc/hostname": {Data: []byte("default\n"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	drvB := driverfake.New(driverfake.Options{Memory: e.drv.Capabilities().MemoryCheckpoint})
	t.Cleanup(func() { drvB.Close() })
	optsB := e.opts
	optsB.Driver, optsB.Layers, optsB.NodeName, optsB.Instance = drvB, layB, "b", "i-b"
	optsB.Move, optsB.Fits, optsB.PickNode, optsB.PlaceOn = nil, nil, nil, nil
	return e.newService(t, optsB)
}

// twoDataDirs records in e's store node "local" (this env's, whose
// Instance it sets) and node "b" as the nodes of two data dirs.
func (e *env) twoDataDirs(t *testing.T) {
	t.Helper()
	for node, inst := range map[string]string{"local": "i-local", "b": "i-b"} {
		if _, err := e.db.Nodes().Heartbeat(t.Context(), store.Node{Name: node, Instance: inst}); err != nil {
			t.Fatal(err)
		}
	}
	e.opts.Instance = "i-local"
}
