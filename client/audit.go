package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Audit returns the audit events the caller may read (an operator all, a
// tenant admin its tenant's, an agent its own identity's) that match f,
// oldest first. f.OnName, when set, names one sandbox as the caller
// refers to it (with f.OnTenant its tenant when that is another's): its
// calls since it was created. A zero f.Limit takes the daemon's default,
// the newest 1000; it answers at most 10000.
func (a *Admin) Audit(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	q := url.Values{}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.Format(time.RFC3339Nano))
	}
	if f.Tenant != "" {
		q.Set("tenant", f.Tenant)
	}
	if f.Agent != "" {
		q.Set("agent", f.Agent)
	}
	if f.OnName != "" {
		ref := f.OnName
		if f.OnTenant != "" {
			ref = sandbox.Ref(f.OnTenant, f.OnName)
		}
		q.Set("sandbox", ref)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out struct {
		Events []sandbox.AuditEvent `json:"events"`
	}
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/audit", q, nil, &out)
	return out.Events, err
}
