package lifecycle_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// A token restricted to a name prefix reaches only names inside it, on
// every verb (another name is not_found, as a sandbox that does not
// exist; a create of one is permission_denied, naming the prefix), and
// sees only those in list; the names it chooses are kept (its attribution
// prefix aside).
func TestNamePrefixScope(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	hermes := a1
	hermes.NamePrefix = "hermes-"
	e.create(t, a1, "other")
	in := e.create(t, hermes, "hermes-task-1")
	if want := sandbox.AttributionPrefix("a1") + "hermes-task-1"; in.Name != want {
		t.Errorf("created %q, want %q", in.Name, want)
	}

	_, _, err := e.svc.Sandboxes.Create(ctx, hermes, sandbox.CreateRequest{Name: "task-2"})
	se := wantCode(t, "Create(task-2) outside the prefix", err, sandbox.CodePermissionDenied)
	if !strings.Contains(se.Message, `"hermes-"`) || se.Details["name_prefix"] != "hermes-" {
		t.Errorf("error = %+v; want the prefix named in message and details", se)
	}
	for verb, call := range map[string]func() error{
		"get": func() error { _, err := e.svc.Sandboxes.Get(ctx, hermes, "other"); return err },
		"exec": func() error {
			_, err := e.svc.Processes.Exec(ctx, hermes, "other", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
			return err
		},
		"destroy": func() error { return e.svc.Sandboxes.Destroy(ctx, hermes, "other") },
		"update": func() error {
			_, err := e.svc.Sandboxes.Update(ctx, hermes, "other", sandbox.SandboxUpdate{Labels: &[]string{"x"}})
			return err
		},
		"checkpoint": func() error {
			_, err := e.svc.Checkpoints.Checkpoint(ctx, hermes, "other", sandbox.CheckpointRequest{Label: ""})
			return err
		},
	} {
		se := wantCode(t, verb+"(other) outside the prefix", call(), sandbox.CodeNotFound)
		if se.Message != `sandbox "agent-a1-other" not found` {
			t.Errorf("%s(other) outside the prefix = %q, want the not_found of a sandbox that does not exist", verb, se.Message)
		}
	}
	if _, err := e.svc.Sandboxes.Get(ctx, hermes, "hermes-task-1"); err != nil {
		t.Errorf("Get(hermes-task-1) = %v, want it", err)
	}
	list, err := e.svc.Sandboxes.List(ctx, hermes)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != in.Name {
		t.Errorf("List = %+v, want only %q", list, in.Name)
	}
	if list, _ = e.svc.Sandboxes.List(ctx, a1); len(list) != 2 {
		t.Errorf("List(unrestricted) has %d sandboxes, want 2", len(list))
	}
	if _, err := e.svc.Sandboxes.Get(ctx, a1, "other"); err != nil {
		t.Errorf("unrestricted Get(other) = %v", err)
	}
}

// A restricted token mints only tokens at least as restricted; the
// restriction is kept on the token and comes back from Authenticate.
func TestNamePrefixTokens(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	if _, err := e.svc.Tenancy.CreateAgent(ctx, admin, sandbox.Agent{Name: "hermes", Tenant: "t1"}); err != nil {
		t.Fatal(err)
	}
	secret, info, err := e.svc.Tenancy.CreateToken(ctx, admin, sandbox.TokenRequest{Agent: "hermes", NamePrefix: "hermes-"})
	if err != nil || info.NamePrefix != "hermes-" {
		t.Fatalf("CreateToken = %+v, %v; want name_prefix hermes-", info, err)
	}
	p, err := e.svc.Tenancy.Authenticate(ctx, secret)
	if err != nil || p.NamePrefix != "hermes-" {
		t.Fatalf("Authenticate = %+v, %v; want NamePrefix hermes-", p, err)
	}
	_, _, err = e.svc.Tenancy.CreateToken(ctx, admin, sandbox.TokenRequest{Agent: "hermes", NamePrefix: "-bad"})
	wantCode(t, "CreateToken(prefix -bad)", err, sandbox.CodeInvalidArgument)

	narrowAdmin := admin
	narrowAdmin.NamePrefix = "hermes-"
	for _, prefix := range []string{"", "other-"} {
		_, _, err := e.svc.Tenancy.CreateToken(ctx, narrowAdmin, sandbox.TokenRequest{Agent: "hermes", NamePrefix: prefix})
		wantCode(t, "restricted CreateToken(prefix "+prefix+")", err, sandbox.CodePermissionDenied)
	}
	if _, info, err := e.svc.Tenancy.CreateToken(ctx, narrowAdmin, sandbox.TokenRequest{Agent: "hermes", NamePrefix: "hermes-ci-"}); err != nil || info.NamePrefix != "hermes-ci-" {
		t.Errorf("restricted CreateToken(narrower) = %+v, %v; want it", info, err)
	}
}

// Labels are set at create (a warm-pool claim included), replaced or
// cleared by Update, kept in order, and validated.
func TestLabels(t *testing.T) {
	for _, pool := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold", true: "pool"}[pool], func(t *testing.T) {
			e := newEnv(t, nil)
			if pool {
				e = poolEnv(t, nil)
			}
			ctx := t.Context()
			sb, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "lab", Labels: []string{"b", "a"}})
			if err != nil {
				t.Fatal(err)
			}
			if pool && sb.Reason != "created (from the warm pool)" {
				t.Fatalf("Create = %+v; want a claim", sb)
			}
			if got := e.row(t, "lab").Labels; !slices.Equal(got, []string{"b", "a"}) {
				t.Errorf("stored labels = %q, want [b a]", got)
			}
			got, err := e.svc.Sandboxes.Update(ctx, a1, "lab", sandbox.SandboxUpdate{Labels: &[]string{"c"}})
			if err != nil || !slices.Equal(got.Labels, []string{"c"}) {
				t.Errorf("Update(c) = %q, %v", got.Labels, err)
			}
			if got, err = e.svc.Sandboxes.Update(ctx, a1, "lab", sandbox.SandboxUpdate{}); err != nil || !slices.Equal(got.Labels, []string{"c"}) {
				t.Errorf("Update(nothing) = %q, %v; want labels kept", got.Labels, err)
			}
			if got, err = e.svc.Sandboxes.Update(ctx, a1, "lab", sandbox.SandboxUpdate{Labels: &[]string{}}); err != nil || got.Labels == nil || len(got.Labels) != 0 {
				t.Errorf("Update(clear) = %#v, %v; want []", got.Labels, err)
			}
			_, err = e.svc.Sandboxes.Update(ctx, a2, "agent-a1-lab", sandbox.SandboxUpdate{Labels: &[]string{"x"}})
			wantCode(t, "Update by another agent", err, sandbox.CodeNotFound)
			for _, bad := range [][]string{{""}, {"a", "a"}, {strings.Repeat("x", 64)}, {"tab\there"}, make([]string, 33)} {
				_, err := e.svc.Sandboxes.Update(ctx, a1, "lab", sandbox.SandboxUpdate{Labels: &bad})
				wantCode(t, "Update(bad labels)", err, sandbox.CodeInvalidArgument)
				_, _, err = e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "lab2", Labels: bad})
				wantCode(t, "Create(bad labels)", err, sandbox.CodeInvalidArgument)
			}
		})
	}
}

// The network mode of a create: the tenant's default, egress where the
// policy and the driver allow it, none for every warm-pool claim; the
// runtime gets it in the spec, and a restart keeps it.
func TestNetworkMode(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.Driver = driverfake.New(driverfake.Options{Egress: true})
		o.WarmPool = map[string]int{"small": 1}
	})
	lifecycle.FillPool(t.Context(), e.svc)
	ctx := t.Context()
	drv := e.opts.Driver.(*driverfake.Driver)
	plain := e.create(t, a1, "plain")
	if plain.Network != sandbox.NetworkNone || plain.Reason != "created (from the warm pool)" {
		t.Errorf("default create = network %q, reason %q; want none, from the pool", plain.Network, plain.Reason)
	}
	out, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "out", Network: sandbox.NetworkEgress})
	if err != nil || out.Network != sandbox.NetworkEgress || out.Reason == "created (from the warm pool)" {
		t.Fatalf("egress create = %+v, %v; want egress, not from the pool", out, err)
	}
	if spec, ok := drv.Spec(out.ID); !ok || spec.Network != sandbox.NetworkEgress {
		t.Errorf("the runtime's spec = %+v; want network egress", spec)
	}
	if got := e.row(t, "out").Network; got != sandbox.NetworkEgress {
		t.Errorf("stored network %q", got)
	}
	_, _, err = e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "odd", Network: "bridge"})
	wantCode(t, "Create(network bridge)", err, sandbox.CodeInvalidArgument)

	// The tenant's policy: egress forbidden; egress by default.
	no := false
	if _, err := e.svc.Tenancy.UpdateTenant(ctx, op, "t1", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{AllowEgress: &no}}); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "denied", Network: sandbox.NetworkEgress})
	wantCode(t, "Create(egress) where the policy forbids it", err, sandbox.CodePermissionDenied)
	egress := sandbox.NetworkEgress
	if _, err := e.svc.Tenancy.UpdateTenant(ctx, op, "t2", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{Network: &egress}}); err != nil {
		t.Fatal(err)
	}
	if sb := e.create(t, b1, "web"); sb.Network != sandbox.NetworkEgress {
		t.Errorf("create in a tenant whose default is egress = %q", sb.Network)
	}
}

// A driver without egress refuses it with a clear error, before anything
// is made.
func TestNetworkWithoutEgress(t *testing.T) {
	e := newEnv(t, nil)
	_, _, err := e.svc.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: "out", Network: sandbox.NetworkEgress})
	se := wantCode(t, "Create(egress) on a driver without it", err, sandbox.CodeInvalidArgument)
	if !strings.Contains(se.Message, "no egress") {
		t.Errorf("message %q", se.Message)
	}
	e.wantHeld(t)
}

// Egress policies: a sandbox's own within its tenant's, checked at create
// and update, given to the runtime at start and, live, to a running
// sandbox when it or its tenant's changes.
func TestEgressPolicy(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Driver = driverfake.New(driverfake.Options{Egress: true}) })
	ctx := t.Context()
	drv := e.opts.Driver.(*driverfake.Driver)
	tenant := sandbox.EgressPolicy{Allow: []string{"203.0.113.0/24"}, Deny: []string{"203.0.113.9"}}
	if _, err := e.svc.Tenancy.UpdateTenant(ctx, op, "t1", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{Egress: &tenant}}); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "wide", Network: sandbox.NetworkEgress,
		Egress: &sandbox.EgressPolicy{Allow: []string{"198.51.100.0/24"}}})
	wantCode(t, "Create(allow outside the tenant's)", err, sandbox.CodeInvalidArgument)
	sb, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "out", Network: sandbox.NetworkEgress,
		Egress: &sandbox.EgressPolicy{Allow: []string{"203.0.113.128/25"}, Deny: []string{"203.0.113.200"}}})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := drv.Spec(sb.ID)
	if got := fmt.Sprint(spec.Egress.Allow, spec.Egress.Deny); got != "[203.0.113.128/25] [203.0.113.9/32 203.0.113.200/32]" {
		t.Errorf("the runtime's rules at start = %s", got)
	}
	// A live change of the sandbox's own policy.
	if _, err := e.svc.Sandboxes.Update(ctx, a1, "out", sandbox.SandboxUpdate{Egress: &sandbox.EgressPolicy{}}); err != nil {
		t.Fatal(err)
	}
	rules, _ := drv.EgressOf(sb.ID)
	if got := fmt.Sprint(rules.Allow, rules.Deny); got != "[203.0.113.0/24] [203.0.113.9/32]" {
		t.Errorf("rules after clearing the sandbox's own = %s; want the tenant's", got)
	}
	_, err = e.svc.Sandboxes.Update(ctx, a1, "out", sandbox.SandboxUpdate{Egress: &sandbox.EgressPolicy{Deny: []string{"nope"}}})
	wantCode(t, "Update(bad network)", err, sandbox.CodeInvalidArgument)
	// A live change of the tenant's.
	none := sandbox.EgressPolicy{Deny: []string{"192.0.2.1"}}
	if _, err := e.svc.Tenancy.UpdateTenant(ctx, op, "t1", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{Egress: &none}}); err != nil {
		t.Fatal(err)
	}
	rules, _ = drv.EgressOf(sb.ID)
	if got := fmt.Sprint(rules.Allow, rules.Deny); got != "[] [192.0.2.1/32]" {
		t.Errorf("rules after the tenant's change = %s", got)
	}
	_, err = e.svc.Tenancy.UpdateTenant(ctx, op, "t1", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{Egress: &sandbox.EgressPolicy{Allow: []string{"::/0"}}}})
	wantCode(t, "UpdateTenant(IPv6 allow)", err, sandbox.CodeInvalidArgument)

	// Domains: the tenant allows *.example.com, the sandbox one name
	// within it (not one outside), and denies another; the runtime gets
	// the names, normalized, next to the networks.
	byName := sandbox.EgressPolicy{Allow: []string{"*.Example.com."}, Deny: []string{"ads.example.com"}}
	if _, err := e.svc.Tenancy.UpdateTenant(ctx, op, "t1", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{Egress: &byName}}); err != nil {
		t.Fatal(err)
	}
	rules, _ = drv.EgressOf(sb.ID)
	if got := fmt.Sprint(rules.Allow, rules.AllowDomains, rules.Deny, rules.DenyDomains); got != "[] [*.example.com] [] [ads.example.com]" {
		t.Errorf("rules after the tenant's change to domains = %s", got)
	}
	_, err = e.svc.Sandboxes.Update(ctx, a1, "out", sandbox.SandboxUpdate{Egress: &sandbox.EgressPolicy{Allow: []string{"example.org"}}})
	wantCode(t, "Update(a domain outside the tenant's)", err, sandbox.CodeInvalidArgument)
	_, err = e.svc.Sandboxes.Update(ctx, a1, "out", sandbox.SandboxUpdate{Egress: &sandbox.EgressPolicy{Allow: []string{"203.0.113.0/24"}}})
	wantCode(t, "Update(a network, the tenant allowing only domains)", err, sandbox.CodeInvalidArgument)
	if _, err := e.svc.Sandboxes.Update(ctx, a1, "out", sandbox.SandboxUpdate{Egress: &sandbox.EgressPolicy{Allow: []string{"api.example.com"}, Deny: []string{"*.cdn.example.net"}}}); err != nil {
		t.Fatal(err)
	}
	rules, _ = drv.EgressOf(sb.ID)
	if got := fmt.Sprint(rules.AllowDomains, rules.DenyDomains); got != "[api.example.com] [ads.example.com *.cdn.example.net]" {
		t.Errorf("rules after the sandbox's own domains = %s", got)
	}
}

// A token restricted to a name prefix is told the usage of its own
// sandboxes only: its limits count those inside the prefix, and a quota or
// budget refusal gives it the limit without the count of the others.
func TestNamePrefixUsage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	q := e.guarded(t, "quota", wide, sandbox.PolicyOverrides{AgentQuota: intp(3)}, "q")
	restricted := q
	restricted.NamePrefix = "hermes-"
	for _, name := range []string{"web", "db"} {
		e.create(t, q, name)
	}
	inside := e.create(t, restricted, "hermes-1")
	rep, err := e.svc.Tenancy.Limits(ctx, restricted)
	if err != nil || rep.Sandboxes == nil || rep.Sandboxes.Used != 1 ||
		rep.Budget.Used.MilliCPU != inside.Resources.MilliCPU || rep.Budget.Used.MemoryBytes != inside.Resources.MemoryBytes {
		t.Errorf("Limits as hermes- = %+v, %v; want the usage of hermes-1 alone", rep, err)
	}
	if rep, err := e.svc.Tenancy.Limits(ctx, q); err != nil || rep.Sandboxes.Used != 3 {
		t.Errorf("Limits unrestricted = %+v, %v; want 3 sandboxes used", rep.Sandboxes, err)
	}
	_, _, err = e.svc.Sandboxes.Create(ctx, restricted, sandbox.CreateRequest{Name: "hermes-2"})
	se := wantCode(t, "Create(hermes-2) at the quota", err, sandbox.CodeQuotaExceeded)
	if _, ok := se.Details["used"]; ok || se.Details["limit"] != 3 || strings.Contains(se.Message, "3 of 3") {
		t.Errorf("quota refusal to hermes- = %q %v; want the limit without the usage", se.Message, se.Details)
	}
	_, _, err = e.svc.Sandboxes.Create(ctx, q, sandbox.CreateRequest{Name: "hermes-2"})
	if se := wantCode(t, "Create(hermes-2) unrestricted", err, sandbox.CodeQuotaExceeded); se.Details["used"] != 3 {
		t.Errorf("quota refusal unrestricted = %v, want used 3", se.Details)
	}
}
