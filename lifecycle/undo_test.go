package lifecycle_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// flakyStore is a store whose next sandbox updates and checkpoint lists
// fail, as while the database restarts.
type flakyStore struct {
	store.Store
	updates, lists atomic.Int32 // how many of the next calls fail
	// pass is how many sandbox updates succeed before updates' fail.
	pass atomic.Int32
}

var errStoreDown = errors.New("the store is restarting")

func (f *flakyStore) Sandboxes() store.Sandboxes { return flakySandboxes{f.Store.Sandboxes(), f} }

func (f *flakyStore) Checkpoints() store.Checkpoints {
	return flakyCheckpoints{f.Store.Checkpoints(), f}
}

type flakySandboxes struct {
	store.Sandboxes
	f *flakyStore
}

// down counts one sandbox update (Update or Swap) and says whether it
// fails: once the first pass have succeeded, the next updates fail.
func (v flakySandboxes) down() bool {
	return v.f.pass.Add(-1) < 0 && v.f.updates.Add(-1) >= 0
}

func (v flakySandboxes) Update(ctx context.Context, sb sandbox.Sandbox) error {
	if v.down() {
		return errStoreDown
	}
	return v.Sandboxes.Update(ctx, sb)
}

// Swap fails as Update does: it is an update too.
func (v flakySandboxes) Swap(ctx context.Context, was, sb sandbox.Sandbox) (bool, error) {
	if v.down() {
		return false, errStoreDown
	}
	return v.Sandboxes.Swap(ctx, was, sb)
}

type flakyCheckpoints struct {
	store.Checkpoints
	f *flakyStore
}

func (v flakyCheckpoints) List(ctx context.Context, id string) ([]sandbox.Checkpoint, error) {
	if v.f.lists.Add(-1) >= 0 {
		return nil, errStoreDown
	}
	return v.Checkpoints.List(ctx, id)
}

// TestFailedCreateUndone: a create whose row cannot be set running (the
// store went away) is undone even when the store is still away for the
// first attempts: no row stays creating, nothing stays in the runtime,
// and a retry makes a running sandbox.
func TestFailedCreateUndone(t *testing.T) {
	var flaky *flakyStore
	e := newEnv(t, func(o *envOptions) {
		flaky = &flakyStore{Store: o.Store}
		o.Store = flaky
	})
	ctx := t.Context()
	flaky.updates.Store(1)
	flaky.lists.Store(3)
	_, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "web"})
	wantCode(t, "Create while the store fails", err, sandbox.CodeInternal)
	if _, err := e.find(t, a1.Resolve("web")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the failed create's row = %v, want it gone", err)
	}
	if states, err := e.drv.Recover(ctx); err != nil || len(states) != 0 {
		t.Fatalf("the runtime holds %+v, %v after the failed create", states, err)
	}
	sb, created, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "web"})
	if err != nil || !created || sb.Status != sandbox.StatusRunning {
		t.Fatalf("the retried create = %s, created %v, %v; want a new running sandbox", sb.Status, created, err)
	}
}

// TestStaleCreateSwept: a row left creating by a create that failed and
// was not undone is removed by the sweep once it is far older than any
// start, and a get of its name says why.
func TestStaleCreateSwept(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, a1, "stuck")
	sb = e.setRow(t, sb, sandbox.StatusCreating, "create requested")
	lifecycle.Sweep(ctx, e.svc)
	if got := e.row(t, sb.Name); got.Status != sandbox.StatusCreating {
		t.Fatalf("a fresh creating row after a sweep = %s, want it left to its create", got.Status)
	}
	e.clock.Advance(11 * time.Minute)
	lifecycle.Sweep(ctx, e.svc)
	_, err := e.svc.Sandboxes.Get(ctx, a1, "stuck")
	if se := wantCode(t, "Get of a swept failed create", err, sandbox.CodeNotFound); se.Details["reason"] == nil {
		t.Errorf("not_found = %v %v; want the reason it went", se, se.Details)
	}
}

// TestStartPlacedUndone: a placed sandbox whose row a node took over but
// could not set running (the store went away) is undone on that node:
// its row is gone and nothing stays in the runtime.
func TestStartPlacedUndone(t *testing.T) {
	var flaky *flakyStore
	e := newEnv(t, func(o *envOptions) {
		flaky = &flakyStore{Store: o.Store}
		o.Store = flaky
	})
	ctx := t.Context()
	// A control plane's creating row: a sandbox's as a create writes it,
	// naming another node.
	tmpl, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "tmpl"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Sandboxes.Destroy(ctx, a1, "tmpl"); err != nil {
		t.Fatal(err)
	}
	placed := tmpl
	placed.ID, placed.Name, placed.Node, placed.Status = "placed1", a1.Resolve("web"), "cp0", sandbox.StatusCreating
	if err := e.db.Sandboxes().Create(ctx, placed); err != nil {
		t.Fatal(err)
	}
	flaky.pass.Store(1) // the take-over's update
	flaky.updates.Store(1)
	_, err = e.svc.Sandboxes.StartPlaced(ctx, placed.Tenant, placed.Name, placed.ID)
	wantCode(t, "StartPlaced while the store fails", err, sandbox.CodeInternal)
	if _, err := e.find(t, placed.Name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the failed placement's row = %v, want it gone", err)
	}
	if states, err := e.drv.Recover(ctx); err != nil || len(states) != 0 {
		t.Fatalf("the runtime holds %+v, %v after the failed placement", states, err)
	}
}
