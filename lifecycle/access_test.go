package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// More principals of the authorization table: a1 restricted to the name
// prefix "hermes-", and t2's tenant admin.
var (
	hermes = sandbox.Principal{Tenant: "t1", Agent: "a1", Role: sandbox.RoleAgent, NamePrefix: "hermes-"}
	admin2 = sandbox.Principal{Tenant: "t2", Agent: "boss2", Role: sandbox.RoleTenantAdmin}
)

// bg is the context of the table's many calls.
var bg = context.Background()

// principals are every kind of caller, by a name for messages.
var principals = []struct {
	who string
	p   sandbox.Principal
}{
	{"operator", op}, {"t1 admin", admin}, {"a1", a1}, {"a1 with prefix hermes-", hermes},
	{"a2 of t1", a2}, {"b1 of t2", b1}, {"t2 admin", admin2}, {"t2's own a1", twinA1},
}

// twins are two services alike in everything but t1's sandboxes, secret
// and binding, which only with has: a call that cannot reach them must
// answer the same in both, or its answer tells them apart.
type twins struct {
	with, without *env
	// victim is a1's hermes-box (in its prefix), web a1's web (outside
	// it); ck is a checkpoint of victim, taken after marker was written.
	victim, web sandbox.Sandbox
	ck          string
}

const marker = "t1-private-7c1d"

func newTwins(t *testing.T) *twins {
	tw := &twins{with: secretsEnv(t), without: secretsEnv(t)}
	ctx := t.Context()
	e := tw.with
	tw.victim = e.create(t, a1, "hermes-box")
	tw.web = e.create(t, a1, "web")
	e.exec(t, a1, "hermes-box", "echo "+marker+" > marker")
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "hermes-box", sandbox.CheckpointRequest{Label: "before"})
	if err != nil {
		t.Fatal(err)
	}
	tw.ck = ck.ID
	if _, err := e.svc.Credentials.SetSecret(ctx, admin, "", "API_KEY", []byte(secretValue)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Credentials.SetBinding(ctx, admin, "", sandbox.Binding{Name: "api", Secret: "API_KEY", Upstream: "https://api.example.com"}); err != nil {
		t.Fatal(err)
	}
	// Each caller's own sandbox, in both: the one its checkpoint
	// references and forks go through.
	for _, pp := range principals {
		for _, e := range []*env{tw.with, tw.without} {
			if _, _, err := e.svc.Sandboxes.Create(ctx, pp.p, sandbox.CreateRequest{Name: "hermes-mine"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tw
}

// same runs call by p against both services and wants the same not_found
// from each: code, message, hint and details. An operator, who may see
// every tenant, only wants not_found: its not_found of a bare name names
// the tenants that have it (see TestNamesPerTenant).
func (tw *twins) same(t *testing.T, p sandbox.Principal, what string, call func(e *env) error) {
	t.Helper()
	with, without := call(tw.with), call(tw.without)
	var sw, so *sandbox.Error
	if !errors.As(with, &sw) || !errors.As(without, &so) || sw.Code != sandbox.CodeNotFound || so.Code != sandbox.CodeNotFound {
		t.Errorf("%s = %v (without t1's: %v), want not_found from both", what, with, without)
		return
	}
	if p.Role != sandbox.RoleOperator && !reflect.DeepEqual(sw, so) {
		t.Errorf("%s tells t1's things apart:\n\twith    %+v\n\twithout %+v", what, sw, so)
	}
}

// sandboxVerbs are every lifecycle call that takes a sandbox reference,
// with valid arguments otherwise; ck is a checkpoint id to restore, fork
// or delete.
func sandboxVerbs(ck string) map[string]func(e *env, p sandbox.Principal, ref string) error {
	one := func(f func(e *env, p sandbox.Principal, ref string) (any, error)) func(*env, sandbox.Principal, string) error {
		return func(e *env, p sandbox.Principal, ref string) error { _, err := f(e, p, ref); return err }
	}
	return map[string]func(e *env, p sandbox.Principal, ref string) error{
		"get": one(func(e *env, p sandbox.Principal, ref string) (any, error) { return e.svc.Sandboxes.Get(bg, p, ref) }),
		"describe": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Sandboxes.Describe(bg, p, ref)
		}),
		"update": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Sandboxes.Update(bg, p, ref, sandbox.SandboxUpdate{Labels: &[]string{"x"}})
		}),
		"destroy": func(e *env, p sandbox.Principal, ref string) error { return e.svc.Sandboxes.Destroy(bg, p, ref) },
		"sleep":   one(func(e *env, p sandbox.Principal, ref string) (any, error) { return e.svc.Sandboxes.Sleep(bg, p, ref) }),
		"wake":    one(func(e *env, p sandbox.Principal, ref string) (any, error) { return e.svc.Sandboxes.Wake(bg, p, ref) }),
		"exec": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Processes.Exec(bg, p, ref, sandbox.ExecRequest{Shell: "rm -f marker"}, nil, io.Discard, io.Discard)
		}),
		"read": func(e *env, p sandbox.Principal, ref string) error {
			return e.svc.Files.ReadFile(bg, p, ref, "marker", io.Discard)
		},
		"write": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Files.WriteFile(bg, p, ref, sandbox.WriteRequest{Path: "marker"}, strings.NewReader("stolen"))
		}),
		"list dir": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Files.ListDir(bg, p, ref, ".")
		}),
		"stat": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Files.Stat(bg, p, ref, "marker")
		}),
		"mkdir": one(func(e *env, p sandbox.Principal, ref string) (any, error) { return e.svc.Files.Mkdir(bg, p, ref, "d") }),
		"remove": func(e *env, p sandbox.Principal, ref string) error {
			return e.svc.Files.Remove(bg, p, ref, "marker", false)
		},
		"rename": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Files.Rename(bg, p, ref, "marker", "moved")
		}),
		"chmod": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Files.Chmod(bg, p, ref, "marker", 0o777)
		}),
		"connect": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Processes.Connect(bg, p, ref, 8080)
		}),
		"ports": func(e *env, p sandbox.Principal, ref string) error {
			_, _, err := e.svc.Processes.Ports(bg, p, ref)
			return err
		},
		"checkpoint": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Checkpoints.Checkpoint(bg, p, ref, sandbox.CheckpointRequest{})
		}),
		"checkpoints": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Checkpoints.ListCheckpoints(bg, p, ref)
		}),
		"delete checkpoint": func(e *env, p sandbox.Principal, ref string) error {
			return e.svc.Checkpoints.DeleteCheckpoint(bg, p, ref, ck)
		},
		"restore": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Checkpoints.Restore(bg, p, ref, ck)
		}),
		"fork": one(func(e *env, p sandbox.Principal, ref string) (any, error) {
			return e.svc.Checkpoints.Fork(bg, p, ref, ck, "stolen")
		}),
	}
}

// refs are the ways a caller may write t1's a1's sandbox called short,
// each with the callers that reach it.
func refs(short, id string) []struct {
	ref  string
	sees []sandbox.Principal
} {
	full := "agent-a1-" + short
	own := []sandbox.Principal{a1}
	if strings.HasPrefix(short, hermes.NamePrefix) {
		own = append(own, hermes)
	}
	return []struct {
		ref  string
		sees []sandbox.Principal
	}{
		{short, own},
		{full, append([]sandbox.Principal{admin}, own...)},
		{"t1/" + full, append([]sandbox.Principal{op, admin}, own...)},
		{"t1/" + short, own},
		{"t2/" + full, nil},
		{"system/" + full, nil},
		{id, nil}, // an id is no reference: a sandbox can read its own
		{"sb-" + id, nil},
	}
}

// TestAuthorization is the authorization rule as a table: every kind of
// reference (a sandbox by each way of writing it, a checkpoint, an image,
// a tenant's secrets and bindings) by every kind of caller. A caller
// reaches what its scope holds; everything else is not_found and answers
// exactly as if it did not exist; and nothing it tried changed anything.
func TestAuthorization(t *testing.T) {
	tw := newTwins(t)
	before := tw.with.row(t, "agent-a1-hermes-box")
	tw.sandboxRefs(t)
	tw.otherRefs(t)
	tw.unchanged(t, before)
	tw.gone(t)
}

// sandboxRefs: every way of writing t1's sandboxes, by every caller, on
// every verb: found by those who reach it, not_found alike otherwise.
func (tw *twins) sandboxRefs(t *testing.T) {
	verbs := sandboxVerbs(tw.ck)
	for _, sb := range []sandbox.Sandbox{tw.victim, tw.web} {
		short := strings.TrimPrefix(sb.Name, "agent-a1-")
		for _, r := range refs(short, sb.ID) {
			for _, pp := range principals {
				if slices.Contains(r.sees, pp.p) {
					got, err := tw.with.svc.Sandboxes.Get(bg, pp.p, r.ref)
					if err != nil || got.ID != sb.ID {
						t.Errorf("Get(%s) as %s = %+v, %v; want %s", r.ref, pp.who, got, err, sb.ID)
					}
					continue
				}
				for verb, call := range verbs {
					tw.same(t, pp.p, fmt.Sprintf("%s(%s) as %s", verb, r.ref, pp.who), func(e *env) error { return call(e, pp.p, r.ref) })
				}
			}
		}
	}
}

// otherRefs: t1's checkpoint through the caller's own sandbox, images
// that are layer keys, and t1's secrets and bindings from outside t1.
func (tw *twins) otherRefs(t *testing.T) {
	verbs := sandboxVerbs(tw.ck)
	for _, pp := range principals {
		mine := pp.p.RefOf(pp.p.Home(), pp.p.Resolve("hermes-mine"))
		for _, verb := range []string{"restore", "fork", "delete checkpoint"} {
			tw.same(t, pp.p, fmt.Sprintf("%s(%s, t1's checkpoint) as %s", verb, mine, pp.who),
				func(e *env) error { return verbs[verb](e, pp.p, mine) })
		}
		for _, image := range []string{"ck-" + tw.ck, "sb-" + tw.victim.ID, "c" + tw.ck, tw.ck, "../default"} {
			tw.same(t, pp.p, fmt.Sprintf("Create(image %s) as %s", image, pp.who), func(e *env) error {
				_, _, err := e.svc.Sandboxes.Create(bg, pp.p, sandbox.CreateRequest{Name: "hermes-from-image", Image: image})
				return err
			})
		}
		if pp.p.Tenant == "t1" || pp.p.Role == sandbox.RoleOperator {
			continue
		}
		for what, call := range map[string]func(e *env) error{
			"ListSecrets(t1)":  func(e *env) error { _, err := e.svc.Credentials.ListSecrets(bg, pp.p, "t1"); return err },
			"DeleteSecret(t1)": func(e *env) error { return e.svc.Credentials.DeleteSecret(bg, pp.p, "t1", "API_KEY") },
			"SetSecret(t1)": func(e *env) error {
				_, err := e.svc.Credentials.SetSecret(bg, pp.p, "t1", "API_KEY", []byte("x-stolen"))
				return err
			},
			"ListBindings(t1)":  func(e *env) error { _, err := e.svc.Credentials.ListBindings(bg, pp.p, "t1"); return err },
			"DeleteBinding(t1)": func(e *env) error { return e.svc.Credentials.DeleteBinding(bg, pp.p, "t1", "api") },
			"SetBinding(t1)": func(e *env) error {
				_, err := e.svc.Credentials.SetBinding(bg, pp.p, "t1", sandbox.Binding{Name: "api", Secret: "API_KEY", Upstream: "https://evil.example"})
				return err
			},
			"Exec(own, t1's secret)": func(e *env) error { _, err := verbsExecSecret(e, pp.p, mine); return err },
		} {
			tw.same(t, pp.p, what+" as "+pp.who, call)
		}
	}
}

// unchanged: nothing the calls tried changed t1's sandbox (before is its
// row before them), files, checkpoints, secret, binding, or anyone's list.
func (tw *twins) unchanged(t *testing.T, before sandbox.Sandbox) {
	e := tw.with
	if after := e.row(t, "agent-a1-hermes-box"); !reflect.DeepEqual(before, after) {
		t.Errorf("t1's sandbox changed:\n\tbefore %+v\n\tafter  %+v", before, after)
	}
	if out, _ := e.exec(t, a1, "hermes-box", "cat marker; ls"); out != marker+"\nmarker\n" {
		t.Errorf("t1's sandbox holds %q, want only its marker", out)
	}
	if cps, err := e.svc.Checkpoints.ListCheckpoints(bg, a1, "hermes-box"); err != nil || len(cps) != 1 || cps[0].ID != tw.ck {
		t.Errorf("t1's checkpoints = %+v, %v; want only %s", cps, err, tw.ck)
	}
	if list, err := e.svc.Credentials.ListSecrets(bg, admin, ""); err != nil || len(list) != 1 {
		t.Errorf("t1's secrets = %+v, %v; want API_KEY alone", list, err)
	}
	if b, err := e.svc.Credentials.ListBindings(bg, admin, ""); err != nil || len(b) != 1 || b[0].Upstream != "https://api.example.com" {
		t.Errorf("t1's bindings = %+v, %v; want api as set", b, err)
	}
	for _, pp := range principals {
		list, err := e.svc.Sandboxes.List(bg, pp.p)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range list {
			if sb.Tenant == "t1" && pp.p.Tenant != "t1" && pp.p.Role != sandbox.RoleOperator || sb.Name == "hermes-from-image" || strings.HasSuffix(sb.Name, "stolen") {
				t.Errorf("List as %s holds %s/%s", pp.who, sb.Tenant, sb.Name)
			}
		}
	}
}

// gone: once t1's web is destroyed, only its own callers learn why.
func (tw *twins) gone(t *testing.T) {
	if err := tw.with.svc.Sandboxes.Destroy(bg, a1, "web"); err != nil {
		t.Fatal(err)
	}
	for _, r := range refs("web", tw.web.ID) {
		for _, pp := range principals {
			if slices.Contains(r.sees, pp.p) {
				if _, err := tw.with.svc.Sandboxes.Get(bg, pp.p, r.ref); err == nil || !strings.Contains(err.Error(), "is gone") {
					t.Errorf("Get(%s) as %s after its destroy = %v, want why it went", r.ref, pp.who, err)
				}
				continue
			}
			tw.same(t, pp.p, fmt.Sprintf("Get(%s) as %s after its destroy", r.ref, pp.who), func(e *env) error {
				_, err := e.svc.Sandboxes.Get(bg, pp.p, r.ref)
				return err
			})
		}
	}
}

// verbsExecSecret runs a command naming the secret API_KEY in the sandbox
// ref names for p.
func verbsExecSecret(e *env, p sandbox.Principal, ref string) (sandbox.ExecResult, error) {
	return e.svc.Processes.Exec(bg, p, ref, sandbox.ExecRequest{Shell: "true", Secrets: []string{"API_KEY"}}, nil, io.Discard, io.Discard)
}

// TestMalformedReferences: a reference that is not one is
// invalid_argument, whoever writes it.
func TestMalformedReferences(t *testing.T) {
	e := newEnv(t, nil)
	for _, ref := range []string{"T1/web", "/web", "t1/", "t1/web/x", "1t/web", "t1/Web", ""} {
		for _, pp := range principals {
			_, err := e.svc.Sandboxes.Get(bg, pp.p, ref)
			wantCode(t, fmt.Sprintf("Get(%q) as %s", ref, pp.who), err, sandbox.CodeInvalidArgument)
		}
	}
}

// TestNamesPerTenant: names are unique within a tenant only. A tenant
// whose agent has another tenant's agent's name, and whose sandboxes have
// that agent's sandboxes' names, takes nothing from it and learns nothing:
// each creates, finds and destroys its own.
func TestNamesPerTenant(t *testing.T) {
	for _, first := range []sandbox.Principal{a1, twinA1} {
		t.Run("first "+first.Tenant, func(t *testing.T) {
			e := newEnv(t, nil)
			second := a1
			if first == a1 {
				second = twinA1
			}
			one := e.create(t, first, "web")
			two := e.create(t, second, "web")
			if one.Name != "agent-a1-web" || two.Name != one.Name || one.Tenant == two.Tenant || one.ID == two.ID {
				t.Fatalf("creates = %+v and %+v, want two agent-a1-web, one per tenant", one, two)
			}
			for _, c := range []struct {
				p  sandbox.Principal
				sb sandbox.Sandbox
			}{{first, one}, {second, two}} {
				if got, err := e.svc.Sandboxes.Get(bg, c.p, "web"); err != nil || got.ID != c.sb.ID {
					t.Errorf("Get(web) as %s's a1 = %+v, %v; want its own %s", c.p.Tenant, got, err, c.sb.ID)
				}
				if again, created, err := e.svc.Sandboxes.Create(bg, c.p, sandbox.CreateRequest{Name: "web"}); err != nil || created || again.ID != c.sb.ID {
					t.Errorf("Create(web) again as %s's a1 = %+v, %v, %v; want its own, resumed", c.p.Tenant, again, created, err)
				}
			}
			if err := e.svc.Sandboxes.Destroy(bg, second, "web"); err != nil {
				t.Fatal(err)
			}
			if got, err := e.svc.Sandboxes.Get(bg, first, "web"); err != nil || got.ID != one.ID {
				t.Errorf("Get(web) as %s's a1 after the other's destroy = %+v, %v; want its own kept", first.Tenant, got, err)
			}
			// The operator names each by its tenant; a bare name is the
			// system tenant's, and the not_found says where the name is.
			if got, err := e.svc.Sandboxes.Get(bg, op, sandbox.Ref(first.Tenant, "agent-a1-web")); err != nil || got.ID != one.ID {
				t.Errorf("Get(%s/agent-a1-web) as operator = %+v, %v", first.Tenant, got, err)
			}
			_, err := e.svc.Sandboxes.Get(bg, op, "agent-a1-web")
			se := wantCode(t, "Get(agent-a1-web) as operator", err, sandbox.CodeNotFound)
			if !strings.Contains(se.Message, "tenant "+first.Tenant+" has") || !slices.Equal(se.Details["tenants"].([]string), []string{first.Tenant}) {
				t.Errorf("Get(agent-a1-web) as operator = %+v, want the tenant that has it named", se)
			}
		})
	}
}

// TestAgentNamesPerTenant: an agent identity's name is unique within its
// tenant only, and a tenant admin's answers are the same whether another
// tenant has the name or not.
func TestAgentNamesPerTenant(t *testing.T) {
	withOther, alone := newEnv(t, nil), newEnv(t, nil)
	if _, err := withOther.svc.Tenancy.CreateAgent(bg, admin, sandbox.Agent{Name: "alice-prod"}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*env{withOther, alone} {
		a, err := e.svc.Tenancy.CreateAgent(bg, admin2, sandbox.Agent{Name: "alice-prod"})
		if err != nil || a.Tenant != "t2" || !a.CreatedAt.Equal(epoch) {
			t.Errorf("CreateAgent(alice-prod) as t2's admin = %+v, %v; want t2's", a, err)
		}
		_, err = e.svc.Tenancy.CreateAgent(bg, admin2, sandbox.Agent{Name: "alice-prod"})
		se := wantCode(t, "CreateAgent(alice-prod) twice", err, sandbox.CodeAlreadyExists)
		if !strings.Contains(se.Message, `"t2"`) {
			t.Errorf("CreateAgent twice = %q, want it to name t2", se.Message)
		}
		if _, _, err := e.svc.Tenancy.CreateToken(bg, admin2, sandbox.TokenRequest{Agent: "alice-prod"}); err != nil {
			t.Errorf("CreateToken(alice-prod) as t2's admin = %v", err)
		}
		list, err := e.svc.Tenancy.ListAgents(bg, admin2, "")
		if err != nil || len(list) != 1 || list[0].Tenant != "t2" {
			t.Errorf("ListAgents as t2's admin = %+v, %v; want t2's alice-prod alone", list, err)
		}
	}
	// t1's agent is t1's: no token of t2 names it.
	if _, _, err := alone.svc.Tenancy.CreateToken(bg, admin2, sandbox.TokenRequest{Tenant: "t1", Agent: "alice-prod"}); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("CreateToken(t1's alice-prod) as t2's admin = %v, want not_found", err)
	}
}
