package lifecycle_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
)

// bindingsEnv is an env whose service keeps secrets and whose driver
// offers egress, with the secret API_KEY set in tenants t1 and t2 (each
// its own value).
func bindingsEnv(t *testing.T) *env {
	t.Helper()
	box, err := secrets.New(bytes.Repeat([]byte{7}, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *envOptions) {
		o.Secrets = box
		drv := driverfake.New(driverfake.Options{Egress: true})
		t.Cleanup(func() { drv.Close() })
		o.Driver = drv
	})
	for tenant, value := range map[string]string{"t1": secretValue, "t2": "t2-value-0000"} {
		if _, err := e.svc.Credentials.SetSecret(t.Context(), op, tenant, "API_KEY", []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// openai is a binding of API_KEY with the defaults left out.
var openai = sandbox.Binding{Name: "openai", Secret: "API_KEY", Upstream: "https://API.openai.com/v1"}

// TestBindingsAuthorization: the secrets' rule. Operators any tenant's,
// a tenant admin its own (another tenant's does not exist for it); an
// agent lists its tenant's and may not set or delete.
func TestBindingsAuthorization(t *testing.T) {
	e := bindingsEnv(t)
	ctx := t.Context()
	tests := []struct {
		name   string
		p      sandbox.Principal
		tenant string
		want   sandbox.Code // "" is success
		list   sandbox.Code
	}{
		{"operator, t1", op, "t1", "", ""},
		{"operator, t2", op, "t2", "", ""},
		{"tenant admin, own by default", admin, "", "", ""},
		{"tenant admin, own by name", admin, "t1", "", ""},
		{"tenant admin, other tenant", admin, "t2", sandbox.CodeNotFound, sandbox.CodeNotFound},
		{"agent, own tenant", a1, "", sandbox.CodePermissionDenied, ""},
		{"agent, own tenant by name", a1, "t1", sandbox.CodePermissionDenied, ""},
		{"agent, other tenant", b1, "t1", sandbox.CodeNotFound, sandbox.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.svc.Credentials.SetBinding(ctx, tt.p, tt.tenant, openai)
			if tt.want != "" {
				se := wantCode(t, "SetBinding", err, tt.want)
				if tt.want == sandbox.CodePermissionDenied && !strings.Contains(se.Message, "binding") {
					t.Errorf("SetBinding refusal %q does not name bindings", se.Message)
				}
				wantCode(t, "DeleteBinding", e.svc.Credentials.DeleteBinding(ctx, tt.p, tt.tenant, "openai"), tt.want)
			} else {
				wantTenant := tt.tenant
				if wantTenant == "" {
					wantTenant = tt.p.Tenant
				}
				if err != nil || got.Tenant != wantTenant || got.Name != "openai" {
					t.Fatalf("SetBinding = %+v, %v; want openai in %s", got, err, wantTenant)
				}
			}
			list, err := e.svc.Credentials.ListBindings(ctx, tt.p, tt.tenant)
			if tt.list != "" {
				wantCode(t, "ListBindings", err, tt.list)
				return
			}
			if err != nil || len(list) != 1 || list[0].Name != "openai" {
				t.Errorf("ListBindings = %+v, %v; want openai", list, err)
			}
			if tt.want == "" {
				if err := e.svc.Credentials.DeleteBinding(ctx, tt.p, tt.tenant, "openai"); err != nil {
					t.Errorf("DeleteBinding = %v", err)
				}
				// Put it back for the agents' rows, which list it.
				if _, err := e.svc.Credentials.SetBinding(ctx, op, "t1", openai); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if err := e.svc.Credentials.DeleteBinding(ctx, admin, "", "nosuch"); !sandbox.IsCode(err, sandbox.CodeNotFound) ||
		!strings.Contains(sandbox.AsError(err).Hint, "hearth binding list") {
		t.Errorf("DeleteBinding(nosuch) = %v, want not_found naming `hearth binding list`", err)
	}
}

// TestSetBinding: validation, defaults and normalization, the secret must
// exist, and a replacement keeps its creation time.
func TestSetBinding(t *testing.T) {
	e := bindingsEnv(t)
	ctx := t.Context()
	b, err := e.svc.Credentials.SetBinding(ctx, admin, "", openai)
	want := sandbox.Binding{Tenant: "t1", Name: "openai", Secret: "API_KEY", Upstream: "https://api.openai.com/v1",
		Header: "Authorization", Format: "Bearer {secret}", CreatedAt: epoch, UpdatedAt: epoch}
	if err != nil || b != want {
		t.Fatalf("SetBinding(openai) = %+v, %v; want %+v", b, err, want)
	}

	e.clock.Advance(time.Hour)
	replaced := sandbox.Binding{Name: "openai", Secret: "API_KEY", Upstream: "http://203.0.113.7:8080", Header: "x-api-key", Format: "{secret}"}
	b, err = e.svc.Credentials.SetBinding(ctx, admin, "", replaced)
	if err != nil || b.Header != "X-Api-Key" || b.Format != "{secret}" || b.Upstream != "http://203.0.113.7:8080" ||
		!b.CreatedAt.Equal(epoch) || !b.UpdatedAt.Equal(epoch.Add(time.Hour)) {
		t.Errorf("SetBinding(replace) = %+v, %v; want the new fields, created at the epoch, updated an hour later", b, err)
	}

	for _, tt := range []struct {
		name string
		edit func(*sandbox.Binding)
	}{
		{"bad name", func(b *sandbox.Binding) { b.Name = "Open.AI" }},
		{"bad secret name", func(b *sandbox.Binding) { b.Secret = "api-key" }},
		{"relative upstream", func(b *sandbox.Binding) { b.Upstream = "api.openai.com" }},
		{"upstream with a query", func(b *sandbox.Binding) { b.Upstream = "https://x/?k=v" }},
		{"hop-by-hop header", func(b *sandbox.Binding) { b.Header = "Transfer-Encoding" }},
		{"format without the placeholder", func(b *sandbox.Binding) { b.Format = "Bearer" }},
		{"format with a line break", func(b *sandbox.Binding) { b.Format = "{secret}\r\nX: y" }},
	} {
		b := openai
		b.Name = "other"
		tt.edit(&b)
		_, err := e.svc.Credentials.SetBinding(ctx, admin, "", b)
		wantCode(t, "SetBinding("+tt.name+")", err, sandbox.CodeInvalidArgument)
	}

	missing := openai
	missing.Name, missing.Secret = "gh", "GH_TOKEN"
	_, err = e.svc.Credentials.SetBinding(ctx, admin, "", missing)
	se := wantCode(t, "SetBinding of a missing secret", err, sandbox.CodeNotFound)
	if !strings.Contains(se.Message, "GH_TOKEN") || !strings.Contains(se.Hint, "hearth secret set GH_TOKEN") {
		t.Errorf("SetBinding of a missing secret = %v; want it named, and a hint to set it", se)
	}
	// Another tenant's secret of that name is not this tenant's.
	if _, err := e.svc.Credentials.SetSecret(ctx, op, "t2", "GH_TOKEN", []byte("gh-t2-value")); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Credentials.SetBinding(ctx, admin, "", missing)
	wantCode(t, "SetBinding of another tenant's secret", err, sandbox.CodeNotFound)

	list, err := e.svc.Credentials.ListBindings(ctx, a1, "")
	if err != nil || len(list) != 1 || list[0].Name != "openai" {
		t.Errorf("ListBindings after refused sets = %+v, %v; want openai alone", list, err)
	}
	if list, err := e.svc.Credentials.ListBindings(ctx, b1, ""); err != nil || list == nil || len(list) != 0 {
		t.Errorf("ListBindings(t2) = %#v, %v; want an empty list", list, err)
	}
}

// TestGatewayRoute: the gateway's lookup gives an egress sandbox its own
// tenant's binding with the secret's real value, and refuses everything
// else with a stable code.
func TestGatewayRoute(t *testing.T) {
	e := bindingsEnv(t)
	ctx := t.Context()
	if _, err := e.svc.Credentials.SetBinding(ctx, admin, "", openai); err != nil {
		t.Fatal(err)
	}
	theirs := openai
	theirs.Name = "theirs"
	if _, err := e.svc.Credentials.SetBinding(ctx, op, "t2", theirs); err != nil {
		t.Fatal(err)
	}
	out, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "out", Network: sandbox.NetworkEgress})
	if err != nil {
		t.Fatal(err)
	}

	b, value, err := e.svc.Credentials.GatewayRoute(ctx, out.ID, "openai")
	if err != nil || b.Tenant != "t1" || b.Upstream != "https://api.openai.com/v1" || b.Header != "Authorization" || string(value) != secretValue {
		t.Fatalf("GatewayRoute(out, openai) = %+v, %q, %v; want t1's binding and the secret's value", b, value, err)
	}
	if got := string(b.HeaderValue(value)); got != "Bearer "+secretValue {
		t.Errorf("HeaderValue = %q, want Bearer and the value", got)
	}

	// Another tenant's binding does not exist for this sandbox.
	_, value, err = e.svc.Credentials.GatewayRoute(ctx, out.ID, "theirs")
	se := wantCode(t, "GatewayRoute(out, t2's binding)", err, sandbox.CodeNotFound)
	if se.Message != `no binding "theirs" in tenant "t1"` || !strings.Contains(se.Hint, "hearth binding list") || value != nil {
		t.Errorf("GatewayRoute(out, t2's binding) = %v, value %q", se, value)
	}
	_, _, err = e.svc.Credentials.GatewayRoute(ctx, out.ID, "nosuch")
	wantCode(t, "GatewayRoute(out, nosuch)", err, sandbox.CodeNotFound)

	plain := e.create(t, a1, "plain")
	_, value, err = e.svc.Credentials.GatewayRoute(ctx, plain.ID, "openai")
	if wantCode(t, "GatewayRoute from a sandbox without egress", err, sandbox.CodePermissionDenied); value != nil {
		t.Errorf("a refused GatewayRoute returned the value %q", value)
	}
	_, _, err = e.svc.Credentials.GatewayRoute(ctx, "xnosuchsandbox00", "openai")
	wantCode(t, "GatewayRoute(unknown id)", err, sandbox.CodeNotFound)
	_, _, err = e.svc.Credentials.GatewayRoute(ctx, out.Name, "openai")
	wantCode(t, "GatewayRoute(a name, not an id)", err, sandbox.CodeNotFound)

	// A value that cannot go in a header is refused, not sent.
	if _, err := e.svc.Credentials.SetSecret(ctx, admin, "", "MULTI", []byte("line1\nline2")); err != nil {
		t.Fatal(err)
	}
	multi := openai
	multi.Name, multi.Secret = "multi", "MULTI"
	if _, err := e.svc.Credentials.SetBinding(ctx, admin, "", multi); err != nil {
		t.Fatal(err)
	}
	_, value, err = e.svc.Credentials.GatewayRoute(ctx, out.ID, "multi")
	if wantCode(t, "GatewayRoute to a multi-line secret", err, sandbox.CodeInvalidArgument); value != nil {
		t.Errorf("a refused GatewayRoute returned the value %q", value)
	}

	// The secret deleted after the binding was set: the binding stays,
	// the route is not_found.
	if err := e.svc.Credentials.DeleteSecret(ctx, admin, "", "API_KEY"); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Credentials.GatewayRoute(ctx, out.ID, "openai")
	se = wantCode(t, "GatewayRoute after its secret was deleted", err, sandbox.CodeNotFound)
	if !strings.Contains(se.Message, "API_KEY") {
		t.Errorf("GatewayRoute after its secret was deleted = %v, want the secret named", se)
	}
	if list, err := e.svc.Credentials.ListBindings(ctx, a1, ""); err != nil || len(list) != 2 {
		t.Errorf("ListBindings after the secret went = %+v, %v; want both bindings kept", list, err)
	}
}

// TestGatewayRouteWithoutKey: a daemon that keeps no secrets cannot open
// one for the gateway, and says so.
func TestGatewayRouteWithoutKey(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		drv := driverfake.New(driverfake.Options{Egress: true})
		t.Cleanup(func() { drv.Close() })
		o.Driver = drv
	})
	ctx := t.Context()
	// The row as a daemon with the key left it.
	if err := e.db.Secrets().Put(ctx, "t1", "API_KEY", []byte("sealed-elsewhere"), epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Credentials.SetBinding(ctx, admin, "", openai); err != nil {
		t.Fatalf("SetBinding without a key = %v; want it stored (it holds no value)", err)
	}
	out, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "out", Network: sandbox.NetworkEgress})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Credentials.GatewayRoute(ctx, out.ID, "openai")
	wantCode(t, "GatewayRoute without a key", err, sandbox.CodeUnavailable)
}
