package lifecycle_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// TestGone: get of a destroyed sandbox's name says who or what destroyed
// it, when, and what its status said before, to its owner only and for the
// retention period; a new sandbox of that name is simply there.
func TestGone(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, a1, "web")
	e.setRow(t, sb, sandbox.StatusRunning, "oom: the memory limit (512 MiB) killed a command")
	if err := e.svc.Sandboxes.Destroy(ctx, a1, "web"); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Sandboxes.Get(ctx, a1, "web")
	se := wantCode(t, "Get(web) after its destroy", err, sandbox.CodeNotFound)
	want := `sandbox "agent-a1-web" is gone: destroyed by a1 (agent) at 2030-01-02T03:04:05Z; its status before: oom: the memory limit (512 MiB) killed a command`
	if se.Message != want || se.Details["reason"] != "destroyed by a1 (agent)" || se.Hint == "" {
		t.Errorf("Get(web) after its destroy = %q %v\nwant %q", se.Message, se.Details, want)
	}
	// Nobody else learns anything.
	_, err = e.svc.Sandboxes.Get(ctx, a2, "agent-a1-web")
	if se := wantCode(t, "Get(agent-a1-web) as a2", err, sandbox.CodeNotFound); strings.Contains(se.Message, "gone") {
		t.Errorf("a2 learns of a1's destroyed sandbox: %q", se.Message)
	}
	// The platform's reaping says so.
	short := e.create(t, a1, "short")
	e.clock.Advance(lifecycle.DefaultTTL)
	lifecycle.Sweep(ctx, e.svc)
	_, err = e.svc.Sandboxes.Get(ctx, a1, "short")
	if se := wantCode(t, "Get(short) after its TTL", err, sandbox.CodeNotFound); !strings.Contains(se.Message, "is gone: reaped: its ttl ended at "+short.ExpiresAt.UTC().Format(time.RFC3339)) {
		t.Errorf("Get(short) after its TTL = %q", se.Message)
	}
	// A new sandbox of the name is there, with no trace of the old one.
	again := e.create(t, a1, "web")
	if got, err := e.svc.Sandboxes.Get(ctx, a1, "web"); err != nil || got.ID != again.ID {
		t.Errorf("Get(web) after a new create = %+v, %v", got, err)
	}
	// After the retention period, a plain not_found.
	e.clock.Advance(lifecycle.DefaultGoneRetention + time.Hour)
	lifecycle.Sweep(ctx, e.svc)
	_, err = e.svc.Sandboxes.Get(ctx, a1, "short")
	if se := wantCode(t, "Get(short) after the retention", err, sandbox.CodeNotFound); strings.Contains(se.Message, "gone") {
		t.Errorf("Get(short) after the retention = %q, want a plain not_found", se.Message)
	}
}

// countingUsage counts the Usage calls of a layer store.
type countingUsage struct {
	layers.Store
	n *atomic.Int32
}

func (c countingUsage) Usage(ctx context.Context, key string) (int64, error) {
	c.n.Add(1)
	return c.Store.Usage(ctx, key)
}

// TestDescribeReusesUsage: a client polling get makes the layer store
// measure (and sync) at most once per two seconds per sandbox.
func TestDescribeReusesUsage(t *testing.T) {
	var n atomic.Int32
	e := newEnv(t, func(o *envOptions) { o.Layers = countingUsage{o.Layers, &n} })
	e.create(t, a1, "web")
	e.write(t, "web", "v1")
	before := n.Load()
	for range 5 {
		if sb, err := e.svc.Sandboxes.Describe(t.Context(), a1, "web"); err != nil || sb.DiskUsedBytes == 0 {
			t.Fatalf("Describe = %+v, %v", sb, err)
		}
	}
	if got := n.Load() - before; got != 1 {
		t.Errorf("5 Describes within 2s measured %d times, want 1", got)
	}
	e.clock.Advance(3 * time.Second)
	e.svc.Sandboxes.Describe(t.Context(), a1, "web")
	if got := n.Load() - before; got != 2 {
		t.Errorf("a Describe 3s later: %d measures in all, want 2", got)
	}
	// A restore changes the root at once: the next get measures again.
	ck := e.checkpoint(t, "web", "")
	e.restore(t, "web", ck.ID)
	before = n.Load()
	e.svc.Sandboxes.Describe(t.Context(), a1, "web")
	if got := n.Load() - before; got != 1 {
		t.Errorf("a Describe right after a restore measured %d times, want 1", got)
	}
}

// TestListGone: why sandboxes went, as whoever could see them sees it: an
// agent its own, a tenant admin its tenant's, an operator every tenant's,
// and a token restricted to a name prefix those inside it; the newest
// first.
func TestListGone(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	for _, c := range []struct {
		p    sandbox.Principal
		name string
	}{{a1, "x"}, {a2, "y"}, {b1, "z"}} {
		e.create(t, c.p, c.name)
		e.clock.Advance(time.Second)
		if err := e.svc.Sandboxes.Destroy(ctx, c.p, c.name); err != nil {
			t.Fatal(err)
		}
	}
	names := func(p sandbox.Principal) []string {
		gs, err := e.svc.Sandboxes.ListGone(ctx, p)
		if err != nil {
			t.Fatalf("ListGone as %+v = %v", p, err)
		}
		var out []string
		for _, g := range gs {
			out = append(out, g.Tenant+"/"+g.Name)
		}
		return out
	}
	prefixed := a1
	prefixed.NamePrefix = "agent-a1-nothing"
	for _, c := range []struct {
		who  string
		p    sandbox.Principal
		want []string
	}{
		{"a1", a1, []string{"t1/agent-a1-x"}},
		{"a2", a2, []string{"t1/agent-a2-y"}},
		{"t1's admin", admin, []string{"t1/agent-a2-y", "t1/agent-a1-x"}},
		{"t2's b1", b1, []string{"t2/agent-b1-z"}},
		{"an operator", op, []string{"t2/agent-b1-z", "t1/agent-a2-y", "t1/agent-a1-x"}},
		{"a1 restricted to another prefix", prefixed, nil},
	} {
		if got := names(c.p); !slices.Equal(got, c.want) {
			t.Errorf("ListGone as %s = %q, want %q", c.who, got, c.want)
		}
	}
}
