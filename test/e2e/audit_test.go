package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestAudit drives a real daemon with the CLI and the Go client: `hearth
// audit --json` exports the CLI's own calls with door "cli" (and the
// client's with "api"), an agent reads only its own calls, no event holds
// a token, and GET /metrics counts the running sandbox.
func TestAudit(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)

	cli := func(token string, args ...string) string {
		t.Helper()
		out, errOut, code := d.CLIAs(token, "", args...)
		if code != 0 {
			t.Fatalf("hearth %s = %d %q %q", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	cli(d.Token, "create", "audited")
	cli(d.Token, "exec", "audited", "--", "true")
	if _, _, code := d.CLI("", "get", "nosuch"); code != sandbox.CodeNotFound.ExitCode() {
		t.Fatalf("hearth get nosuch = %d, want %d", code, sandbox.CodeNotFound.ExitCode())
	}
	if _, err := d.Client().List(ctx); err != nil {
		t.Fatalf("List through the Go client = %v", err)
	}
	cli(d.Token, "tenant", "create", "acme", "--cpu", "64", "--memory", "256GiB", "--disk", "2TiB")
	cli(d.Token, "agent", "create", "claude-1", "--tenant", "acme")
	agentTok := strings.TrimSpace(cli(d.Token, "token", "create", "--tenant", "acme", "--agent", "claude-1"))
	cli(agentTok, "list")

	// audit reads the events as JSONL, one object per line.
	audit := func(token string, args ...string) []sandbox.AuditEvent {
		t.Helper()
		out := cli(token, append([]string{"audit", "--json"}, args...)...)
		if strings.Contains(out, d.Token) || strings.Contains(out, agentTok) || strings.Contains(out, "hearth_") {
			t.Errorf("hearth audit --json shows a token:\n%s", out)
		}
		var events []sandbox.AuditEvent
		for line := range strings.Lines(out) {
			var e sandbox.AuditEvent
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("hearth audit --json line %q: %v", line, err)
			}
			events = append(events, e)
		}
		return events
	}
	find := func(events []sandbox.AuditEvent, verb, name string) (sandbox.AuditEvent, bool) {
		i := slices.IndexFunc(events, func(e sandbox.AuditEvent) bool { return e.Verb == verb && e.Sandbox == name })
		if i < 0 {
			return sandbox.AuditEvent{}, false
		}
		return events[i], true
	}

	// The exec is recorded once its WebSocket has closed, just after the
	// CLI has its result.
	var events []sandbox.AuditEvent
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		events = audit(d.Token)
		if _, ok := find(events, "sandbox.exec", "audited"); ok || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []sandbox.AuditEvent{
		{Door: "cli", Verb: "sandbox.create", Sandbox: "audited", Status: 201},
		{Door: "cli", Verb: "sandbox.exec", Sandbox: "audited", Status: 101},
		{Door: "cli", Verb: "sandbox.get", Sandbox: "nosuch", Status: 404, Code: sandbox.CodeNotFound},
		{Door: "api", Verb: "sandbox.list", Status: 200},
		{Door: "cli", Verb: "token.create", Status: 201},
	} {
		got, ok := find(events, want.Verb, want.Sandbox)
		if !ok {
			t.Errorf("hearth audit has no %s of %q:\n%+v", want.Verb, want.Sandbox, events)
			continue
		}
		if got.Door != want.Door || got.Status != want.Status || got.Code != want.Code ||
			got.Role != sandbox.RoleOperator || got.TokenID == "" || got.At.IsZero() || got.ID == 0 {
			t.Errorf("%s event = %+v; want door %s, status %d, code %q, by the operator's token", want.Verb, got, want.Door, want.Status, want.Code)
		}
	}

	// An agent reads its own calls and nobody else's.
	mine := audit(agentTok)
	if len(mine) == 0 {
		t.Errorf("hearth audit as claude-1 shows nothing; want its own list")
	}
	for _, e := range mine {
		if e.Tenant != "acme" || e.Agent != "claude-1" {
			t.Errorf("hearth audit as claude-1 shows a call of %s/%s: %+v", e.Tenant, e.Agent, e)
		}
	}

	// The table, for people.
	out := cli(d.Token, "audit", "--agent", "claude-1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) < 2 ||
		strings.Join(strings.Fields(lines[0]), " ") != "AT DOOR VERB WHO SANDBOX CODE MS" || !strings.Contains(out, "acme/claude-1") {
		t.Errorf("hearth audit --agent claude-1 =\n%s", out)
	}

	// GET /metrics, for operators, counts the running sandbox.
	sb, err := d.Client().Get(ctx, "audited")
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(token string) (int, string) {
		t.Helper()
		return get(t, d.URL+"/metrics", token)
	}
	if code, body := scrape(agentTok); code != http.StatusForbidden {
		t.Errorf("GET /metrics as an agent = %d %s, want 403", code, body)
	}
	code, body := scrape(d.Token)
	lines := strings.Split(body, "\n")
	for _, want := range []string{
		fmt.Sprintf(`hearth_sandboxes{tenant=%q,status="running"} 1`, sb.Tenant),
		`hearth_requests_total{door="cli",verb="sandbox.create",code="ok"} 1`,
		`hearth_creates_total{tenant="system",result="created"} 1`,
		`hearth_exec_duration_seconds_count 1`,
		`hearth_breaker_trips_total 0`,
	} {
		if code != http.StatusOK || !slices.Contains(lines, want) {
			t.Errorf("GET /metrics = %d, has no line %s", code, want)
		}
	}
	if strings.Contains(body, d.Token) || strings.Contains(body, agentTok) {
		t.Errorf("GET /metrics shows a token")
	}
	if t.Failed() {
		t.Logf("GET /metrics:\n%s", body)
	}
}
