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
	u, err := s.svc.Sandboxes.Usage(r.Context(), p, r.PathValue("name"), since)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, u)
}
