package lifecycle_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

func TestNewRequires(t *testing.T) {
	e := newEnv(t, nil)
	for _, tt := range []struct {
		name   string
		adjust func(*lifecycle.Options)
	}{
		{"no store", func(o *lifecycle.Options) { o.Store = nil }},
		{"no node", func(o *lifecycle.Options) { o.Node = nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := e.opts.Options
			opts.Node = e.opts.node(t)
			tt.adjust(&opts)
			if svc, err := lifecycle.New(opts); err == nil {
				t.Errorf("New(%s) = %v, nil; want an error", tt.name, svc)
			}
		})
	}
}

var idPattern = regexp.MustCompile(`^x[a-z2-7]{15}$`)

func TestCreateDefaults(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb, created, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "web"})
	if err != nil || !created {
		t.Fatalf("Create(web) = %+v, %v, %v; want created", sb, created, err)
	}
	small, _ := sandbox.LookupSize(sandbox.DefaultSize)
	want := sandbox.Sandbox{
		ID: sb.ID, Name: "agent-a1-web", Tenant: "t1", Owner: "a1", Image: "default", Size: "small", Runtime: "fake",
		Status: sandbox.StatusRunning, Reason: "created",
		CreatedAt: epoch, UpdatedAt: epoch, ExpiresAt: epoch.Add(lifecycle.DefaultTTL),
		Resources: small,
	}
	got := sb
	got.Capabilities = nil
	if !idPattern.MatchString(sb.ID) || !sandboxEqual(got, want) {
		t.Errorf("Create(web) = %+v\nwant %+v (id like %s)", got, want, idPattern)
	}
	for _, c := range []string{sandbox.CapExec, sandbox.CapExecStdin, sandbox.CapExecTimeout, sandbox.CapFiles, "isolation:none", "runtime:fake"} {
		if !slices.Contains(sb.Capabilities, c) {
			t.Errorf("Create(web).Capabilities = %q, want %q among them", sb.Capabilities, c)
		}
	}
	if row := e.row(t, "web"); !sandboxEqual(row, sb) {
		t.Errorf("stored row = %+v, want what Create returned, %+v", row, sb)
	}
	if got, err := e.svc.Sandboxes.Get(ctx, a1, "web"); err != nil || !sandboxEqual(got, sb) {
		t.Errorf("Get(web) = %+v, %v, want %+v", got, err, sb)
	}

	// The runtime got the root the layer store prepared from the image.
	spec, ok := e.drv.Spec(sb.ID)
	root, err := e.lay.Stat(ctx, "sb-"+sb.ID)
	if !ok || err != nil || spec.RootFS != root.Path || root.Parent != "default" {
		t.Fatalf("Spec(%s) = %+v, %v; root = %+v, %v; want the spec's RootFS to be the root prepared from default", sb.ID, spec, ok, root, err)
	}
	// Neither hostname nor environment names the sandbox, so a warm-pool
	// member started before its claim looks like one started for it.
	if spec.ID != sb.ID || spec.Hostname != "sandbox" || spec.Resources != small || spec.AgentPath != e.opts.AgentPath || slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.Contains(kv, "web") }) {
		t.Errorf("Spec(%s) = %+v, want id, hostname sandbox, the small resources, the agent path and no env naming web", sb.ID, spec)
	}
	if out, _ := e.exec(t, a1, "web", "cat ../../etc/hostname"); out != "default\n" {
		t.Errorf("Exec(cat ../../etc/hostname) = %q, want the image's file", out)
	}
	e.wantHeld(t, sb.ID)
}

// sandboxEqual compares sandboxes with time.Equal for their times.
func sandboxEqual(a, b sandbox.Sandbox) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) || !a.UpdatedAt.Equal(b.UpdatedAt) || !a.ExpiresAt.Equal(b.ExpiresAt) {
		return false
	}
	a.CreatedAt, a.UpdatedAt, a.ExpiresAt = b.CreatedAt, b.UpdatedAt, b.ExpiresAt
	return a.ID == b.ID && a.Name == b.Name && a.Tenant == b.Tenant && a.Owner == b.Owner &&
		a.Image == b.Image && a.Size == b.Size && a.Runtime == b.Runtime && a.Status == b.Status &&
		a.Reason == b.Reason && a.Resources == b.Resources && slices.Equal(a.Capabilities, b.Capabilities)
}

func TestCreateOptions(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.DefaultTTL, o.MaxTTL = time.Hour, 2*time.Hour })
	ctx := t.Context()
	sb, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{})
	if err != nil || sandbox.ValidateName(sb.Name) != nil || !strings.HasPrefix(sb.Name, "agent-a1-sb-") || !sb.ExpiresAt.Equal(epoch.Add(time.Hour)) {
		t.Errorf("Create(no name) = %+v, %v; want a generated agent-a1-sb-… name and the default ttl of 1h", sb, err)
	}
	sb, _, err = e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "big", Size: "large", TTL: sandbox.Duration(2 * time.Hour)})
	large, _ := sandbox.LookupSize("large")
	if err != nil || sb.Size != "large" || sb.Resources != large || !sb.ExpiresAt.Equal(epoch.Add(2*time.Hour)) {
		t.Errorf("Create(big, large, 2h) = %+v, %v; want size large and expiry in 2h", sb, err)
	}
	if spec, _ := e.drv.Spec(sb.ID); spec.Resources != large {
		t.Errorf("Spec(%s).Resources = %+v, want %+v", sb.ID, spec.Resources, large)
	}
}

func TestCreateResumes(t *testing.T) {
	e := newEnv(t, nil)
	first := e.create(t, a1, "web")
	e.clock.Advance(time.Minute)
	again, created, err := e.svc.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "web"})
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("Create(web) again = %+v, %v, %v; want the same sandbox %s with created false", again, created, err, first.ID)
	}
	if n := e.started(first.ID); n != 1 {
		t.Errorf("the driver started %s %d times, want 1", first.ID, n)
	}
	e.wantHeld(t, first.ID)
}

func TestCreateNameTaken(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, a1, "web")
	// Another identity cannot even name it: the prefix is a1's.
	for _, p := range []sandbox.Principal{a2, b1, admin} {
		_, created, err := e.svc.Sandboxes.Create(t.Context(), p, sandbox.CreateRequest{Name: sb.Name})
		se := wantCode(t, "Create(agent-a1-web) by "+p.Tenant+"/"+p.Agent, err, sandbox.CodeInvalidArgument)
		if created || !strings.Contains(se.Hint, sandbox.AttributionPrefix(p.Agent)) {
			t.Errorf("Create(agent-a1-web) by %s = %v (created %v); want a hint with its own prefix", p.Agent, se, created)
		}
	}
	// The same short name is every agent's own.
	if other, created, err := e.svc.Sandboxes.Create(t.Context(), a2, sandbox.CreateRequest{Name: "web"}); err != nil || !created || other.Name != "agent-a2-web" {
		t.Errorf("Create(web) by a2 = %+v, %v, %v; want its own agent-a2-web", other, created, err)
	}
	e.wantHeld(t, sb.ID, e.row(t, "agent-a2-web").ID)
	if n := e.started(""); n != 2 {
		t.Errorf("the driver was asked to start %d sandboxes, want 2", n)
	}
}

func TestCreateInvalid(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.MaxTTL = 2 * time.Hour })
	ctx := t.Context()
	tests := []struct {
		name    string
		req     sandbox.CreateRequest
		mention string
	}{
		{"bad name", sandbox.CreateRequest{Name: "Bad_Name"}, "Bad_Name"},
		{"name too long", sandbox.CreateRequest{Name: strings.Repeat("a", 200)}, "aaaa"},
		{"unknown size", sandbox.CreateRequest{Name: "x", Size: "huge"}, "huge"},
		{"negative ttl", sandbox.CreateRequest{Name: "x", TTL: sandbox.Duration(-time.Second)}, "-1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, created, err := e.svc.Sandboxes.Create(ctx, a1, tt.req)
			se := wantCode(t, "Create("+tt.name+")", err, sandbox.CodeInvalidArgument)
			if created || sb.ID != "" || !strings.Contains(se.Message, tt.mention) || se.Hint == "" {
				t.Errorf("Create(%s) = %+v, %v, %v; want a message naming %q and a hint", tt.name, sb, created, se, tt.mention)
			}
		})
	}

	t.Run("ttl over the cap", func(t *testing.T) {
		_, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "x", TTL: sandbox.Duration(3 * time.Hour)})
		se := wantCode(t, "Create(ttl 3h)", err, sandbox.CodeInvalidArgument)
		if se.Details["limit_seconds"] != int64(7200) || se.Details["requested_seconds"] != int64(10800) ||
			!strings.Contains(se.Message, "2h0m0s") || !strings.Contains(se.Hint, "2h0m0s") {
			t.Errorf("Create(ttl 3h) = %+v, want the 2h cap in message, hint and details (limit_seconds 7200, requested_seconds 10800)", se)
		}
	})
	e.wantHeld(t)
}

func TestCreateStartFails(t *testing.T) {
	e := newEnv(t, nil)
	e.drv.Faults().FailStart(errors.New("runsc: secret host detail"))
	sb, created, err := e.svc.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "web"})
	se := wantCode(t, "Create(web) when the runtime fails", err, sandbox.CodeUnavailable)
	if created || sb.ID != "" || strings.Contains(se.Error(), "secret") || se.Hint == "" {
		t.Errorf("Create(web) = %+v, %v, %v; want unavailable with a hint and no runtime detail", sb, created, se)
	}
	if n := e.started(""); n != 1 {
		t.Fatalf("the driver was asked to start %d sandboxes, want 1", n)
	}
	// Nothing is left: no row, no root, no runtime sandbox.
	e.wantHeld(t)
	if _, err := e.svc.Sandboxes.Get(t.Context(), a1, "web"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Get(web) after a failed create = %v, want not_found", err)
	}

	// The name is free again.
	e.drv.Faults().FailStart(nil)
	sb = e.create(t, a1, "web")
	e.wantHeld(t, sb.ID)
}

// TestCreateHostFull: a start the host has no room for (too few task ids,
// too little memory) is unavailable with the resource, the numbers and a
// hint for it, and leaves nothing behind.
func TestCreateHostFull(t *testing.T) {
	for _, tc := range []struct {
		limit driver.HostLimitError
		hint  string
	}{
		{driver.HostLimitError{What: "task ids", Free: 900, Need: 1088, Limit: 32768}, "pid_max"},
		{driver.HostLimitError{What: "MiB of memory", Free: 1100, Need: 1292, Limit: 24576}, "--memory-reserve"},
	} {
		e := newEnv(t, nil)
		e.drv.Faults().FailStart(fmt.Errorf("oci: start x: %w", &tc.limit))
		_, _, err := e.svc.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "web"})
		se := wantCode(t, "Create(web) on a full host", err, sandbox.CodeUnavailable)
		free, _ := se.Number("free")
		needed, _ := se.Number("needed")
		limit, _ := se.Number("limit")
		if se.Details["resource"] != tc.limit.What || free != int64(tc.limit.Free) || needed != int64(tc.limit.Need) || limit != int64(tc.limit.Limit) || !strings.Contains(se.Hint, tc.hint) {
			t.Errorf("Create(web) on a host short of %s = %+v; want its numbers and a hint naming %s", tc.limit.What, se, tc.hint)
		}
		e.wantHeld(t)
	}
}

// TestCreateConcurrent: racing creates of one name make one sandbox, which
// every caller gets.
func TestCreateConcurrent(t *testing.T) {
	e := newEnv(t, nil)
	const n = 10
	var wg sync.WaitGroup
	ids := make([]string, n)
	createdBy := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			sb, created, err := e.svc.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "race"})
			ids[i], createdBy[i], errs[i] = sb.ID, created, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Create(race) #%d = %v", i, err)
		}
	}
	if c := slices.Compact(slices.Clone(ids)); len(c) != 1 || c[0] == "" {
		t.Errorf("concurrent Create(race) returned ids %q, want one id", ids)
	}
	if k := len(slices.DeleteFunc(slices.Clone(createdBy), func(b bool) bool { return !b })); k != 1 {
		t.Errorf("%d of %d concurrent Create(race) calls created, want 1", k, n)
	}
	e.wantHeld(t, ids[0])
	if k := e.started(""); k != 1 {
		t.Errorf("the driver was asked to start %d sandboxes, want 1", k)
	}
}

// TestScoping: an agent sees its own sandboxes, a tenant admin its
// tenant's, an operator all; what a caller may not see is not_found.
func TestScoping(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	mine := e.create(t, a1, "box")
	e.clock.Advance(time.Second)
	e.create(t, a2, "box")
	e.clock.Advance(time.Second)
	e.create(t, b1, "box")

	lists := []struct {
		who  string
		p    sandbox.Principal
		want []string
	}{
		{"agent a1", a1, []string{"agent-a1-box"}},
		{"agent a2", a2, []string{"agent-a2-box"}},
		{"tenant admin of t1", admin, []string{"agent-a1-box", "agent-a2-box"}},
		{"agent b1", b1, []string{"agent-b1-box"}},
		{"operator", op, []string{"agent-a1-box", "agent-a2-box", "agent-b1-box"}},
		{"agent with none", sandbox.Principal{Tenant: "t3", Agent: "c", Role: sandbox.RoleAgent}, []string{}},
	}
	for _, tt := range lists {
		t.Run("List/"+tt.who, func(t *testing.T) {
			list, err := e.svc.Sandboxes.List(ctx, tt.p)
			var names []string
			for _, sb := range list {
				names = append(names, sb.Name)
			}
			if err != nil || list == nil || !slices.Equal(names, tt.want) {
				t.Errorf("List(%s) = %q (nil %v), %v; want %q", tt.who, names, list == nil, err, tt.want)
			}
		})
	}

	gets := []struct {
		who  string
		p    sandbox.Principal
		name string
		ok   bool
	}{
		{"agent a1", a1, "agent-a1-box", true},
		{"agent a1", a1, "box", true}, // its own, prefix left out
		{"agent a1", a1, "agent-a2-box", false},
		{"agent a1", a1, "agent-b1-box", false},
		{"agent a1", a1, "nosuch", false},
		{"agent b1", b1, "agent-a1-box", false},
		{"tenant admin of t1", admin, "agent-a1-box", true},
		{"tenant admin of t1", admin, "agent-a2-box", true},
		{"tenant admin of t1", admin, "agent-b1-box", false},
		{"operator", op, "t1/agent-a1-box", true},
		{"operator", op, "t2/agent-b1-box", true},
		{"operator", op, "agent-a1-box", false}, // a bare name is the system tenant's
		{"agent a1", a1, "t1/box", true},        // its own tenant, written out
		{"agent a1", a1, "t2/agent-b1-box", false},
		{"agent b1", b1, "t1/agent-a1-box", false},
		{"tenant admin of t1", admin, "t2/agent-b1-box", false},
	}
	for _, tt := range gets {
		t.Run("Get/"+tt.who+"/"+tt.name, func(t *testing.T) {
			sb, err := e.svc.Sandboxes.Get(ctx, tt.p, tt.name)
			if tt.ok {
				if _, name, _ := tt.p.Locate(tt.name); err != nil || sb.Name != name {
					t.Errorf("Get(%s) as %s = %+v, %v; want it", tt.name, tt.who, sb, err)
				}
				return
			}
			se := wantCode(t, "Get("+tt.name+") as "+tt.who, err, sandbox.CodeNotFound)
			if !strings.Contains(se.Message, tt.name) || sb.ID != "" {
				t.Errorf("Get(%s) as %s = %+v, %v; want not_found naming it and nothing else", tt.name, tt.who, sb, se)
			}
		})
	}

	// Every operation on someone else's sandbox is not_found and changes
	// nothing.
	t.Run("others' sandbox", func(t *testing.T) {
		for _, p := range []sandbox.Principal{a2, b1} {
			who := p.Tenant + "/" + p.Agent
			_, err := e.svc.Processes.Exec(ctx, p, "agent-a1-box", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
			wantCode(t, "Exec(agent-a1-box) as "+who, err, sandbox.CodeNotFound)
			_, err = e.svc.Files.Stat(ctx, p, "agent-a1-box", ".")
			wantCode(t, "Stat(agent-a1-box) as "+who, err, sandbox.CodeNotFound)
			wantCode(t, "Destroy(agent-a1-box) as "+who, e.svc.Sandboxes.Destroy(ctx, p, "agent-a1-box"), sandbox.CodeNotFound)
		}
		if got := e.row(t, "agent-a1-box"); got.ID != mine.ID || got.Status != sandbox.StatusRunning || e.killed(mine.ID) {
			t.Errorf("after others' calls, agent-a1-box = %+v (killed %v), want it untouched", got, e.killed(mine.ID))
		}
	})

	t.Run("invalid name", func(t *testing.T) {
		_, err := e.svc.Sandboxes.Get(ctx, a1, "Not A Name")
		wantCode(t, "Get(Not A Name)", err, sandbox.CodeInvalidArgument)
	})
}

func TestDestroy(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	keep := e.create(t, a1, "keep")
	tests := []struct {
		name    string
		prepare func(t *testing.T, sb sandbox.Sandbox)
	}{
		{"running", func(*testing.T, sandbox.Sandbox) {}},
		{"stopped", func(t *testing.T, sb sandbox.Sandbox) { e.stop(t, sb) }},
		{"vanished from the runtime", func(t *testing.T, sb sandbox.Sandbox) {
			if err := e.drv.Faults().Vanish(sb.ID); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := e.create(t, a1, "doomed")
			tt.prepare(t, sb)
			if err := e.svc.Sandboxes.Destroy(ctx, a1, "doomed"); err != nil {
				t.Fatalf("Destroy(doomed) = %v", err)
			}
			if n := e.drv.Count(driverfake.OpDelete, sb.ID); n != 1 {
				t.Errorf("the driver was asked to delete %s %d times, want 1", sb.ID, n)
			}
			e.wantHeld(t, keep.ID)
			if _, err := e.find(t, "doomed"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetSandbox(doomed) after Destroy = %v, want ErrNotFound", err)
			}
			_, err := e.svc.Sandboxes.Get(ctx, a1, "doomed")
			wantCode(t, "Get(doomed) after Destroy", err, sandbox.CodeNotFound)
			wantCode(t, "Destroy(doomed) twice", e.svc.Sandboxes.Destroy(ctx, a1, "doomed"), sandbox.CodeNotFound)
		})
	}
	// The tenant admin and the operator may destroy others' sandboxes.
	for _, p := range []sandbox.Principal{admin, op} {
		sb := e.create(t, a2, "theirs")
		if err := e.svc.Sandboxes.Destroy(ctx, p, p.RefOf(sb.Tenant, sb.Name)); err != nil {
			t.Errorf("Destroy(theirs) as %s = %v", p.Role, err)
		}
		if _, err := e.lay.Stat(ctx, "sb-"+sb.ID); err == nil {
			t.Errorf("Destroy(theirs) as %s left its root", p.Role)
		}
	}
	e.wantHeld(t, keep.ID)
	if _, err := e.lay.Stat(ctx, "default"); err != nil {
		t.Errorf("Stat(default) after destroys = %v, want the image kept", err)
	}
}
