package lifecycle_test

import (
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// TestTenantPool: an operator pins a tenant to a node pool at create and
// moves or un-pins it at update; GetTenant and Pool read it back. The
// system tenant has none, a missing tenant is permission_denied (as its
// creates are), a bad pool is invalid_argument and changes nothing, and
// only an operator may set one.
func TestTenantPool(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	pool := func(tenant, want string) {
		t.Helper()
		if got, err := e.svc.Tenancy.Pool(ctx, tenant); err != nil || got != want {
			t.Errorf("Pool(%s) = %q, %v; want %q", tenant, got, err, want)
		}
		if tenant == sandbox.SystemTenant {
			return
		}
		if tn, err := e.svc.Tenancy.GetTenant(ctx, op, tenant); err != nil || tn.Pool != want {
			t.Errorf("GetTenant(%s).Pool = %q, %v; want %q", tenant, tn.Pool, err, want)
		}
	}
	update := func(p sandbox.Principal, tenant, to string) (sandbox.Tenant, error) {
		return e.svc.Tenancy.UpdateTenant(ctx, p, tenant, sandbox.TenantUpdate{Pool: &to})
	}

	tn, err := e.svc.Tenancy.CreateTenant(ctx, op, sandbox.Tenant{Name: "gpu", Allocation: wide, Pool: "gpu-a100"})
	if err != nil || tn.Pool != "gpu-a100" {
		t.Fatalf("CreateTenant(pool gpu-a100) = %+v, %v; want the pool", tn, err)
	}
	pool("gpu", "gpu-a100")
	pool("t1", "")
	pool(sandbox.SystemTenant, "")

	// An update without a pool keeps it; one with a pool moves it; "" un-pins.
	if _, err := e.svc.Tenancy.UpdateTenant(ctx, op, "gpu", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{AgentQuota: intp(2)}}); err != nil {
		t.Fatalf("UpdateTenant(policy only) = %v", err)
	}
	pool("gpu", "gpu-a100")
	if tn, err := update(op, "gpu", "arm64"); err != nil || tn.Pool != "arm64" {
		t.Fatalf("UpdateTenant(pool arm64) = %+v, %v; want the pool", tn, err)
	}
	pool("gpu", "arm64")
	if _, err := update(op, "gpu", ""); err != nil {
		t.Fatalf("UpdateTenant(pool \"\") = %v", err)
	}
	pool("gpu", "")

	for _, bad := range []string{"GPU", "gpu_a100", "-gpu", "gpu.a100"} {
		_, err := e.svc.Tenancy.CreateTenant(ctx, op, sandbox.Tenant{Name: "bad", Allocation: wide, Pool: bad})
		if se := wantCode(t, "CreateTenant(pool "+bad+")", err, sandbox.CodeInvalidArgument); se.Hint == "" {
			t.Errorf("CreateTenant(pool %s) = %v, want a hint", bad, se)
		}
		_, err = update(op, "gpu", bad)
		wantCode(t, "UpdateTenant(pool "+bad+")", err, sandbox.CodeInvalidArgument)
	}
	pool("gpu", "")
	_, err = e.svc.Tenancy.GetTenant(ctx, op, "bad")
	wantCode(t, "GetTenant(bad) after the refused creates", err, sandbox.CodeNotFound)

	_, err = update(admin, "t1", "gpu-a100")
	wantCode(t, "UpdateTenant(pool) as a tenant admin", err, sandbox.CodePermissionDenied)
	_, err = e.svc.Tenancy.CreateTenant(ctx, admin, sandbox.Tenant{Name: "mine", Allocation: wide, Pool: "gpu-a100"})
	wantCode(t, "CreateTenant(pool) as a tenant admin", err, sandbox.CodePermissionDenied)
	pool("t1", "")

	_, err = e.svc.Tenancy.Pool(ctx, "nope")
	wantCode(t, "Pool(nope)", err, sandbox.CodePermissionDenied)
}

// TestLimitsOf: who may read whose limits and usage. An operator any
// tenant's and agent's; a tenant admin its tenant's and its agents', not
// another tenant's; an agent its own only; a token restricted to a name
// prefix its own only. What may not be named, and what does not exist,
// is not_found; the reports count what the named one holds.
func TestLimitsOf(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	for _, a := range []sandbox.Agent{{Tenant: "t1", Name: "a1"}, {Tenant: "t1", Name: "a2"}, {Tenant: "t2", Name: "b1"}} {
		if _, err := e.svc.Tenancy.CreateAgent(ctx, op, a); err != nil {
			t.Fatal(err)
		}
	}
	e.create(t, a1, "one")
	e.create(t, a1, "two")
	e.create(t, a2, "three")
	small := sandbox.Sizes()["small"]
	for _, c := range []struct {
		name          string
		p             sandbox.Principal
		tenant, agent string
		code          sandbox.Code
		used          int   // the agent's sandboxes
		cpu           int64 // the tenant's millicpu used
	}{
		{"operator, a tenant", op, "t1", "", "", 0, 3 * small.MilliCPU},
		{"operator, an agent", op, "t1", "a1", "", 2, 3 * small.MilliCPU},
		{"operator, another tenant's agent", op, "t2", "b1", "", 0, 0},
		{"operator, no such tenant", op, "nope", "", sandbox.CodeNotFound, 0, 0},
		{"operator, no such agent", op, "t1", "ghost", sandbox.CodeNotFound, 0, 0},
		{"tenant admin, its tenant", admin, "", "", "", 0, 3 * small.MilliCPU},
		{"tenant admin, its agent", admin, "t1", "a2", "", 1, 3 * small.MilliCPU},
		{"tenant admin, another tenant", admin, "t2", "", sandbox.CodeNotFound, 0, 0},
		{"tenant admin, another tenant's agent", admin, "t2", "b1", sandbox.CodeNotFound, 0, 0},
		{"agent, itself", a1, "t1", "a1", "", 2, 3 * small.MilliCPU},
		{"agent, another agent", a1, "t1", "a2", sandbox.CodeNotFound, 0, 0},
		{"agent, its tenant", a1, "t1", "", sandbox.CodeNotFound, 0, 0},
		{"agent, another tenant", b1, "t1", "a1", sandbox.CodeNotFound, 0, 0},
		{"prefixed token, anyone", sandbox.Principal{Tenant: "t1", Agent: "a1", Role: sandbox.RoleAgent, NamePrefix: "x"}, "t1", "a1", sandbox.CodePermissionDenied, 0, 0},
	} {
		rep, err := e.svc.Tenancy.LimitsOf(ctx, c.p, c.tenant, c.agent)
		if c.code != "" {
			if !sandbox.IsCode(err, c.code) {
				t.Errorf("%s: LimitsOf(%q, %q) = %+v, %v; want %s", c.name, c.tenant, c.agent, rep, err, c.code)
			}
			continue
		}
		if err != nil || rep.Budget == nil || rep.Budget.Used.MilliCPU != c.cpu || rep.Sandboxes == nil || rep.Sandboxes.Used != c.used {
			t.Errorf("%s: LimitsOf(%q, %q) = %+v (budget %+v, sandboxes %+v), %v; want %d sandboxes, %d mCPU used", c.name, c.tenant, c.agent, rep, rep.Budget, rep.Sandboxes, err, c.used, c.cpu)
		}
	}
}
