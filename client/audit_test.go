package client_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

func TestAudit(t *testing.T) {
	at := time.Date(2026, time.January, 2, 15, 4, 5, 123_000_000, time.UTC)
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"events": []sandbox.AuditEvent{
			{ID: 7, At: at, Door: sandbox.DoorCLI, Verb: "sandbox.create", Tenant: "acme", Agent: "claude-1",
				Role: sandbox.RoleAgent, TokenID: "tok-abcde", Sandbox: "agent-claude-1-web", Status: 201, DurationMs: 42},
		}})
	})
	c := client.New(d.URL, "hearth_x", nil)
	since := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600))
	events, err := c.Admin().Audit(t.Context(), sandbox.AuditFilter{Since: since, Tenant: "acme", Agent: "claude-1", Limit: 50})
	if err != nil {
		t.Fatalf("Audit = %v", err)
	}
	req := d.last(t)
	q, _ := url.ParseQuery(req.Query)
	if req.Method != "GET" || req.RawPath != "/v1/audit" || q.Get("since") != "2026-01-01T00:00:00+01:00" ||
		q.Get("tenant") != "acme" || q.Get("agent") != "claude-1" || q.Get("limit") != "50" {
		t.Errorf("request = %+v, want GET /v1/audit with since, tenant, agent and limit", req)
	}
	if len(events) != 1 || events[0].ID != 7 || !events[0].At.Equal(at) || events[0].Status != 201 || events[0].Code != "" {
		t.Errorf("Audit = %+v", events)
	}

	if _, err := c.Admin().Audit(t.Context(), sandbox.AuditFilter{}); err != nil {
		t.Fatalf("Audit(no filter) = %v", err)
	}
	if req := d.last(t); req.Query != "" {
		t.Errorf("Audit(no filter) sent the query %q, want none", req.Query)
	}
}
