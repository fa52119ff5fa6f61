package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestAudit runs `hearth audit` against a daemon that answers two events:
// the table, the JSONL export, the filters it sends and its User-Agent.
func TestAudit(t *testing.T) {
	at := time.Date(2026, time.January, 2, 15, 4, 5, 123_000_000, time.UTC)
	events := []sandbox.AuditEvent{
		{ID: 1, At: at, Door: sandbox.DoorCLI, Verb: "sandbox.create", Tenant: "acme", Agent: "claude-1", Role: sandbox.RoleAgent,
			TokenID: "tok-abcde", Sandbox: "agent-claude-1-web", Status: 201, DurationMs: 42},
		{ID: 2, At: at.Add(time.Second), Door: sandbox.DoorAPI, Verb: "sandbox.list", Code: sandbox.CodeUnauthenticated, Status: 401},
	}
	var (
		mu    sync.Mutex
		query url.Values
		ua    string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/audit" || r.Header.Get("Authorization") != "Bearer hearth_test" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		mu.Lock()
		query, ua = r.URL.Query(), r.UserAgent()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"events": events})
	}))
	defer srv.Close()
	env := map[string]string{"HEARTH_URL": srv.URL, "HEARTH_TOKEN": "hearth_test"}
	hearth := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"audit"}, args...), func(k string) string { return env[k] }, nil, &out, &errb)
		return out.String(), errb.String(), code
	}

	out, errOut, code := hearth()
	if code != 0 {
		t.Fatalf("hearth audit = %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"AT", "DOOR", "VERB", "WHO", "SANDBOX", "CODE", "MS"},
		{"2026-01-02T15:04:05.123Z", "cli", "sandbox.create", "acme/claude-1", "agent-claude-1-web", "ok", "42"},
		{"2026-01-02T15:04:06.123Z", "api", "sandbox.list", "-", "-", "unauthenticated", "0"},
	}
	if len(lines) != len(want) {
		t.Fatalf("hearth audit printed\n%s\nwant %d lines", out, len(want))
	}
	for i, line := range lines {
		if got := strings.Fields(line); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d = %q, want the columns %q", i, line, want[i])
		}
	}
	mu.Lock()
	if !strings.HasPrefix(ua, "hearth-cli/") {
		t.Errorf("User-Agent = %q, want hearth-cli/<version>", ua)
	}
	if len(query) != 0 {
		t.Errorf("hearth audit sent the query %v, want none", query)
	}
	mu.Unlock()

	// JSONL: one object per line, each the event as the API has it.
	before := time.Now()
	out, errOut, code = hearth("--json", "--since", "2h", "--agent", "claude-1", "--tenant", "acme", "--limit", "5")
	if code != 0 {
		t.Fatalf("hearth audit --json = %d %s", code, errOut)
	}
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("hearth audit --json printed %d lines, want 2:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var e sandbox.AuditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.ID != events[i].ID || !e.At.Equal(events[i].At) || e.Verb != events[i].Verb {
			t.Errorf("JSONL line %d = %s (%v), want event %d", i, line, err, events[i].ID)
		}
	}
	mu.Lock()
	since, err := time.Parse(time.RFC3339Nano, query.Get("since"))
	if err != nil || since.Before(before.Add(-2*time.Hour-time.Second)) || since.After(time.Now().Add(-2*time.Hour)) {
		t.Errorf("--since 2h sent since=%q, want about 2h ago", query.Get("since"))
	}
	if query.Get("agent") != "claude-1" || query.Get("tenant") != "acme" || query.Get("limit") != "5" {
		t.Errorf("query = %v, want agent, tenant and limit", query)
	}
	mu.Unlock()

	for _, ref := range []string{"web", "acme/web"} {
		_, _, code = hearth("--sandbox", ref, "--json")
		mu.Lock()
		if code != 0 || query.Get("sandbox") != ref {
			t.Errorf("--sandbox %s = %d, sent sandbox=%q; want it as given", ref, code, query.Get("sandbox"))
		}
		mu.Unlock()
	}

	_, _, code = hearth("--since", "2026-01-02T15:00:00Z", "--json")
	mu.Lock()
	if code != 0 || query.Get("since") != "2026-01-02T15:00:00Z" {
		t.Errorf("--since TIME = %d, sent since=%q; want it as given", code, query.Get("since"))
	}
	mu.Unlock()

	for _, args := range [][]string{{"--since", "yesterday"}, {"--since", "-1h"}, {"--limit", "-1"}, {"extra"}} {
		if _, errOut, code := hearth(args...); code != exitUsage || !strings.Contains(errOut, "error: ") {
			t.Errorf("hearth audit %q = %d %q, want a usage error", args, code, errOut)
		}
	}
}
