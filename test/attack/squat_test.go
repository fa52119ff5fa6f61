package attack_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/mcptest"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestNameSquatting: names are unique per tenant, so globex cannot take
// the names acme's agents would use, nor learn which ones acme has.
// globex's admin makes an agent called alice-prod (whose sandboxes are
// named agent-alice-prod-…, as acme's alice's "prod-…" are) and an agent
// called alice, acme's own agent's name; both create sandboxes first;
// acme's creates of the same names still succeed, each tenant keeps its
// own, and every answer globex gets about a name is the same whether acme
// has it or not. Operators name each sandbox by its tenant.
func TestNameSquatting(t *testing.T) {
	w := twoTenants(t)
	d, ctx := w.d, ctxT(t)
	alice := client.New(d.URL, w.token(t, "acme", "alice", sandbox.RoleAgent, ""), nil)
	gAdminTok := w.token(t, "globex", "gadmin", sandbox.RoleTenantAdmin, "")
	gAdmin := client.New(d.URL, gAdminTok, nil)

	// globex takes the agent names: alice-prod (its admin, through the
	// API), and alice, which acme has (the operator, through the CLI, as
	// the report found refused); twice in one tenant is still refused.
	if _, err := gAdmin.Admin().CreateAgent(ctx, sandbox.Agent{Name: "alice-prod"}); err != nil {
		t.Fatalf("CreateAgent(alice-prod) as globex's admin = %v", err)
	}
	if out, stderr, code := d.CLI("", "agent", "create", "alice", "--tenant", "globex"); code != 0 {
		t.Fatalf("hearth agent create alice --tenant globex = %d %q %q", code, out, stderr)
	}
	if out, stderr, code := d.CLIAs(gAdminTok, "", "agent", "create", "alice"); code != sandbox.CodeAlreadyExists.ExitCode() || !strings.Contains(stderr, `"globex"`) {
		t.Errorf("hearth agent create alice again, as globex's admin = %d %q %q; want already_exists in globex", code, out, stderr)
	}
	tokFor := func(agent string) string {
		t.Helper()
		tok, _, err := gAdmin.Admin().CreateToken(ctx, sandbox.TokenRequest{Agent: agent})
		if err != nil {
			t.Fatalf("CreateToken(%s) as globex's admin = %v", agent, err)
		}
		return tok
	}
	prodTok, twinTok := tokFor("alice-prod"), tokFor("alice")
	prod, twin := client.New(d.URL, prodTok, nil), client.New(d.URL, twinTok, nil)

	// globex creates first; acme's creates of the same names succeed.
	squats := map[*client.Client]string{prod: "db", twin: "web"}
	for c, name := range squats {
		if _, created, err := c.Create(ctx, sandbox.CreateRequest{Name: name}); err != nil || !created {
			t.Fatalf("globex's Create(%s) = %v, %v", name, created, err)
		}
	}
	mine := map[string]sandbox.Sandbox{}
	for _, name := range []string{"prod-db", "web"} {
		sb, created, err := alice.Create(ctx, sandbox.CreateRequest{Name: name})
		if err != nil || !created || sb.Tenant != "acme" {
			t.Fatalf("acme's Create(%s) after globex's = %+v, %v, %v; want a new sandbox of acme", name, sb, created, err)
		}
		mine[sb.Name] = sb
	}
	for _, name := range []string{"agent-alice-prod-db", "agent-alice-web"} {
		sb, err := alice.Get(ctx, name)
		if err != nil || sb.ID != mine[name].ID {
			t.Errorf("acme's Get(%s) = %+v, %v; want its own", name, sb, err)
		}
	}
	if sb, err := twin.Get(ctx, "web"); err != nil || sb.Tenant != "globex" || sb.ID == mine["agent-alice-web"].ID {
		t.Errorf("globex's alice's Get(web) = %+v, %v; want its own", sb, err)
	}
	sameAnswers(t, d, twinTok, mine)
	operatorNames(t, d, mine["agent-alice-web"])
}

// sameAnswers: what globex's twin alice is told about acme's names, through
// the API, the Sprites API and MCP, is the same as about a name nobody
// has, but for the name.
func sameAnswers(t *testing.T, d *daemonproc.Daemon, token string, acme map[string]sandbox.Sandbox) {
	t.Helper()
	const nobody = "agent-alice-nobody"
	for name := range acme {
		for _, ref := range []string{"acme/" + name, "acme/" + strings.TrimPrefix(name, "agent-alice-")} {
			absent := "acme/" + nobody
			for _, prefix := range []string{"/v1/sandboxes/", "/v1/sprites/"} {
				got := answer(t, d, token, prefix+url.PathEscape(ref))
				want := answer(t, d, token, prefix+url.PathEscape(absent))
				if got.status != 404 || got.status != want.status || strings.ReplaceAll(got.body, ref, absent) != want.body {
					t.Errorf("GET %s%s as globex = %d %s\nwhere a name nobody has = %d %s", prefix, ref, got.status, got.body, want.status, want.body)
				}
			}
		}
	}
	cs := mcptest.Connect(t, ctxT(t), d.URL+"/mcp", token, nil)
	text := func(ref string) string {
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"sandbox": ref, "command": "true"}})
		if err != nil || !res.IsError {
			t.Fatalf("MCP sandbox_exec(%s) = %+v, %v; want an error", ref, res, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		return string(b)
	}
	for name := range acme {
		if got, want := text("acme/"+name), text("acme/"+nobody); strings.ReplaceAll(got, name, nobody) != want {
			t.Errorf("MCP sandbox_exec(acme/%s) as globex = %s\nwhere a name nobody has = %s", name, got, want)
		}
	}
}

// response is an answer's status and body.
type response struct {
	status int
	body   string
}

func answer(t *testing.T, d *daemonproc.Daemon, token, path string) response {
	t.Helper()
	resp, body := testenv.Do(t, "GET", d.URL+path, token, "")
	return response{resp.StatusCode, string(body)}
}

// operatorNames: an operator names a tenant's sandbox as TENANT/NAME in
// the CLI; a bare name is the system tenant's, and when other tenants have
// it the error names them rather than pick one.
func operatorNames(t *testing.T, d *daemonproc.Daemon, acmeWeb sandbox.Sandbox) {
	t.Helper()
	stdout, stderr, code := d.CLI("", "get", "agent-alice-web")
	if code != sandbox.CodeNotFound.ExitCode() || !strings.Contains(stderr, "tenants acme, globex have") || !strings.Contains(stderr, "TENANT/NAME") {
		t.Errorf("hearth get agent-alice-web as operator = %d %q %q; want not_found naming acme and globex", code, stdout, stderr)
	}
	stdout, stderr, code = d.CLI("", "get", "acme/agent-alice-web", "--json")
	var sb sandbox.Sandbox
	if code != 0 || json.Unmarshal([]byte(stdout), &sb) != nil || sb.ID != acmeWeb.ID {
		t.Errorf("hearth get acme/agent-alice-web as operator = %d %q %q; want acme's", code, stdout, stderr)
	}
	if stdout, stderr, code = d.CLI("", "destroy", "globex/agent-alice-web"); code != 0 {
		t.Errorf("hearth destroy globex/agent-alice-web as operator = %d %q %q", code, stdout, stderr)
	}
	if stdout, stderr, code = d.CLI("", "exec", "acme/agent-alice-web", "--", "true"); code != 0 {
		t.Errorf("hearth exec acme/agent-alice-web after globex's went = %d %q %q; want acme's kept", code, stdout, stderr)
	}
}
