// Package httpapi is hearth's native HTTP and WebSocket API, /v1/sandboxes…
// (docs/API.md is the reference). It is a door and nothing more: New
// returns its routes as a door.Door, which the door chain serves beside
// the other doors, authenticating the caller, auditing and counting each
// call and answering errors; each handler decodes the request, calls one
// lifecycle service method (svc.Sandboxes.Create, …) with the caller's
// Principal, and encodes the result or the error. Decisions (names,
// limits, ownership, what a caller may see) belong to lifecycle; routes.go
// lists every route with its verb.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
)

// Options configure the door New returns. The zero value works.
type Options struct {
	// Logger receives exec stream failures and what cannot be encoded
	// (the door chain logs the internal errors of calls); nil discards.
	Logger *slog.Logger
	// MaxBodyBytes bounds a JSON request body (1 MiB): a larger
	// Content-Length is refused before a byte is read, a chunked body is
	// cut at the limit.
	MaxBodyBytes int64
	// MaxExecMessage bounds the first message of an exec WebSocket, the JSON
	// ExecRequest (256 KiB): a larger message is refused once that much is
	// read. A larger script streams after it (ExecRequest.ShellSize).
	MaxExecMessage int64
	// ExecStartTimeout is how long an exec WebSocket may stay open without
	// its first message (30s).
	ExecStartTimeout time.Duration
	// Audit, if set, is flushed before GET /v1/audit reads the log, so that
	// the calls before it are there (audit.Recorder, the chain's).
	Audit interface {
		Flush(ctx context.Context) error
	}
	// AuditLog, if set, serves GET /v1/audit; nil answers it unavailable.
	AuditLog AuditLog
	// Metrics, if set, is what GET /metrics serves; nil answers that
	// unavailable.
	Metrics *metrics.Registry
	// BaseDomain, if set, makes every host {port}-{name}.{BaseDomain} the
	// URL of that port of that sandbox (a wildcard DNS name pointing at the
	// daemon), besides /v1/sandboxes/{name}/proxy/{port}/.
	BaseDomain string
	// BuildDir is where builds' contexts are spooled, each in a private
	// directory removed when its build ends ("": the system's temporary
	// directory).
	BuildDir string
	// Cluster, if set, tells GET /v1/health, for an operator, the store
	// and its nodes (cluster.Member.Health).
	Cluster func(ctx context.Context) (sandbox.ClusterHealth, error)
}

// AuditLog reads the audit log (store.AuditLog).
type AuditLog interface {
	List(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error)
}

// Defaults for zero Options fields.
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxExecMessage   = execstream.MaxRequestBytes
	DefaultExecStartTimeout = 30 * time.Second
)

// server holds what every handler needs: the service and the options.
// The handlers are methods of small views of it, one per noun (admin,
// sandboxes, files, proxies, execs, images), each embedding it.
type server struct {
	svc  *lifecycle.Service
	opts Options
	log  *slog.Logger
	exec *execstream.Runner
}

// New returns the native API over svc, a door for door.Chain.Handler.
// Every route but GET /v1/health needs `Authorization: Bearer <token>`;
// every error, unknown routes and wrong methods included, is the JSON body
// {"error": {...}} with the status of its code.
func New(svc *lifecycle.Service, opts Options) *door.Door {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxExecMessage <= 0 {
		opts.MaxExecMessage = DefaultMaxExecMessage
	}
	if opts.ExecStartTimeout <= 0 {
		opts.ExecStartTimeout = DefaultExecStartTimeout
	}
	s := &server{svc: svc, opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.exec = execstream.New(svc.Processes, svc.Files, s.log)
	return &door.Door{Routes: s.routes()}
}

// handler is a route's handler: it runs for an authenticated caller (or,
// on a route with door.AuthOptional, possibly the zero Principal) and
// answers errors itself.
type handler func(w http.ResponseWriter, r *http.Request, p sandbox.Principal)

// detached returns a context for work that must finish after the request's
// own context ended (the last message of an exec stream).
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// The views of the server whose methods are the handlers, one per noun.
type (
	// admin: health, tenants, agents, tokens, limits, secrets, bindings,
	// the pool, the audit log and the metrics.
	admin struct{ *server }
	// sandboxes: create, list, get, update, destroy, sleep, wake and
	// checkpoints.
	sandboxes struct{ *server }
	// files: the sandbox's files.
	files struct{ *server }
	// proxies: a sandbox's ports and the requests to them.
	proxies struct{ *server }
	// execs: the exec WebSocket.
	execs struct{ *server }
	// images: the tenants' images and registry logins.
	images struct{ *server }
)
