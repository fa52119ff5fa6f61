package lifecycle_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
)

// bindFleet is a lifecycle.Fleet that binds every claim and places
// nothing else: every node is open, and a sandbox that no member serves
// is unavailable.
type bindFleet struct {
	mu    sync.Mutex
	bound []sandbox.Sandbox
}

func (f *bindFleet) Place(context.Context, sandbox.Sandbox) error {
	return sandbox.Errorf(sandbox.CodeUnavailable, "no node in this test's fleet")
}

func (f *bindFleet) Bind(_ context.Context, sb sandbox.Sandbox) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bound = append(f.bound, sb)
	return nil
}

func (f *bindFleet) Unplace(context.Context, sandbox.Sandbox) error { return nil }
func (f *bindFleet) Open(context.Context, string) bool              { return true }
func (f *bindFleet) Cordon(context.Context, string, bool) error     { return nil }

// controlPlanes returns a control plane on e's store for each of fleets,
// as `hearth serve --kubeconfig` replicas are: no node of their own, each
// with its own locks. e's node records the default image.
func controlPlanes(t *testing.T, e *env, fleets ...lifecycle.Fleet) []*lifecycle.Service {
	t.Helper()
	if err := e.svc.Images.SetDefault(t.Context(), sandbox.Image{Digest: "sha256:" + strings.Repeat("d", 64), Layers: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	var planes []*lifecycle.Service
	for i, f := range fleets {
		opts := e.opts.Options
		opts.WarmPool, opts.NodeName, opts.Fleet, opts.Node = nil, fmt.Sprintf("cp%d", i), f, node.None{}
		svc, err := lifecycle.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		planes = append(planes, svc)
	}
	return planes
}

// TestWarmPoolClaimAcrossControlPlanes: two control planes on one store
// (each with its own locks, as two replicas have) that claim a node's
// only warm-pool member at the same moment: one claims it, its row is
// that one's sandbox and its Pod is bound once; the other's create finds
// no member (here: unavailable) and leaves no row.
func TestWarmPoolClaimAcrossControlPlanes(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, func(o *envOptions) { o.WarmPool = map[string]int{"small": 1}; o.NodeName = "n1" })
	fleets := []*bindFleet{{}, {}}
	planes := controlPlanes(t, e, fleets[0], fleets[1])
	for round := range 10 {
		lifecycle.FillPool(ctx, e.svc)
		member := e.wantMembers(t, 1)[0]
		names := []string{fmt.Sprintf("a-%d", round), fmt.Sprintf("b-%d", round)}
		creators := []sandbox.Principal{a1, b1}
		created := make([]bool, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range planes {
			wg.Go(func() {
				<-start
				_, created[i], errs[i] = planes[i].Sandboxes.Create(ctx, creators[i], sandbox.CreateRequest{Name: names[i]})
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		for i := range planes {
			switch {
			case errs[i] == nil && created[i]:
				winners++
				if row := e.row(t, creators[i].Resolve(names[i])); row.ID != member.ID || row.Tenant != creators[i].Tenant {
					t.Errorf("round %d: %s's row = %s of %s, want the member %s", round, names[i], row.ID, row.Tenant, member.ID)
				}
			case sandbox.IsCode(errs[i], sandbox.CodeUnavailable):
				if _, err := e.find(t, creators[i].Resolve(names[i])); err == nil {
					t.Errorf("round %d: the losing create %s left a row", round, names[i])
				}
			default:
				t.Errorf("round %d: Create(%s) through control plane %d = %v, %v", round, names[i], i, created[i], errs[i])
			}
		}
		binds := len(fleets[0].bound) + len(fleets[1].bound)
		if winners != 1 || binds != round+1 {
			t.Fatalf("round %d: %d creates claimed the one member and %d Pods were bound in all, want 1 and %d", round, winners, binds, round+1)
		}
	}
}

// TestWarmPoolRemovalKeepsAClaim: a node that removes a warm-pool member
// (memory is short) while a control plane claims it, after the node read
// the member and before it released it, leaves the claimed sandbox
// running: the claimant's row and its runtime sandbox stay.
func TestWarmPoolRemovalKeepsAClaim(t *testing.T) {
	ctx := t.Context()
	var pressure atomic.Bool
	e := newEnv(t, func(o *envOptions) {
		o.WarmPool, o.NodeName = map[string]int{"small": 1}, "n1"
		o.MemInfo = func() (int64, int64, error) {
			if pressure.Load() {
				return 5 << 20, 100 << 20, nil
			}
			return 50 << 20, 100 << 20, nil
		}
	})
	fleets := []*bindFleet{{}}
	planes := controlPlanes(t, e, fleets[0])
	lifecycle.FillPool(ctx, e.svc)
	member := e.wantMembers(t, 1)[0]
	var claimed sandbox.Sandbox
	var once sync.Once
	lifecycle.SetCrashHook(e.svc, func(point string) {
		if point != "pool: member to remove read" {
			return
		}
		once.Do(func() {
			sb, created, err := planes[0].Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "web"})
			if err != nil || !created || sb.ID != member.ID {
				t.Errorf("Create(web) through the control plane = %+v, %v, %v; want the member %s claimed", sb, created, err, member.ID)
			}
			claimed = sb
		})
	})
	pressure.Store(true)
	lifecycle.Sweep(ctx, e.svc)
	if claimed.ID == "" {
		t.Fatal("the sweep removed no member under memory pressure")
	}
	row := e.row(t, claimed.Name)
	if row.ID != member.ID || row.Status != sandbox.StatusRunning || row.Tenant != a1.Tenant {
		t.Errorf("the claimed sandbox's row after the removal = %s %s of %s, want %s running of %s", row.ID, row.Status, row.Tenant, member.ID, a1.Tenant)
	}
	e.wantHeld(t, member.ID)
	if len(fleets[0].bound) != 1 {
		t.Errorf("%d Pods bound, want the claim's one", len(fleets[0].bound))
	}
}
