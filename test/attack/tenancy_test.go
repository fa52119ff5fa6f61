package attack_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/mcptest"
	"github.com/hearth/hearth/testutil/testenv"
)

// The cross-tenant attacks: tenant globex, with every kind of token it can
// hold, reaching for what tenant acme holds through every door. Names are
// unique per tenant and every reference resolves in the caller's scope
// (lifecycle/access.go), so each attempt must be not_found (or
// invalid_argument for a malformed reference) and change nothing of acme's.
// The checks are on acme's side: its sandbox, files, checkpoints, secrets,
// bindings and audit log as they were, and no sandbox of globex holding
// acme's marker. Authorization is the runtime's business nowhere, so one
// runtime (the first installed: runc where present) is enough.

// world is one daemon with the two tenants.
type world struct {
	d  *daemonproc.Daemon
	op *client.Client
	// alice is acme's agent and boss its tenant admin; victim is alice's
	// sandbox web, holding marker in its home, and ck a checkpoint of it.
	alice, boss *client.Client
	victim      sandbox.Sandbox
	ck, marker  string
	// homeBefore is what victim's home listed before the attacks.
	homeBefore string
	attackers  []attacker
	// attackerTokens are the token ids of globex's tokens.
	attackerTokens []string
}

// attacker is one of globex's tokens, with the sandbox of its own it
// creates (as it writes it).
type attacker struct {
	who, token, own string
	c               *client.Client
}

// secretValue is acme's secret's value, which nothing of globex may hold.
const secretValue = "sk-acme-live-91c2f0d7"

// twoTenants starts a daemon (under the first installed runtime) with
// the tenants acme and globex, each with room for many sandboxes.
func twoTenants(t *testing.T) *world {
	t.Helper()
	b := daemonproc.Require(t)
	d := daemonproc.New(t, b.Runtimes[0])
	w := &world{d: d, op: d.Client()}
	for _, tenant := range []string{"acme", "globex"} {
		if _, err := w.op.Admin().CreateTenant(ctxT(t), sandbox.Tenant{Name: tenant,
			Allocation: sandbox.Resources{MilliCPU: 400_000, MemoryBytes: 1 << 40, DiskBytes: 1 << 42}}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := twoTenants(t)
	d, ctx := w.d, ctxT(t)
	w.marker = "acme-private-" + randomHex(8)
	w.alice = client.New(d.URL, w.token(t, "acme", "alice", sandbox.RoleAgent, ""), nil)
	w.boss = client.New(d.URL, w.token(t, "acme", "boss", sandbox.RoleTenantAdmin, ""), nil)
	// globex has a tenant admin called boss too: agent names are unique
	// within a tenant only.
	for _, a := range []attacker{
		{who: "globex agent", token: w.token(t, "globex", "bob", sandbox.RoleAgent, ""), own: "mine"},
		{who: "globex tenant admin", token: w.token(t, "globex", "boss", sandbox.RoleTenantAdmin, ""), own: "mine"},
		{who: "globex agent restricted to web", token: w.token(t, "globex", "carol", sandbox.RoleAgent, "web"), own: "web-mine"},
	} {
		a.c = client.New(d.URL, a.token, nil)
		if _, _, err := a.c.Create(ctx, sandbox.CreateRequest{Name: a.own}); err != nil {
			t.Fatalf("Create(%s) as %s = %v", a.own, a.who, err)
		}
		w.attackers = append(w.attackers, a)
	}
	var err error
	if w.victim, _, err = w.alice.Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	w.homeBefore = w.victimShell(t, "echo "+w.marker+" > marker; ls -A")
	ck, err := w.alice.Checkpoint(ctx, "web", sandbox.CheckpointRequest{Label: "with the marker"})
	if err != nil {
		t.Fatal(err)
	}
	w.ck = ck.ID
	if _, err := w.boss.Admin().SetSecret(ctx, "", "API_KEY", secretValue); err != nil {
		t.Fatal(err)
	}
	if _, err := w.boss.Admin().SetBinding(ctx, "", sandbox.Binding{Name: "api", Secret: "API_KEY", Upstream: "https://api.example.com"}); err != nil {
		t.Fatal(err)
	}
	return w
}

// token creates tenant's agent (unless it exists) and a token for it.
func (w *world) token(t *testing.T, tenant, agent string, role sandbox.Role, prefix string) string {
	t.Helper()
	ctx := ctxT(t)
	if _, err := w.op.Admin().CreateAgent(ctx, sandbox.Agent{Name: agent, Tenant: tenant}); err != nil && !sandbox.IsCode(err, sandbox.CodeAlreadyExists) {
		t.Fatalf("CreateAgent(%s in %s) = %v", agent, tenant, err)
	}
	secret, info, err := w.op.Admin().CreateToken(ctx, sandbox.TokenRequest{Tenant: tenant, Agent: agent, Role: role, NamePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if tenant == "globex" {
		w.attackerTokens = append(w.attackerTokens, info.ID)
	}
	return secret
}

// victimShell runs shell in acme's sandbox as alice and returns stdout.
func (w *world) victimShell(t *testing.T, shell string) string {
	t.Helper()
	var out bytes.Buffer
	if res, err := w.alice.Exec(ctxT(t), "web", sandbox.ExecRequest{Shell: shell}, nil, &out, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(web, %q) as alice = %+v, %v", shell, res, err)
	}
	return out.String()
}

// refs are the ways globex may write acme's sandbox: its names, its id,
// the TENANT/NAME form, and what its root's layer key looks like.
func (w *world) refs() []string {
	return []string{"web", "agent-alice-web", "acme/agent-alice-web", "acme/web", w.victim.ID, "sb-" + w.victim.ID, "system/agent-alice-web"}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// refused wants err to be not_found (or, when malformed, invalid_argument)
// and to hold neither acme's marker nor its secret.
func (w *world) refused(t *testing.T, what string, err error) {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != sandbox.CodeNotFound && se.Code != sandbox.CodeInvalidArgument {
		t.Errorf("%s = %v, want not_found", what, err)
		return
	}
	w.clean(t, what, se.Error())
}

// clean fails t when text holds acme's marker or secret.
func (w *world) clean(t *testing.T, what, text string) {
	t.Helper()
	if strings.Contains(text, w.marker) || strings.Contains(text, secretValue) {
		t.Errorf("%s answered acme's marker or secret: %q", what, text)
	}
}

// TestCrossTenantReferences: globex's agent, tenant admin and name-prefix
// token try every door on acme's sandbox, checkpoint, secret and binding.
func TestCrossTenantReferences(t *testing.T) {
	w := newWorld(t)
	for _, a := range w.attackers {
		t.Run(a.who, func(t *testing.T) {
			w.attackAPI(t, a)
			w.attackCLI(t, a)
			w.attackSprites(t, a)
			w.attackMCP(t, a)
		})
	}
	w.checkUntouched(t)
}

// attackAPI attacks through the Go client of the native API.
func (w *world) attackAPI(t *testing.T, a attacker) {
	ctx := ctxT(t)
	var sink bytes.Buffer
	verbs := map[string]func(ref string) error{
		"Get":     func(ref string) error { _, err := a.c.Get(ctx, ref); return err },
		"Destroy": func(ref string) error { return a.c.Destroy(ctx, ref) },
		"Exec": func(ref string) error {
			_, err := a.c.Exec(ctx, ref, sandbox.ExecRequest{Shell: "cat marker; rm -f marker"}, nil, &sink, &sink)
			return err
		},
		"ReadFile": func(ref string) error { return a.c.ReadFile(ctx, ref, "marker", &sink) },
		"WriteFile": func(ref string) error {
			_, err := a.c.WriteFile(ctx, ref, sandbox.WriteRequest{Path: "marker"}, strings.NewReader("overwritten"))
			return err
		},
		"ListDir":    func(ref string) error { _, err := a.c.ListDir(ctx, ref, "."); return err },
		"Checkpoint": func(ref string) error { _, err := a.c.Checkpoint(ctx, ref, sandbox.CheckpointRequest{}); return err },
		"ListCheckpoints": func(ref string) error {
			_, err := a.c.ListCheckpoints(ctx, ref)
			return err
		},
		"Restore":          func(ref string) error { _, err := a.c.Restore(ctx, ref, w.ck); return err },
		"Fork":             func(ref string) error { _, err := a.c.Fork(ctx, ref, w.ck, "stolen"); return err },
		"DeleteCheckpoint": func(ref string) error { return a.c.DeleteCheckpoint(ctx, ref, w.ck) },
		"Sleep":            func(ref string) error { _, err := a.c.Sleep(ctx, ref); return err },
		"Ports":            func(ref string) error { _, err := a.c.Ports(ctx, ref, 8080); return err },
		"Update public port": func(ref string) error {
			_, err := a.c.Update(ctx, ref, sandbox.SandboxUpdate{PublicPorts: &[]int{8080}})
			return err
		},
	}
	for _, ref := range w.refs() {
		for name, verb := range verbs {
			w.refused(t, fmt.Sprintf("%s(%s)", name, ref), verb(ref))
		}
	}
	// acme's checkpoint through globex's own sandbox, and as an image.
	for _, name := range []string{"Restore", "Fork", "DeleteCheckpoint"} {
		w.refused(t, name+"(own sandbox, acme's checkpoint)", verbs[name](a.own))
	}
	for _, image := range []string{"ck-" + w.ck, "sb-" + w.victim.ID, w.ck} {
		_, _, err := a.c.Create(ctx, sandbox.CreateRequest{Name: "web-from-image", Image: image})
		w.refused(t, "Create(image "+image+")", err)
	}
	w.attackSecrets(t, a)
	w.clean(t, "the streams of the API calls", sink.String())
	// acme's URL, with globex's token.
	resp, body := testenv.Do(t, "GET", w.d.URL+"/v1/sandboxes/acme%2Fagent-alice-web/proxy/8080/", a.token, "")
	if resp.StatusCode != 404 {
		t.Errorf("acme's URL with %s's token = %d %s, want 404", a.who, resp.StatusCode, body)
	}
}

// attackSecrets reaches for acme's secret and binding.
func (w *world) attackSecrets(t *testing.T, a attacker) {
	ctx := ctxT(t)
	for what, err := range map[string]error{
		"ListSecrets(acme)": func() error { _, err := a.c.Admin().ListSecrets(ctx, "acme"); return err }(),
		"SetSecret(acme)": func() error {
			_, err := a.c.Admin().SetSecret(ctx, "acme", "API_KEY", "replaced-by-globex")
			return err
		}(),
		"DeleteSecret(acme)":  a.c.Admin().DeleteSecret(ctx, "acme", "API_KEY"),
		"ListBindings(acme)":  func() error { _, err := a.c.Admin().ListBindings(ctx, "acme"); return err }(),
		"DeleteBinding(acme)": a.c.Admin().DeleteBinding(ctx, "acme", "api"),
		"SetBinding(acme)": func() error {
			_, err := a.c.Admin().SetBinding(ctx, "acme", sandbox.Binding{Name: "api", Secret: "API_KEY", Upstream: "https://evil.example"})
			return err
		}(),
	} {
		w.refused(t, what, err)
	}
	// acme's secret named in globex's own sandbox: globex has none.
	var out bytes.Buffer
	_, err := a.c.Exec(ctx, a.own, sandbox.ExecRequest{Shell: "echo $API_KEY", Secrets: []string{"API_KEY"}}, nil, &out, &out)
	w.refused(t, "Exec(own sandbox, secret API_KEY)", err)
	w.clean(t, "Exec(own sandbox, secret API_KEY)", out.String())
}

// attackCLI attacks through the hearth CLI.
func (w *world) attackCLI(t *testing.T, a attacker) {
	notFound := sandbox.CodeNotFound.ExitCode()
	var calls [][]string
	for _, ref := range w.refs() {
		calls = append(calls,
			[]string{"get", ref}, []string{"exec", ref, "--", "cat", "marker"}, []string{"fs", "read", ref, "marker"},
			[]string{"destroy", ref}, []string{"checkpoint", ref}, []string{"restore", ref, w.ck})
	}
	calls = append(calls,
		[]string{"restore", a.own, w.ck}, []string{"fork", a.own, w.ck, "web-stolen"},
		[]string{"create", "web-from-ck", "--image", "ck-" + w.ck}, []string{"secret", "list", "--tenant", "acme"},
		[]string{"exec", a.own, "--secret", "API_KEY", "--", "sh", "-c", "echo $API_KEY"})
	for _, args := range calls {
		stdout, stderr, code := w.d.CLIAs(a.token, "", args...)
		if code != notFound {
			t.Errorf("hearth %s = %d %q %q, want exit %d (not_found)", strings.Join(args, " "), code, stdout, stderr, notFound)
		}
		w.clean(t, "hearth "+strings.Join(args, " "), stdout+stderr)
	}
}

// attackSprites attacks through the Sprites API.
func (w *world) attackSprites(t *testing.T, a attacker) {
	type call struct{ method, path, body string }
	var calls []call
	for _, ref := range w.refs() {
		p := "/v1/sprites/" + url.PathEscape(ref)
		calls = append(calls,
			call{"GET", p, ""}, call{"DELETE", p, ""}, call{"PUT", p, `{"url_settings":{"auth":"public"}}`},
			call{"POST", p + "/exec?cmd=cat&cmd=marker", ""}, call{"GET", p + "/fs/read?path=/home/sandbox/marker", ""},
			call{"PUT", p + "/fs/write?path=/home/sandbox/marker", "overwritten"}, call{"POST", p + "/checkpoint", ""},
			call{"GET", p + "/checkpoints", ""}, call{"POST", p + "/checkpoints/" + w.ck + "/restore", ""},
			call{"POST", p + "/policy/network", `{"rules":[{"domain":"*"}]}`})
	}
	calls = append(calls, call{"POST", "/v1/sprites/" + a.own + "/checkpoints/" + w.ck + "/restore", ""},
		call{"GET", "/v1/sprites/" + a.own + "/checkpoints/" + w.ck, ""})
	for _, c := range calls {
		resp, body := testenv.Do(t, c.method, w.d.URL+c.path, a.token, c.body)
		var e struct{ Code sandbox.Code }
		if resp.StatusCode != 404 || json.Unmarshal(body, &e) != nil || e.Code != sandbox.CodeNotFound {
			t.Errorf("%s %s = %d %s, want 404 not_found", c.method, c.path, resp.StatusCode, body)
		}
		w.clean(t, c.method+" "+c.path, string(body))
	}
	var list struct {
		Sprites []struct{ ID, Name, Organization string }
	}
	resp, body := testenv.Do(t, "GET", w.d.URL+"/v1/sprites", a.token, "")
	if resp.StatusCode != 200 || json.Unmarshal(body, &list) != nil || len(list.Sprites) == 0 {
		t.Fatalf("GET /v1/sprites = %d %s", resp.StatusCode, body)
	}
	for _, s := range list.Sprites {
		if s.Organization != "globex" || s.ID == w.victim.ID {
			t.Errorf("GET /v1/sprites as %s lists %+v", a.who, s)
		}
	}
}

// mcpCall is one tools/call.
type mcpCall struct {
	tool string
	args map[string]any
}

// attackMCP attacks through /mcp with the official Go SDK's client.
func (w *world) attackMCP(t *testing.T, a attacker) {
	cs := mcptest.Connect(t, ctxT(t), w.d.URL+"/mcp", a.token, nil)
	calls := []mcpCall{
		{"sandbox_create", map[string]any{"name": "web-from-ck", "image": "ck-" + w.ck}},
		{"sandbox_create", map[string]any{"name": "web-from-root", "image": "sb-" + w.victim.ID}},
		{"sandbox_restore", map[string]any{"sandbox": a.own, "checkpoint": w.ck}},
		{"sandbox_exec", map[string]any{"sandbox": a.own, "command": "echo $API_KEY", "secrets": []string{"API_KEY"}}},
	}
	for _, ref := range w.refs() {
		calls = append(calls,
			mcpCall{"sandbox_exec", map[string]any{"sandbox": ref, "command": "cat marker"}},
			mcpCall{"sandbox_checkpoint", map[string]any{"sandbox": ref}},
			mcpCall{"sandbox_restore", map[string]any{"sandbox": ref, "checkpoint": w.ck}},
			mcpCall{"sandbox_destroy", map[string]any{"sandbox": ref}})
	}
	for _, c := range calls {
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s(%v): %v", c.tool, c.args, err)
		}
		var e struct{ Code sandbox.Code }
		if !res.IsError || mcptest.Decode(res, &e) != nil || e.Code != sandbox.CodeNotFound {
			t.Errorf("MCP %s(%v) = %+v, want a not_found result", c.tool, c.args, res.StructuredContent)
		}
		b, _ := json.Marshal(res)
		w.clean(t, "MCP "+c.tool, string(b))
	}
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "sandbox_list"})
	var ls struct{ Sandboxes []struct{ Name string } }
	if err != nil || res.IsError || mcptest.Decode(res, &ls) != nil || len(ls.Sandboxes) == 0 {
		t.Fatalf("MCP sandbox_list = %+v, %v", res, err)
	}
	for _, sb := range ls.Sandboxes {
		if strings.Contains(sb.Name, "alice") || strings.Contains(sb.Name, "/") {
			t.Errorf("MCP sandbox_list as %s lists %s", a.who, sb.Name)
		}
	}
}

// checkUntouched checks acme's side after the attacks: its sandbox, its
// files, its checkpoints, its secret and binding as they were; no sandbox
// of globex holding acme's marker nor made from acme's; and acme's audit
// log showing nothing done by globex.
func (w *world) checkUntouched(t *testing.T) {
	ctx := ctxT(t)
	sb, err := w.alice.Get(ctx, "web")
	if err != nil || sb.ID != w.victim.ID || sb.Status != sandbox.StatusRunning || len(sb.PublicPorts) != 0 || sb.Head != w.ck ||
		len(sb.Egress.Allow)+len(sb.Egress.Deny) != 0 {
		t.Errorf("acme's sandbox after the attacks = %+v, %v", sb, err)
	}
	if got := w.victimShell(t, "cat marker; ls -A"); got != w.marker+"\n"+w.homeBefore {
		t.Errorf("acme's home after the attacks = %q, want %q", got, w.marker+"\n"+w.homeBefore)
	}
	if cps, err := w.alice.ListCheckpoints(ctx, "web"); err != nil || len(cps) != 1 || cps[0].ID != w.ck {
		t.Errorf("acme's checkpoints after the attacks = %+v, %v; want %s alone", cps, err, w.ck)
	}
	if s, err := w.boss.Admin().ListSecrets(ctx, ""); err != nil || len(s) != 1 || !s[0].UpdatedAt.Equal(s[0].CreatedAt) {
		t.Errorf("acme's secrets after the attacks = %+v, %v; want API_KEY as set", s, err)
	}
	if b, err := w.boss.Admin().ListBindings(ctx, ""); err != nil || len(b) != 1 || b[0].Upstream != "https://api.example.com" {
		t.Errorf("acme's bindings after the attacks = %+v, %v; want api as set", b, err)
	}
	all, err := w.op.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range all {
		if sb.Tenant == "acme" && sb.ID != w.victim.ID || sb.Tenant == "globex" && !slices.Contains([]string{"agent-bob-mine", "agent-boss-mine", "agent-carol-web-mine"}, sb.Name) {
			t.Errorf("after the attacks %s has a sandbox %s it did not make for itself", sb.Tenant, sb.Name)
		}
		if sb.Tenant != "globex" {
			continue
		}
		var out bytes.Buffer
		w.op.Exec(ctx, sandbox.Ref(sb.Tenant, sb.Name), sandbox.ExecRequest{Shell: "grep -rl " + w.marker + " /home /tmp /root /var/tmp 2>/dev/null; true"}, nil, &out, io.Discard)
		if out.Len() > 0 {
			t.Errorf("globex's %s holds acme's marker in %s", sb.Name, out.String())
		}
	}
	events, err := w.boss.Admin().Audit(ctx, sandbox.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if slices.Contains(w.attackerTokens, e.TokenID) || e.Tenant != "acme" {
			t.Errorf("acme's audit log shows a call of globex: %+v", e)
		}
	}
}
