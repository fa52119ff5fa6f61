package lifecycle_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGuardrailWords holds the exact words of every guardrail's error, as
// every door renders them (the CLI prints "error: message" and "hint:
// hint"; the API and MCP carry the same fields), in
// testdata/guardrails.golden. Run with -update after a deliberate change.
func TestGuardrailWords(t *testing.T) {
	e := secretsEnv(t)
	ctx := t.Context()
	var got strings.Builder
	record := func(name string, err error) {
		t.Helper()
		var se *sandbox.Error
		if !errors.As(err, &se) {
			t.Fatalf("%s = %v, want a sandbox.Error", name, err)
		}
		fmt.Fprintf(&got, "## %s [%s]\nerror: %s\nhint: %s\n\n", name, se.Code, se.Message, se.Hint)
	}
	create := func(p sandbox.Principal, req sandbox.CreateRequest) error {
		_, _, err := e.svc.Sandboxes.Create(ctx, p, req)
		return err
	}

	q := e.guarded(t, "acme", wide, sandbox.PolicyOverrides{}, "claude-1")
	for i := range 5 {
		e.create(t, q, fmt.Sprintf("box-%d", i))
	}
	record("quota", create(q, sandbox.CreateRequest{Name: "box-5"}))
	record("ttl over the cap", create(q, sandbox.CreateRequest{Name: "long", TTL: sandbox.Duration(48 * time.Hour)}))
	record("ttl negative", create(q, sandbox.CreateRequest{Name: "neg", TTL: sandbox.Duration(-time.Second)}))
	record("another identity's prefix", create(q, sandbox.CreateRequest{Name: "agent-other-box"}))

	for _, tc := range []struct {
		name  string
		alloc sandbox.Resources
	}{
		{"budget cpu", sandbox.Resources{MilliCPU: 4000, MemoryBytes: 1024 * gib, DiskBytes: 4096 * gib}},
		{"budget memory", sandbox.Resources{MilliCPU: 400_000, MemoryBytes: 2 * gib, DiskBytes: 4096 * gib}},
		{"budget disk", sandbox.Resources{MilliCPU: 400_000, MemoryBytes: 1024 * gib, DiskBytes: 8 * gib}},
	} {
		tenant := strings.ReplaceAll(tc.name, " ", "-")
		p := e.guarded(t, tenant, tc.alloc, sandbox.PolicyOverrides{}, tenant+"-1")
		e.create(t, p, "first")
		record(tc.name, create(sandbox.Principal{Tenant: tenant, Agent: tenant + "-2", Role: sandbox.RoleAgent}, sandbox.CreateRequest{Name: "second"}))
	}

	fast := e.guarded(t, "fast", wide, sandbox.PolicyOverrides{AgentQuota: intp(100), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(2), BreakerFactor: intp(2)}, "f1")
	for i := range 4 {
		e.create(t, fast, fmt.Sprintf("n-%d", i))
	}
	record("circuit open", create(fast, sandbox.CreateRequest{Name: "n-4"}))
	e.clock.Advance(5 * time.Minute)
	e.create(t, fast, "h-1")
	e.create(t, fast, "h-2")
	record("circuit open, half-open", create(fast, sandbox.CreateRequest{Name: "h-3"}))

	record("no such tenant", create(sandbox.Principal{Tenant: "nowhere", Agent: "x", Role: sandbox.RoleAgent}, sandbox.CreateRequest{Name: "x"}))
	_, err := e.svc.Processes.Exec(ctx, q, "box-0", sandbox.ExecRequest{Shell: "true", Secrets: []string{"MISSING"}}, nil, nil, nil)
	record("secret not found", err)
	if err := e.svc.Sandboxes.Destroy(ctx, q, "box-4"); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Sandboxes.Get(ctx, q, "box-4")
	record("gone", err)

	failing := newEnv(t, func(o *envOptions) { o.Layers = failingSnapshots{o.Layers} })
	failing.create(t, a1, "web")
	_, err = failing.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{Shell: "rm -rf data"}, nil, nil, nil)
	record("gate refusal", err)

	path := filepath.Join("testdata", "guardrails.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got.String() != string(want) {
		t.Errorf("the guardrails' words changed; run with -update if on purpose.\n got:\n%s\nwant:\n%s", got.String(), want)
	}
}
