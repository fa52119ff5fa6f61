package httpapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/testutil/testenv"
)

// More principals for the audit and metrics tests, with their tokens.
var (
	operatorP = sandbox.Principal{Tenant: "system", Agent: "operator", Role: sandbox.RoleOperator}
	adminT1   = sandbox.Principal{Tenant: "t1", Agent: "boss", Role: sandbox.RoleTenantAdmin}
	agentB1   = sandbox.Principal{Tenant: "t2", Agent: "b1", Role: sandbox.RoleAgent}
)

const (
	tokenOperator = "hearth_testtokenfortheoperator"
	tokenAdminT1  = "hearth_testtokenfortenantadmint1"
	tokenB1       = "hearth_testtokenforagentb1"
	// tokenBogus is a well-formed token the daemon does not know.
	tokenBogus = "hearth_bogustokenthatnobodyissued"
)

// addToken stores a token for p with the given secret, as id.
func addToken(t *testing.T, e *env, id, secret string, p sandbox.Principal) {
	t.Helper()
	sum := sha256.Sum256([]byte(secret))
	if err := e.db.Tokens().Create(t.Context(), store.Token{ID: id, Hash: hex.EncodeToString(sum[:]), Principal: p, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
}

// auditEnv is an env keeping the audit log and metrics in reg, with
// tokens for an operator, t1's tenant admin and agent b1 of tenant t2.
func auditEnv(t *testing.T, reg *metrics.Registry) *env {
	t.Helper()
	e := newEnv(t, envOptions{audit: true, api: httpapi.Options{Metrics: reg}})
	if _, err := e.svc.Tenancy.CreateTenant(t.Context(), operatorP, sandbox.Tenant{Name: "t2", Allocation: sandbox.Resources{MilliCPU: 1 << 20, MemoryBytes: 1 << 45, DiskBytes: 1 << 48}}); err != nil {
		t.Fatal(err)
	}
	addToken(t, e, "tok-operator", tokenOperator, operatorP)
	addToken(t, e, "tok-boss", tokenAdminT1, adminT1)
	addToken(t, e, "tok-b1", tokenB1, agentB1)
	return e
}

// stored returns every event in the store once the recorder has flushed.
func stored(t *testing.T, e *env) []sandbox.AuditEvent {
	t.Helper()
	if err := e.recorder.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	events, err := e.db.Audit().List(t.Context(), sandbox.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// eventually polls cond for a few seconds: a call is recorded when its
// handler returns, which for an exec is after the client has its result
// (the server still closes the WebSocket).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// noSecrets fails the test if text holds a token, or any of secrets.
func noSecrets(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range append(secrets, tokenA1, tokenA2, tokenOperator, tokenAdminT1, tokenB1, tokenBogus) {
		if strings.Contains(text, s) {
			t.Errorf("%s holds the secret %q:\n%s", what, s, text)
		}
	}
}

// TestAuditEvents checks the event of each kind of call: a create, an
// exec from the CLI, exec and get failures, a 401, and that health is not
// audited; none of them holds a token or the command.
func TestAuditEvents(t *testing.T) {
	e := auditEnv(t, nil)
	ctx := t.Context()
	api := e.client()
	cli := client.New(e.url, tokenA1, &client.Options{UserAgent: "hearth-cli/v1.2.3"})
	const secretArg = "the-command-text-stays-out"

	start := time.Now().UTC()
	if _, _, err := api.Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
		t.Fatalf("Create = %v", err)
	}
	var out bytes.Buffer
	if res, err := cli.Exec(ctx, "web", sandbox.ExecRequest{Argv: []string{"echo", secretArg}, Env: map[string]string{"SECRET": secretArg}}, nil, &out, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if _, err := cli.Exec(ctx, "nosuch", sandbox.ExecRequest{Argv: []string{"echo", secretArg}}, nil, nil, nil); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Fatalf("Exec(nosuch) = %v, want not_found", err)
	}
	if _, err := api.Get(ctx, "nosuch"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Fatalf("Get(nosuch) = %v, want not_found", err)
	}
	if resp, _ := testenv.Do(t, "GET", e.url+"/v1/sandboxes", tokenBogus, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/sandboxes with a bogus token = %d, want 401", resp.StatusCode)
	}
	if resp, _ := testenv.Do(t, "GET", e.url+"/v1/health", "", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/health = %d", resp.StatusCode)
	}

	var events []sandbox.AuditEvent
	eventually(t, "5 events", func() bool { events = stored(t, e); return len(events) >= 5 })
	end := time.Now().UTC()
	a1 := func(ev sandbox.AuditEvent) sandbox.AuditEvent {
		ev.Tenant, ev.Agent, ev.Role, ev.TokenID = agentA1.Tenant, agentA1.Agent, agentA1.Role, "tok-a1"
		return ev
	}
	want := []sandbox.AuditEvent{
		a1(sandbox.AuditEvent{Door: "api", Verb: "sandbox.create", Sandbox: "agent-a1-web", Status: 201}),
		// The sandbox as the caller's reference resolves: one spelling,
		// with or without the attribution prefix.
		a1(sandbox.AuditEvent{Door: "cli", Verb: "sandbox.exec", Sandbox: "agent-a1-web", Status: 101}),
		// Refused before the upgrade: the caller cannot see it.
		a1(sandbox.AuditEvent{Door: "cli", Verb: "sandbox.exec", Sandbox: "agent-a1-nosuch", Status: 404, Code: sandbox.CodeNotFound}),
		a1(sandbox.AuditEvent{Door: "api", Verb: "sandbox.get", Sandbox: "agent-a1-nosuch", Status: 404, Code: sandbox.CodeNotFound}),
		{Door: "api", Verb: "sandbox.list", Status: 401, Code: sandbox.CodeUnauthenticated},
	}
	if len(events) != len(want) {
		t.Fatalf("stored %d events, want %d:\n%+v", len(events), len(want), events)
	}
	for i, got := range events {
		if got.ID <= 0 || got.At.Before(start) || got.At.After(end) || got.DurationMs < 0 || got.DurationMs > end.Sub(start).Milliseconds() {
			t.Errorf("event %d (%s): id %d at %v took %d ms; want an id, times within the test", i, got.Verb, got.ID, got.At, got.DurationMs)
		}
		got.ID, got.At, got.DurationMs = 0, time.Time{}, 0
		if got != want[i] {
			t.Errorf("event %d =\n\t%+v\nwant\n\t%+v", i, got, want[i])
		}
	}
	b, _ := json.Marshal(events)
	noSecrets(t, "the stored events", string(b), secretArg, "hearth_") // no token of any kind
}

// TestAuditList checks GET /v1/audit: each role reads its own scope, the
// filters, and the strict parameters.
func TestAuditList(t *testing.T) {
	e := auditEnv(t, nil)
	get := func(token string) {
		t.Helper()
		if resp, _ := testenv.Do(t, "GET", e.url+"/v1/limits", token, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/limits = %d", resp.StatusCode)
		}
	}
	get(tokenA1)
	get(tokenA2)
	get(tokenB1)
	get(tokenAdminT1)
	get(tokenOperator)
	testenv.Do(t, "GET", e.url+"/v1/limits", tokenBogus, "")
	eventually(t, "the 6 calls recorded", func() bool { return len(stored(t, e)) == 6 })

	// who lists the callers of the events answered, in order.
	who := func(token, query string) []string {
		t.Helper()
		resp, body := testenv.Do(t, "GET", e.url+"/v1/audit"+query, token, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/audit%s = %d %s", query, resp.StatusCode, body)
		}
		var list struct {
			Events []sandbox.AuditEvent `json:"events"`
		}
		if err := json.Unmarshal(body, &list); err != nil || list.Events == nil {
			t.Fatalf("GET /v1/audit%s body %s: %v", query, body, err)
		}
		out := []string{}
		for _, ev := range list.Events {
			if ev.Verb == "limits.get" { // leave out the audit.list calls of the test itself
				out = append(out, ev.Tenant+"/"+ev.Agent)
			}
		}
		return out
	}
	tests := []struct {
		name, token, query string
		want               []string
	}{
		// First, while t1's only events are these calls.
		{"limit keeps the newest", tokenOperator, "?tenant=t1&limit=2", []string{"t1/a2", "t1/boss"}},
		{"operator sees all", tokenOperator, "", []string{"t1/a1", "t1/a2", "t2/b1", "t1/boss", "system/operator", "/"}},
		{"operator by tenant", tokenOperator, "?tenant=t2", []string{"t2/b1"}},
		{"operator by agent", tokenOperator, "?tenant=t1&agent=a2", []string{"t1/a2"}},
		{"tenant admin sees its tenant", tokenAdminT1, "", []string{"t1/a1", "t1/a2", "t1/boss"}},
		{"tenant admin by agent", tokenAdminT1, "?agent=a1", []string{"t1/a1"}},
		{"tenant admin, another tenant", tokenAdminT1, "?tenant=t2", []string{}},
		{"agent sees itself", tokenA1, "", []string{"t1/a1"}},
		{"agent asking for another", tokenA1, "?agent=a2", []string{}},
		{"agent of t2", tokenB1, "", []string{"t2/b1"}},
		{"since in the future", tokenOperator, "?since=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), []string{}},
		{"since a duration", tokenOperator, "?since=1h&tenant=t2", []string{"t2/b1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := who(tt.token, tt.query); !slices.Equal(got, tt.want) {
				t.Errorf("GET /v1/audit%s = %q, want %q", tt.query, got, tt.want)
			}
		})
	}

	t.Run("client", func(t *testing.T) {
		events, err := client.New(e.url, tokenA2, nil).Admin().Audit(t.Context(), sandbox.AuditFilter{Since: time.Now().Add(-time.Hour)})
		if err != nil || len(events) == 0 {
			t.Fatalf("Audit as a2 = %d events, %v", len(events), err)
		}
		for _, ev := range events {
			if ev.Agent != "a2" {
				t.Errorf("a2 read an event of %s/%s", ev.Tenant, ev.Agent)
			}
		}
	})
	for _, tt := range []struct{ query, msg string }{
		{"?since=yesterday", "neither a time nor a duration"},
		{"?since=-1h", "neither a time nor a duration"},
		{"?limit=10001", "over the maximum of 10000"},
		{"?limit=-1", "not a non-negative integer"},
		{"?agnet=a1", "unknown query parameter"},
	} {
		resp, body := testenv.Do(t, "GET", e.url+"/v1/audit"+tt.query, tokenOperator, "")
		if got := errorOf(t, resp, body); got.Code != sandbox.CodeInvalidArgument || !strings.Contains(got.Message, tt.msg) {
			t.Errorf("GET /v1/audit%s = %s %q, want invalid_argument %q", tt.query, got.Code, got.Message, tt.msg)
		}
	}
	if resp, body := testenv.Do(t, "GET", e.url+"/v1/audit", "", ""); errorOf(t, resp, body).Code != sandbox.CodeUnauthenticated {
		t.Errorf("GET /v1/audit without a token = %d %s, want 401", resp.StatusCode, body)
	}
}

// TestAuditSandbox: GET /v1/audit?sandbox= answers the calls on one
// sandbox since it was made, as its caller names it: not those on
// another tenant's sandbox of the same name, nor on the sandbox that had
// its name before; an operator's calls on it count, as TENANT/NAME; a
// caller who cannot see the sandbox is not_found. The client asks for it
// with AuditFilter.OnName.
func TestAuditSandbox(t *testing.T) {
	e := auditEnv(t, nil)
	ctx := t.Context()
	a1, b1, op := e.client(), client.New(e.url, tokenB1, nil), client.New(e.url, tokenOperator, nil)
	for _, c := range []*client.Client{a1, b1} {
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
			t.Fatal(err)
		}
	}
	a1.Get(ctx, "web") // a call on the sandbox that has the name first
	if err := a1.Destroy(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	sb, _, err := a1.Create(ctx, sandbox.CreateRequest{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	a1.Get(ctx, "web")
	b1.Get(ctx, "web")
	op.Get(ctx, "t1/"+sb.Name)
	a1.Get(ctx, "web")
	eventually(t, "the calls recorded", func() bool { return len(stored(t, e)) >= 9 })

	calls := func(c *client.Client, f sandbox.AuditFilter) ([]string, error) {
		events, err := c.Admin().Audit(ctx, f)
		var out []string
		for _, ev := range events {
			out = append(out, ev.Verb+" "+ev.Tenant+"/"+ev.Agent+" "+ev.Sandbox)
		}
		return out, err
	}
	want := []string{"sandbox.get t1/a1 " + sb.Name, "sandbox.get system/operator t1/" + sb.Name, "sandbox.get t1/a1 " + sb.Name}
	if got, err := calls(op, sandbox.AuditFilter{OnTenant: "t1", OnName: sb.Name}); err != nil || !slices.Equal(got, want) {
		t.Errorf("the operator's calls on t1/%s = %q, %v; want %q", sb.Name, got, err, want)
	}
	if got, err := calls(e.client(), sandbox.AuditFilter{OnName: "web"}); err != nil || !slices.Equal(got, []string{want[0], want[2]}) {
		t.Errorf("a1's calls on web = %q, %v; want its own two gets (an agent reads its own calls)", got, err)
	}
	if got, err := calls(e.client(), sandbox.AuditFilter{OnName: "web", Limit: 1}); err != nil || !slices.Equal(got, want[2:]) {
		t.Errorf("a1's newest call on web = %q, %v; want %q", got, err, want[2:])
	}
	if got, err := calls(b1, sandbox.AuditFilter{OnName: "web"}); err != nil || len(got) != 1 || !strings.HasPrefix(got[0], "sandbox.get t2/b1 ") {
		t.Errorf("b1's calls on its own web = %q, %v; want its one get", got, err)
	}
	if _, err := calls(b1, sandbox.AuditFilter{OnTenant: "t1", OnName: "web"}); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("b1's calls on t1/web = %v; want not_found", err)
	}
	if got, err := calls(client.New(e.url, tokenAdminT1, nil), sandbox.AuditFilter{OnName: sb.Name}); err != nil || !slices.Equal(got, []string{want[0], want[2]}) {
		t.Errorf("t1's admin's calls on %s = %q, %v; want a1's two gets (a tenant admin reads its tenant's calls)", sb.Name, got, err)
	}
}

// TestAuditNamePrefix: a token restricted to a name prefix reads the
// audit events of the sandboxes inside it only, whichever way their
// callers wrote them and whichever token made them, and is told the usage
// of those sandboxes only.
func TestAuditNamePrefix(t *testing.T) {
	const tokenHermes, tokenOpHermes = "hearth_testtokenforhermesprefix", "hearth_testtokenforoperatorhermes"
	e := auditEnv(t, metrics.NewRegistry())
	hermes := agentA1
	hermes.NamePrefix = "hermes-"
	addToken(t, e, "tok-hermes", tokenHermes, hermes)
	ctx := t.Context()
	api := e.client() // a1, unrestricted
	for _, name := range []string{"web", "hermes-1"} {
		if _, _, err := api.Create(ctx, sandbox.CreateRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []string{"web", "agent-a1-web", "t1/agent-a1-web", "hermes-1", "agent-a1-hermes-1", "t1/hermes-1"} {
		if _, err := api.Get(ctx, ref); err != nil {
			t.Fatalf("Get(%s) = %v", ref, err)
		}
	}
	// a2 names a sandbox inside the prefix as written, which is its own.
	client.New(e.url, tokenA2, nil).Get(ctx, "hermes-1")
	eventually(t, "the 9 calls recorded", func() bool { return len(stored(t, e)) >= 9 })

	resp, body := testenv.Do(t, "GET", e.url+"/v1/audit", tokenHermes, "")
	var list struct {
		Events []sandbox.AuditEvent `json:"events"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("GET /v1/audit as hermes- = %d %s", resp.StatusCode, body)
	}
	var got []string
	for _, ev := range list.Events {
		got = append(got, ev.Verb+" "+ev.Sandbox)
	}
	want := []string{"sandbox.create agent-a1-hermes-1", "sandbox.get agent-a1-hermes-1", "sandbox.get agent-a1-hermes-1", "sandbox.get agent-a1-hermes-1"}
	if !slices.Equal(got, want) {
		t.Errorf("GET /v1/audit as hermes- = %q, want %q", got, want)
	}

	limits := func(token string) sandbox.LimitsReport {
		t.Helper()
		resp, body := testenv.Do(t, "GET", e.url+"/v1/limits", token, "")
		var rep sandbox.LimitsReport
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rep) != nil || rep.Sandboxes == nil || rep.Budget == nil {
			t.Fatalf("GET /v1/limits = %d %s", resp.StatusCode, body)
		}
		return rep
	}
	small, _ := sandbox.LookupSize(sandbox.DefaultSize)
	if rep := limits(tokenHermes); rep.Sandboxes.Used != 1 || rep.Budget.Used.MemoryBytes != small.MemoryBytes {
		t.Errorf("limits as hermes- = %d sandboxes, %d bytes of memory used; want 1 and one %s sandbox's", rep.Sandboxes.Used, rep.Budget.Used.MemoryBytes, sandbox.DefaultSize)
	}
	if rep := limits(tokenA1); rep.Sandboxes.Used != 2 || rep.Budget.Used.MemoryBytes != 2*small.MemoryBytes {
		t.Errorf("limits as a1 = %d sandboxes, %d bytes of memory used; want 2 and two sandboxes'", rep.Sandboxes.Used, rep.Budget.Used.MemoryBytes)
	}
	// An operator's token restricted to a prefix reads no fleet-wide
	// counts: the metrics and the warm pool count every sandbox.
	opHermes := operatorP
	opHermes.NamePrefix = "hermes-"
	addToken(t, e, "tok-op-hermes", tokenOpHermes, opHermes)
	for _, path := range []string{"/metrics", "/v1/pool"} {
		resp, body := testenv.Do(t, "GET", e.url+path, tokenOpHermes, "")
		if got := errorOf(t, resp, body); got.Code != sandbox.CodePermissionDenied || !strings.Contains(got.Message, `"hermes-"`) {
			t.Errorf("GET %s as a restricted operator = %d %s; want permission_denied naming the prefix", path, resp.StatusCode, body)
		}
		if resp, body := testenv.Do(t, "GET", e.url+path, tokenOperator, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s as the operator = %d %s", path, resp.StatusCode, body)
		}
	}
}

func TestAuditOff(t *testing.T) {
	e := newEnv(t, envOptions{})
	addToken(t, e, "tok-operator", tokenOperator, operatorP)
	for _, path := range []string{"/v1/audit", "/metrics"} {
		resp, body := testenv.Do(t, "GET", e.url+path, tokenOperator, "")
		if got := errorOf(t, resp, body); got.Code != sandbox.CodeUnavailable {
			t.Errorf("GET %s without an audit log or metrics = %s, want unavailable", path, got.Code)
		}
	}
}

// TestMetrics drives calls through the API and reads them back from
// GET /metrics, which only operators may read.
func TestMetrics(t *testing.T) {
	reg := metrics.NewRegistry()
	alarm := door.CountAlarms(reg)
	e := auditEnv(t, reg)
	ctx := t.Context()
	api := e.client()
	cli := client.New(e.url, tokenA1, &client.Options{UserAgent: "hearth-cli/v1.2.3"})

	e.create(t, "m1")
	e.create(t, "m1") // resumed
	if _, _, err := client.New(e.url, tokenB1, nil).Create(ctx, sandbox.CreateRequest{Name: "Bad_Name"}); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
		t.Fatalf("Create(Bad_Name) = %v, want invalid_argument", err)
	}
	if _, err := api.Sleep(ctx, "m1"); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
	e.create(t, "m2")
	if _, err := cli.Exec(ctx, "m2", sandbox.ExecRequest{Shell: "true"}, nil, nil, nil); err != nil {
		t.Fatalf("Exec = %v", err)
	}
	if _, err := api.Get(ctx, "nosuch"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Fatalf("Get(nosuch) = %v", err)
	}
	testenv.Do(t, "GET", e.url+"/v1/sandboxes", tokenBogus, "")
	alarm(sandbox.Alarm{Kind: "create_rate", Tenant: "t1", Agent: "a1"})
	alarm(sandbox.Alarm{Kind: "circuit_open", Tenant: "t1", Agent: "a1"})
	alarm(sandbox.Alarm{Kind: "circuit_open", Tenant: "t1", Agent: "a2"})

	for _, tt := range []struct {
		token string
		code  sandbox.Code
	}{{"", sandbox.CodeUnauthenticated}, {tokenA1, sandbox.CodePermissionDenied}, {tokenAdminT1, sandbox.CodePermissionDenied}} {
		resp, body := testenv.Do(t, "GET", e.url+"/metrics", tt.token, "")
		if got := errorOf(t, resp, body); got.Code != tt.code {
			t.Errorf("GET /metrics with %q = %s, want %s", tt.token, got.Code, tt.code)
		}
	}

	scrape := func() []string {
		t.Helper()
		resp, body := testenv.Do(t, "GET", e.url+"/metrics", tokenOperator, "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != metrics.ContentType {
			t.Fatalf("GET /metrics = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return strings.Split(string(body), "\n")
	}
	const execDone = `hearth_exec_duration_seconds_count 1`
	var lines []string
	eventually(t, "the exec in /metrics", func() bool { lines = scrape(); return slices.Contains(lines, execDone) })
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		`# TYPE hearth_requests_total counter`,
		`hearth_requests_total{door="api",verb="sandbox.create",code="ok"} 3`,
		`hearth_requests_total{door="api",verb="sandbox.create",code="invalid_argument"} 1`,
		`hearth_requests_total{door="cli",verb="sandbox.exec",code="ok"} 1`,
		`hearth_requests_total{door="api",verb="sandbox.get",code="not_found"} 1`,
		`hearth_requests_total{door="api",verb="sandbox.list",code="unauthenticated"} 1`,
		`hearth_requests_total{door="api",verb="metrics.get",code="permission_denied"} 2`,
		`hearth_errors_total{code="not_found"} 1`,
		`hearth_errors_total{code="unauthenticated"} 2`,
		`hearth_creates_total{tenant="t1",result="created"} 2`,
		`hearth_creates_total{tenant="t1",result="resumed"} 1`,
		`hearth_creates_total{tenant="t2",result="invalid_argument"} 1`,
		`hearth_sandboxes{tenant="t1",status="running"} 1`,
		`hearth_sandboxes{tenant="t1",status="sleeping"} 1`,
		`hearth_request_duration_seconds_count{verb="sandbox.create"} 4`,
		`hearth_request_duration_seconds_bucket{verb="sandbox.exec",le="+Inf"} 1`,
		`hearth_alarms_total{kind="circuit_open"} 2`,
		`hearth_alarms_total{kind="create_rate"} 1`,
		`hearth_breaker_trips_total 2`,
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("GET /metrics has no line %s", want)
		}
	}
	noSecrets(t, "GET /metrics", text)
	if t.Failed() {
		t.Logf("GET /metrics:\n%s", text)
	}

	// The gauge is read at each scrape.
	if err := api.Destroy(ctx, "m2"); err != nil {
		t.Fatal(err)
	}
	if lines := scrape(); slices.Contains(lines, `hearth_sandboxes{tenant="t1",status="running"} 1`) {
		t.Errorf("after destroying m2, /metrics still counts a running sandbox:\n%s", strings.Join(lines, "\n"))
	}
}
