package door

import (
	"context"
	"net/http"
	"strings"

	"github.com/hearth/hearth/sandbox"
)

// mux dispatches to the doors' routes: those a Match takes first, then
// the http.ServeMux of the patterns.
type mux struct {
	c     *Chain
	doors []*Door
	mux   *http.ServeMux
	hosts []matched
}

// matched is a route taken by its Match.
type matched struct {
	match func(*http.Request) bool
	h     http.Handler
}

// ServeHTTP dispatches to the route, turning the mux's own plain-text 404
// and 405 answers into errors in the door's dialect.
func (m *mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, h := range m.hosts {
		if h.match(r) {
			h.h.ServeHTTP(w, r)
			return
		}
	}
	if _, pattern := m.mux.Handler(r); pattern == "" {
		m.noRoute(w, r)
		return
	}
	m.mux.ServeHTTP(w, r)
}

// noRoute answers a request no route takes: 405 with Allow when the path
// exists under another method, 404 otherwise. The mux alone knows which,
// so its answer is recorded and re-rendered. Such a call is not audited.
func (m *mux) noRoute(w http.ResponseWriter, r *http.Request) {
	h, _ := m.mux.Handler(r)
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	var err error
	if rec.status == http.StatusMethodNotAllowed {
		allow := rec.header.Get("Allow")
		w.Header().Set("Allow", allow)
		err = WithStatus(http.StatusMethodNotAllowed,
			sandbox.Errorf(sandbox.CodeInvalidArgument, "method %s is not allowed on %s", r.Method, r.URL.Path).
				WithHint("use %s", strings.ReplaceAll(allow, ", ", " or ")).
				With("allow", strings.Split(allow, ", ")))
	} else {
		err = sandbox.Errorf(sandbox.CodeNotFound, "no route %s %s", r.Method, r.URL.Path).
			WithHint("the API lives under /v1/sandboxes; docs/API.md lists every route")
	}
	d := m.doorOf(r.URL.Path)
	if d != nil {
		for k, v := range d.Header {
			w.Header()[k] = v
		}
	}
	r = r.WithContext(context.WithValue(r.Context(), callKey{}, &call{chain: m.c, door: d}))
	WriteError(w, r, err)
}

// doorOf returns the door whose prefix holds path, the longest, or nil.
func (m *mux) doorOf(path string) *Door {
	var best *Door
	for _, d := range m.doors {
		if d.Prefix != "" && path != d.Prefix && !strings.HasPrefix(path, d.Prefix+"/") {
			continue
		}
		if best == nil || len(d.Prefix) > len(best.Prefix) {
			best = d
		}
	}
	return best
}

// statusRecorder captures the status and headers a fallback handler writes.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }
