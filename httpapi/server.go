// Package httpapi is hearth's native HTTP and WebSocket API, /v1/sandboxes…
// (docs/API.md is the reference). It is a door and nothing more: each
// handler authenticates the caller, decodes the request, calls one
// lifecycle service method (svc.Sandboxes.Create, …) with the caller's
// Principal, and encodes the result or the error. Decisions (names, limits,
// ownership, what a caller may see) belong to lifecycle; routes.go lists
// every route with its verb, and observe.go records each call in the audit
// log and the metrics.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
)

// Options configure the handler New returns. The zero value works.
type Options struct {
	// Logger receives internal errors (whose text never reaches the caller)
	// and exec stream failures; nil discards.
	Logger *slog.Logger
	// MaxBodyBytes bounds a JSON request body (1 MiB): a larger
	// Content-Length is refused before a byte is read, a chunked body is
	// cut at the limit.
	MaxBodyBytes int64
	// MaxExecMessage bounds the first message of an exec WebSocket, the JSON
	// ExecRequest (256 KiB): a larger message is refused once that much is
	// read. A larger script streams after it (ExecRequest.ShellSize).
	MaxExecMessage int64
	// MaxConnections bounds the long-lived connections one caller (a
	// token) holds at once: exec streams, file transfers, proxied requests
	// and MCP requests, the doors' included (DefaultMaxConnections).
	MaxConnections int
	// ExecStartTimeout is how long an exec WebSocket may stay open without
	// its first message (30s).
	ExecStartTimeout time.Duration
	// Audit, if set, receives the audit event of every call but GET
	// /v1/health; nil records none.
	Audit AuditRecorder
	// AuditLog, if set, serves GET /v1/audit; nil answers it unavailable.
	AuditLog AuditLog
	// Metrics, if set, receives the API's metrics and the sandboxes gauge,
	// and GET /metrics serves it; nil answers that unavailable.
	Metrics *metrics.Registry
	// MCP, if set, serves /mcp, the MCP door (mcpserver.Server.Handler),
	// after the API has authenticated the caller; its calls are audited
	// with door "mcp". nil: no /mcp.
	MCP http.Handler
	// Doors are served beside the native routes, each in its own dialect
	// (see Door); their prefixes must not overlap the native routes.
	Doors []*Door
	// BaseDomain, if set, makes every host {port}-{name}.{BaseDomain} the
	// URL of that port of that sandbox (a wildcard DNS name pointing at the
	// daemon), besides /v1/sandboxes/{name}/proxy/{port}/.
	BaseDomain string
}

// Defaults for zero Options fields.
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxExecMessage   = 256 << 10
	DefaultExecStartTimeout = 30 * time.Second
)

// server holds what every handler needs: the service and the options.
type server struct {
	svc     *lifecycle.Service
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *apiMetrics // nil without Options.Metrics
	conns   *connLimits
	// hostProxy serves requests to the hosts of Options.BaseDomain.
	hostProxy http.Handler
}

// New returns the API handler over svc. Every route but GET /v1/health
// needs `Authorization: Bearer <token>`; every error, unknown routes and
// wrong methods included, is the JSON body {"error": {...}} with the status
// of its code.
func New(svc *lifecycle.Service, opts Options) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxExecMessage <= 0 {
		opts.MaxExecMessage = DefaultMaxExecMessage
	}
	if opts.ExecStartTimeout <= 0 {
		opts.ExecStartTimeout = DefaultExecStartTimeout
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	s := &server{svc: svc, opts: opts, log: opts.Logger, mux: http.NewServeMux(), conns: newConnLimits(opts.MaxConnections)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics != nil {
		s.metrics = newAPIMetrics(opts.Metrics, svc.Sandboxes.Counts)
	}
	s.routes()
	s.hostProxy = s.observe(verbProxy, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := s.hostTarget(r)
		s.proxy(w, r, t)
	}))
	return s
}

// ServeHTTP dispatches to the route (whose panics observe answers),
// turning the mux's own plain-text 404 and 405 answers into JSON errors.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.hostTarget(r); ok {
		s.hostProxy.ServeHTTP(w, r)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.noRoute(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// noRoute answers a request no route takes: 405 with Allow when the path
// exists under another method, 404 otherwise. The mux alone knows which,
// so its answer is recorded and re-rendered.
func (s *server) noRoute(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	var err error
	if rec.status == http.StatusMethodNotAllowed {
		allow := rec.header.Get("Allow")
		w.Header().Set("Allow", allow)
		err = &statusError{status: http.StatusMethodNotAllowed,
			err: sandbox.Errorf(sandbox.CodeInvalidArgument, "method %s is not allowed on %s", r.Method, r.URL.Path).
				WithHint("use %s", strings.ReplaceAll(allow, ", ", " or ")).
				With("allow", strings.Split(allow, ", "))}
	} else {
		err = sandbox.Errorf(sandbox.CodeNotFound, "no route %s %s", r.Method, r.URL.Path).
			WithHint("the API lives under /v1/sandboxes; docs/API.md lists every route")
	}
	if d := s.doorOf(r.URL.Path); d != nil {
		// Answered in the door's dialect, as its own routes would.
		r = r.WithContext(context.WithValue(r.Context(), callKey{}, &call{door: d}))
		s.inDoor(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.writeError(w, r, err) })).ServeHTTP(w, r)
		return
	}
	s.writeError(w, r, err)
}

// statusError answers err with a status other than its code's: 405 has no
// code of its own.
type statusError struct {
	status int
	err    *sandbox.Error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// statusRecorder captures the status and headers a fallback handler writes.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

// authedHandler is a handler that runs for an authenticated caller.
type authedHandler func(w http.ResponseWriter, r *http.Request, p sandbox.Principal)

// authed authenticates the bearer token of the request before h runs, and
// tells the call who its caller is; a missing or bad token is 401 with
// `WWW-Authenticate: Bearer`. The route takes the query parameters params
// (each once) and no other: docs/API.md promises strict queries, so an
// unknown one is invalid_argument naming it. A route whose handler reads
// its query itself uses authedQuery.
func (s *server) authed(h authedHandler, params ...string) http.Handler {
	return s.authedQuery(func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
		if q := queryParams(r, params...); q.err != nil {
			s.writeError(w, r, q.err)
			return
		}
		h(w, r, p)
	})
}

// authedQuery is authed for a route whose handler reads its query itself,
// strictly, with queryParams.
func (s *server) authedQuery(h authedHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.svc.Tenancy.Authenticate(r.Context(), bearerToken(r))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if c := callOf(r); c != nil {
			c.principal = p
		}
		h(w, r, p)
	})
}

// visibleFirst runs h only once p may see the sandbox the path names
// (lifecycle's Get), answering not_found (or its like) otherwise. Routes
// that read a body or WebSocket messages about a sandbox take it, so that
// a call on a sandbox the caller cannot see is answered before a byte of
// it is read: it costs one lookup, whatever the caller sends.
func (s *server) visibleFirst(h authedHandler) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
		if s.visible(w, r, p) {
			h(w, r, p)
		}
	}
}

// visible reports whether p may see the sandbox r's path names, answering
// the error itself when not.
func (s *server) visible(w http.ResponseWriter, r *http.Request, p sandbox.Principal) bool {
	if _, err := s.svc.Sandboxes.Get(r.Context(), p, r.PathValue("name")); err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

// bearerToken returns the token of an `Authorization: Bearer <token>`
// header (the scheme is case-insensitive, RFC 7235 §2.1), or "" when there
// is none; lifecycle refuses "" like any other bad token.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// detached returns a context for work that must finish after the request's
// own context ended (the last message of an exec stream).
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}
