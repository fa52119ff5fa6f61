package httpapi

import (
	"net/http"
	"time"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// handleUsage answers what the sandbox uses now, and with ?since= (an RFC
// 3339 time, or a duration back from now) the samples its node kept since
// then (an hour at most).
func (s sandboxes) handleUsage(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "since")
	since := q.since("since", time.Now())
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	u, err := s.svc.Usage.Of(r.Context(), p, r.PathValue("name"), since)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, u)
}

// handleGone answers why the sandboxes the caller could see went, the
// newest first.
func (s sandboxes) handleGone(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	gone, err := s.svc.Sandboxes.ListGone(r.Context(), p)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, map[string][]sandbox.Gone{"gone": gone})
}
