package lifecycle_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
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

// TestWarmPoolClaimAcrossControlPlanes: two control planes on one store
// (each with its own locks, as two replicas have) that claim a node's
// only warm-pool member at the same moment: one claims it, its row is
// that one's sandbox and its Pod is bound once; the other's create finds
// no member (here: unavailable) and leaves no row.
func TestWarmPoolClaimAcrossControlPlanes(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, func(o *envOptions) { o.WarmPool = map[string]int{"small": 1}; o.NodeName = "n1" })
	// The node records the default image, as `hearth node` does: a
	// control plane holds none.
	if err := e.svc.Images.SetDefault(ctx, sandbox.Image{Digest: "sha256:" + strings.Repeat("d", 64), Layers: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	fleets := []*bindFleet{{}, {}}
	var planes []*lifecycle.Service
	for i, f := range fleets {
		opts := e.opts.Options
		opts.WarmPool, opts.NodeName, opts.Fleet = nil, fmt.Sprintf("cp%d", i), f
		opts.Node = node.None{}
		svc, err := lifecycle.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		planes = append(planes, svc)
	}
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
