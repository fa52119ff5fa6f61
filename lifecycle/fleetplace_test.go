package lifecycle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// lateFleet is a bindFleet whose Place hands the sandbox to node (its
// StartPlaced, as a hearth node's provider does once kube-scheduler bound
// the Pod) and then fails as a placement past its deadline does, at the
// moment the test's hooks choose: by default once the node answered.
type lateFleet struct {
	bindFleet
	node *lifecycle.Service
	// give, when set, is closed by the test's store hook at the moment
	// Place is to give up while the node goes on.
	give chan struct{}
	// started is the node's StartPlaced's answer.
	started chan error

	mu       sync.Mutex
	unplaced []string
}

func newLateFleet(node *lifecycle.Service) *lateFleet {
	return &lateFleet{node: node, give: make(chan struct{}), started: make(chan error, 1)}
}

func (f *lateFleet) Place(ctx context.Context, sb sandbox.Sandbox) error {
	answered := make(chan struct{})
	go func() {
		_, err := f.node.Sandboxes.StartPlaced(context.WithoutCancel(ctx), sb.Tenant, sb.Name, sb.ID)
		f.started <- err
		close(answered)
	}()
	select {
	case <-f.give:
	case <-answered:
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q was not running on a node before the test's deadline", sb.Name)
}

func (f *lateFleet) Unplace(_ context.Context, sb sandbox.Sandbox) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unplaced = append(f.unplaced, sb.ID)
	return nil
}

// swapHook is a store whose sandbox swaps call before (ahead of the
// swap) and after (once it is made), when set: the moments around a
// node's take-over of a placed sandbox's row.
type swapHook struct {
	store.Store
	before, after func(was sandbox.Sandbox)
}

func (h *swapHook) Sandboxes() store.Sandboxes { return hookedSandboxes{h.Store.Sandboxes(), h} }

type hookedSandboxes struct {
	store.Sandboxes
	h *swapHook
}

func (v hookedSandboxes) Swap(ctx context.Context, was, sb sandbox.Sandbox) (bool, error) {
	if v.h.before != nil {
		v.h.before(was)
	}
	ok, err := v.Sandboxes.Swap(ctx, was, sb)
	if ok && v.h.after != nil {
		v.h.after(was)
	}
	return ok, err
}

// lateEnv is a node n1 and a control plane placing on it through a
// lateFleet, on one store whose swaps call hook's functions.
func lateEnv(t *testing.T) (*env, *lifecycle.Service, *lateFleet, *swapHook) {
	hook := &swapHook{}
	e := newEnv(t, func(o *envOptions) {
		o.NodeName = "n1"
		hook.Store = o.Store
		o.Store = hook
	})
	f := newLateFleet(e.svc)
	return e, controlPlanes(t, e, f)[0], f, hook
}

// waitGone waits until id has no row, as a control plane's undo leaves it.
func waitGone(t *testing.T, e *env, id string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := e.db.Sandboxes().ByID(t.Context(), id); err != nil {
			return
		}
	}
	t.Errorf("sandbox %s still has a row 5 s after its create was undone", id)
}

// TestLatePlacementKeepsTheNodesSandbox: a placement that fails (its
// deadline passed) after the node took the sandbox over and started it
// leaves the sandbox to the node: the create answers with it, running on
// the node, its row and runtime sandbox stay, and its Pod is kept.
// Before, the control plane's undo deleted the row under the running
// sandbox, which no row owned from then on.
func TestLatePlacementKeepsTheNodesSandbox(t *testing.T) {
	e, cp, f, _ := lateEnv(t)
	sb, created, err := cp.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "web"})
	if err != nil || !created || sb.Node != "n1" || sb.Status != sandbox.StatusRunning {
		t.Fatalf("Create(web) through the control plane = %s %s on %q, %v, %v; want created, running on n1", sb.ID, sb.Status, sb.Node, created, err)
	}
	if err := <-f.started; err != nil {
		t.Fatalf("the node's StartPlaced = %v", err)
	}
	if row := e.row(t, "web"); row.ID != sb.ID || row.Node != "n1" || row.Status != sandbox.StatusRunning {
		t.Errorf("web's row = %s %s on %q, want %s running on n1", row.ID, row.Status, row.Node, sb.ID)
	}
	e.wantHeld(t, sb.ID)
	if len(f.unplaced) != 0 {
		t.Errorf("the control plane removed the Pods of %q, want none: the node runs it", f.unplaced)
	}
	if got, err := e.svc.Sandboxes.Get(t.Context(), a1, "web"); err != nil || got.ID != sb.ID {
		t.Errorf("Get(web) on the node = %s, %v; want %s", got.ID, err, sb.ID)
	}
}

// TestLatePlacementStillStarting: a placement that fails after the node
// took the row over but before it runs the sandbox answers unavailable,
// naming the node, and leaves the row to the node, which goes on: the
// sandbox runs there afterwards, held once. Before, the undo deleted the
// row under the node's start, which then failed and was undone.
func TestLatePlacementStillStarting(t *testing.T) {
	e, cp, f, hook := lateEnv(t)
	created := make(chan struct{})
	hook.after = func(sandbox.Sandbox) {
		close(f.give)
		<-created // the control plane's create has answered
	}
	_, _, err := cp.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "web"})
	close(created)
	if se := wantCode(t, "Create(web) placed too late", err, sandbox.CodeUnavailable); se.Details["node"] != "n1" {
		t.Errorf("the refusal's details = %v, want node n1", se.Details)
	}
	if err := <-f.started; err != nil {
		t.Fatalf("the node's StartPlaced = %v, want the sandbox started", err)
	}
	row := e.row(t, "web")
	if row.Node != "n1" || row.Status != sandbox.StatusRunning {
		t.Errorf("web's row = %s on %q, want running on n1", row.Status, row.Node)
	}
	e.wantHeld(t, row.ID)
	if len(f.unplaced) != 0 {
		t.Errorf("the control plane removed the Pods of %q, want none: the node runs it", f.unplaced)
	}
}

// TestUndonePlacementNotStarted: a control plane that gives up on a
// placement and undoes the create after the node read the row but before
// it took the row over wins: the node's StartPlaced is not_found (the
// create was undone), and nothing of the sandbox is held anywhere. Before,
// the node's unconditional update failed as internal (or, had it come
// first, the node started a sandbox whose row the undo deleted).
func TestUndonePlacementNotStarted(t *testing.T) {
	e, cp, f, hook := lateEnv(t)
	var once sync.Once
	hook.before = func(was sandbox.Sandbox) {
		once.Do(func() {
			close(f.give)
			waitGone(t, e, was.ID)
		})
	}
	_, _, err := cp.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "web"})
	wantCode(t, "Create(web) whose placement failed", err, sandbox.CodeUnavailable)
	wantCode(t, "the node's StartPlaced of an undone create", <-f.started, sandbox.CodeNotFound)
	if _, err := e.find(t, a1.Resolve("web")); err == nil {
		t.Error("the undone create left a row")
	}
	e.wantHeld(t)
	if len(f.unplaced) != 1 {
		t.Errorf("the control plane removed %d Pods, want the undone create's one", len(f.unplaced))
	}
}
