package httpapi

import (
	"bytes"
	"net/http"
	"time"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
)

// Limits of GET /v1/audit: the events it answers when ?limit= is absent,
// and the most it answers at all.
const (
	defaultAuditLimit = 1000
	maxAuditLimit     = 10000
)

// auditList is the body of GET /v1/audit.
type auditList struct {
	Events []sandbox.AuditEvent `json:"events"`
}

// handleAudit answers the audit events the caller may read, oldest first:
// ?since= (RFC 3339 time, or a duration back from now), ?tenant=, ?agent=,
// ?sandbox= (the calls on that sandbox since it was created, as the
// caller names it; see lifecycle's Sandboxes.Calls), ?limit= (the newest
// N; 1000 by default, at most 10000). Events recorded before the call are
// flushed first, so that they are all there.
func (s admin) handleAudit(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "since", "tenant", "agent", "sandbox", "limit")
	f := sandbox.AuditFilter{Since: q.since("since", time.Now()), Tenant: q.q.Get("tenant"), Agent: q.q.Get("agent")}
	limit := q.int64("limit")
	switch {
	case limit == 0:
		limit = defaultAuditLimit
	case limit > maxAuditLimit:
		q.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "limit %d is over the maximum of %d events", limit, maxAuditLimit).
			WithHint("narrow the range with since, or page back by time").With("limit", maxAuditLimit))
	}
	f.Limit = int(limit)
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	if s.opts.AuditLog == nil {
		door.WriteError(w, r, sandbox.Errorf(sandbox.CodeUnavailable, "this daemon keeps no audit log").
			WithHint("the audit log is kept by `hearth serve`; this server was started without one"))
		return
	}
	if s.opts.Audit != nil {
		// A failure here is the caller going away, which List reports.
		s.opts.Audit.Flush(r.Context())
	}
	var events []sandbox.AuditEvent
	var err error
	if ref := q.q.Get("sandbox"); ref != "" {
		events, err = s.svc.Sandboxes.Calls(r.Context(), p, ref, f)
	} else if f, ok := s.svc.Tenancy.AuditScope(p, f); ok {
		events, err = s.opts.AuditLog.List(r.Context(), f)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	if events == nil {
		events = []sandbox.AuditEvent{}
	}
	s.encode(w, http.StatusOK, auditList{Events: events})
}

// handleMetrics answers the metrics in the Prometheus text format, to
// operators only (lifecycle's Fleetwide: not to a token restricted to a
// name prefix, since they count every sandbox).
func (s admin) handleMetrics(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Tenancy.Fleetwide(p, "read the metrics"); err != nil {
		door.WriteError(w, r, err)
		return
	}
	if s.opts.Metrics == nil {
		door.WriteError(w, r, sandbox.Errorf(sandbox.CodeUnavailable, "this daemon keeps no metrics").
			WithHint("metrics are kept by `hearth serve`; this server was started without them"))
		return
	}
	var b bytes.Buffer
	if _, err := s.opts.Metrics.WriteTo(&b); err != nil {
		door.WriteError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", metrics.ContentType)
	w.WriteHeader(http.StatusOK)
	b.WriteTo(w)
}
