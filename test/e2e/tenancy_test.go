package e2e_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// tenantsJSON is the --tenants file of TestTenancy: "acme" with room for
// the default quota (5 per agent) to bind, "tiny" whose budget (25% of 8
// CPUs) holds two small sandboxes.
const tenantsJSON = `{
  "tenants": [
    {"name": "acme", "allocation": {"millicpu": 400000, "memory_bytes": 1099511627776, "disk_bytes": 4398046511104}},
    {"name": "tiny", "allocation": {"millicpu": 8000, "memory_bytes": 1099511627776, "disk_bytes": 4398046511104}}
  ],
  "agents": [
    {"name": "claude-1", "tenant": "acme"}, {"name": "claude-2", "tenant": "acme"},
    {"name": "tiny-1", "tenant": "tiny"}, {"name": "tiny-2", "tenant": "tiny"}, {"name": "tiny-3", "tenant": "tiny"}
  ]
}`

// TestTenancy drives the guardrails through a real daemon: tenants and
// agents from the --tenants file, tokens from the CLI, the quota and the
// budget with their exact words, the breaker and its webhook, scoping
// across tenants, attribution and revocation.
func TestTenancy(t *testing.T) {
	requireDaemon(t)
	var (
		mu     sync.Mutex
		alarms []sandbox.Alarm
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a sandbox.Alarm
		if err := json.NewDecoder(r.Body).Decode(&a); err == nil {
			mu.Lock()
			alarms = append(alarms, a)
			mu.Unlock()
		}
	}))
	defer hook.Close()
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(tenantsJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, bins.Runtimes[0], "--tenants", file, "--alarm-webhook", hook.URL)
	ctx := ctxT(t)

	token := func(tenant, agent string) string {
		t.Helper()
		out, errOut, code := d.CLI("", "token", "create", "--tenant", tenant, "--agent", agent)
		if code != 0 || !strings.HasPrefix(out, "hearth_") || !strings.Contains(errOut, "shown once") {
			t.Fatalf("token create %s/%s = %d %q %q", tenant, agent, code, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	as := func(tok string) *client.Client { return client.New(d.URL, tok, nil) }
	c1tok := token("acme", "claude-1")
	c1, c2, t1, t2, t3 := as(c1tok), as(token("acme", "claude-2")), as(token("tiny", "tiny-1")), as(token("tiny", "tiny-2")), as(token("tiny", "tiny-3"))
	c2tok := token("acme", "claude-2")

	// Names carry their creator; the creator may leave the prefix out.
	for i := range 5 {
		sb, _, err := c1.Create(ctx, sandbox.CreateRequest{Name: fmt.Sprintf("box-%d", i)})
		if err != nil || sb.Name != fmt.Sprintf("agent-claude-1-box-%d", i) || sb.Tenant != "acme" || sb.Owner != "claude-1" {
			t.Fatalf("Create(box-%d) as claude-1 = %+v, %v", i, sb, err)
		}
	}
	var out strings.Builder
	if res, err := c1.Exec(ctx, "box-0", sandbox.ExecRequest{Shell: "echo hi > f; cat f"}, nil, &out, nil); err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("Exec(box-0) as claude-1 = %+v, %v, %q", res, err, out.String())
	}

	// A destructive command gets a checkpoint first, which undoes it.
	stdout, stderr, code := d.CLIAs(c1tok, "", "exec", "box-0", "--", "sh", "-c", "rm -rf f && echo removed")
	if code != 0 || stdout != "removed\n" || !strings.Contains(stderr, "was taken before this destructive command; `hearth restore box-0 c") {
		t.Fatalf("hearth exec box-0 -- rm -rf f = %d %q %q; want it run after a checkpoint", code, stdout, stderr)
	}
	ck := strings.Fields(stderr)[2]
	if _, err := c1.Restore(ctx, "box-0", ck); err != nil {
		t.Fatalf("Restore(%s) = %v", ck, err)
	}
	out.Reset()
	if _, err := c1.Exec(ctx, "box-0", sandbox.ExecRequest{Argv: []string{"cat", "f"}}, nil, &out, nil); err != nil || out.String() != "hi\n" {
		t.Fatalf("f after restoring the automatic checkpoint = %q, %v", out.String(), err)
	}

	// The sixth create: exact words through the CLI, the same code and
	// numbers through the API.
	stdout, stderr, code = d.CLIAs(c1tok, "", "create", "box-5")
	if want := "error: quota exceeded: 5 of 5 sandboxes in use for agent-claude-1\nhint: destroy one or wait\n"; code != sandbox.CodeQuotaExceeded.ExitCode() || stderr != want || stdout != "" {
		t.Errorf("hearth create box-5 as claude-1 = %d, %q, %q; want %d and %q", code, stdout, stderr, sandbox.CodeQuotaExceeded.ExitCode(), want)
	}
	_, _, err := c1.Create(ctx, sandbox.CreateRequest{Name: "box-5"})
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != sandbox.CodeQuotaExceeded || se.Details["limit"] != 5.0 || se.Details["used"] != 5.0 {
		t.Errorf("Create(box-5) through the API = %v (%+v)", err, se)
	}
	if _, _, err := c2.Create(ctx, sandbox.CreateRequest{Name: "box-0"}); err != nil {
		t.Errorf("Create as claude-2 while claude-1 is at its quota = %v", err)
	}
	stdout, _, code = d.CLIAs(c1tok, "", "limits")
	if code != 0 || !strings.Contains(stdout, "sandboxes:     5 of 5") || !strings.Contains(stdout, "budget:") ||
		!strings.Contains(stdout, "network:       none by default, egress allowed") {
		t.Errorf("hearth limits as claude-1 = %d %q", code, stdout)
	}

	// A token restricted to a name prefix reaches only names inside it.
	out2, errOut, code := d.CLI("", "token", "create", "--tenant", "acme", "--agent", "claude-2", "--name-prefix", "hermes-")
	if code != 0 || !strings.Contains(errOut, "shown once") {
		t.Fatalf("token create --name-prefix = %d %q %q", code, out2, errOut)
	}
	hermes := strings.TrimSpace(out2)
	stdout, stderr, code = d.CLIAs(hermes, "", "create", "box-9")
	if want := "error: this token is restricted to sandbox names starting with \"hermes-\"; \"box-9\" is outside it\nhint: use a name starting with \"hermes-\", or a token without that restriction\n"; code != sandbox.CodePermissionDenied.ExitCode() || stderr != want {
		t.Errorf("hearth create box-9 with a hermes- token = %d %q %q; want %d and %q", code, stdout, stderr, sandbox.CodePermissionDenied.ExitCode(), want)
	}
	if stdout, stderr, code = d.CLIAs(hermes, "", "create", "hermes-1"); code != 0 {
		t.Errorf("hearth create hermes-1 with a hermes- token = %d %q %q", code, stdout, stderr)
	}
	if stdout, _, code = d.CLIAs(hermes, "", "list"); code != 0 || !strings.Contains(stdout, "agent-claude-2-hermes-1") || strings.Contains(stdout, "box-0") {
		t.Errorf("hearth list with a hermes- token = %d %q; want hermes-1 only", code, stdout)
	}
	if stdout, _, code = d.CLI("", "token", "list"); code != 0 || !strings.Contains(stdout, "hermes-*") {
		t.Errorf("hearth token list = %d %q; want the restriction shown", code, stdout)
	}

	// The tenant's budget binds whoever creates.
	for i, c := range []*client.Client{t1, t2} {
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "job"}); err != nil {
			t.Fatalf("Create as tiny-%d = %v", i+1, err)
		}
	}
	_, _, err = t3.Create(ctx, sandbox.CreateRequest{Name: "job"})
	if !errors.As(err, &se) || se.Code != sandbox.CodeBudgetExceeded ||
		se.Error() != "budget exceeded: tenant tiny's sandboxes would use 3 of 2 CPUs; destroy a sandbox, choose a smaller size, or ask an operator to raise the tenant's allocation" {
		t.Errorf("Create as tiny-3 over the budget = %v", err)
	}

	// One tenant cannot see, exec in, read files of or destroy another's.
	for what, err := range map[string]error{
		"get": func() error { _, err := c1.Get(ctx, "agent-tiny-1-job"); return err }(),
		"exec": func() error {
			_, err := c1.Exec(ctx, "agent-tiny-1-job", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
			return err
		}(),
		"read":    c1.ReadFile(ctx, "agent-tiny-1-job", "/etc/hostname", &out),
		"destroy": c1.Destroy(ctx, "agent-tiny-1-job"),
	} {
		if !errors.As(err, &se) || se.Code != sandbox.CodeNotFound {
			t.Errorf("%s of tiny's sandbox as claude-1 = %v, want not_found", what, err)
		}
	}
	if list, err := t1.List(ctx); err != nil || len(list) != 1 || list[0].Name != "agent-tiny-1-job" {
		t.Errorf("List as tiny-1 = %+v, %v; want its one sandbox", list, err)
	}

	// A runaway loop: every attempt counts, refused or not (claude-1 has
	// made 7 so far: 5 creates and 2 refused); the 31st in a minute opens
	// the breaker, and the webhook hears of it.
	attempts := 7
	for se = nil; attempts < 40 && (se == nil || se.Code != sandbox.CodeCircuitOpen); {
		attempts++
		_, _, err := c1.Create(ctx, sandbox.CreateRequest{Name: fmt.Sprintf("box-%d", attempts)})
		if !errors.As(err, &se) || attempts < 31 && se.Code != sandbox.CodeQuotaExceeded {
			t.Fatalf("create attempt %d = %v, want quota_exceeded", attempts, err)
		}
	}
	if attempts != 31 || se.Code != sandbox.CodeCircuitOpen || se.Details["retry_after_seconds"] != 300.0 {
		t.Errorf("attempt %d = %v (%+v), want the 31st to be circuit_open with retry_after_seconds 300", attempts, se, se.Details)
	}
	heard := func() bool {
		mu.Lock()
		defer mu.Unlock()
		kinds := map[string]bool{}
		for _, a := range alarms {
			if a.Agent == "claude-1" && a.Tenant == "acme" {
				kinds[a.Kind] = true
			}
		}
		return kinds["create_rate"] && kinds["circuit_open"]
	}
	for deadline := time.Now().Add(10 * time.Second); !heard(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook heard %+v; want create_rate and circuit_open for claude-1", alarms)
		}
	}

	// The alarms are in the audit log too, at the identity.
	if audit, _, code := d.CLI("", "audit", "--agent", "claude-1", "--json"); code != 0 ||
		!strings.Contains(audit, `"verb":"alarm.create_rate"`) || !strings.Contains(audit, `"verb":"alarm.circuit_open"`) {
		t.Errorf("hearth audit --agent claude-1 = %d %q; want both alarms", code, audit)
	}

	// A revoked token is refused at once.
	tokens, err := d.Client().Admin().ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tokens {
		if tk.Agent == "claude-2" {
			if err := d.Client().Admin().RevokeToken(ctx, tk.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := as(c2tok).List(ctx); !errors.As(err, &se) || se.Code != sandbox.CodeUnauthenticated {
		t.Errorf("List with a revoked token = %v, want unauthenticated", err)
	}
}

// TestReaped: the platform destroys a sandbox at the end of its TTL,
// unasked, leaves nothing of it, and get of its name then says why.
func TestReaped(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0], "--idle-timeout", "4s") // sweeps every second
	ctx := ctxT(t)
	c := d.Client()
	sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "brief", TTL: sandbox.Duration(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var se *sandbox.Error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := c.Get(ctx, "brief")
		if errors.As(err, &se) && se.Code == sandbox.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get(brief) 30s after a 2s TTL = %v, want not_found", err)
		}
	}
	if want := `sandbox "brief" is gone: reaped: its ttl ended at ` + sb.ExpiresAt.UTC().Format(time.RFC3339); !strings.HasPrefix(se.Message, want) {
		t.Errorf("Get(brief) after the reap = %q, want it to start %q", se.Message, want)
	}
	assertNothingLeft(t, d, sb.ID)
}

// agentToken makes tenant (room for many sandboxes, an agent quota of
// quota) unless it exists, an agent identity in it, and a token for it.
func (d *daemon) agentToken(t *testing.T, tenant, agent string, quota int) string {
	t.Helper()
	ctx, op := ctxT(t), d.Client()
	_, err := op.Admin().CreateTenant(ctx, sandbox.Tenant{Name: tenant, Policy: sandbox.PolicyOverrides{AgentQuota: &quota},
		Allocation: sandbox.Resources{MilliCPU: 400_000, MemoryBytes: 1 << 40, DiskBytes: 1 << 42}})
	if err != nil && !sandbox.IsCode(err, sandbox.CodeAlreadyExists) {
		t.Fatal(err)
	}
	if _, err := op.Admin().CreateAgent(ctx, sandbox.Agent{Name: agent, Tenant: tenant}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := op.Admin().CreateToken(ctx, sandbox.TokenRequest{Tenant: tenant, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
