// Package door is what every door of the daemon shares: the middleware
// chain each call goes through, whatever the wire dialect of the door that
// serves it (the native API, package httpapi; the Sprites-compatible API,
// package spritesapi; MCP, package mcpserver). A door is a Door, a list of
// Routes and the shape of its error body; Chain.Handler registers the
// doors side by side on one mux, and for every call
//
//   - records its audit event and its metrics once it ends (record.go),
//     and answers a panic as internal;
//   - sets the door's headers;
//   - authenticates the bearer token, exactly once, through the Tenancy
//     (lifecycle's), and puts the caller's Principal in the request's
//     context (PrincipalOf);
//   - runs the route's own checks (a strict query, a WebSocket handshake);
//   - sends a call on a sandbox that another node runs to that node
//     (Options.Forward), unchanged, the caller's token included, where
//     that node's chain serves it as its own;
//   - checks that the caller may see the sandbox the path names before a
//     byte of the body is read (Route.Visible);
//   - holds one of the caller's connections for a long-lived call
//     (Route.Stream, conns.go);
//   - answers an error through one table (sandbox.Code's HTTP status)
//     in the door's dialect (Door.WriteError), noting its code for the
//     audit event.
//
// Decisions stay in lifecycle: the chain asks it who a token is and
// whether a sandbox is visible, and nothing else.
package door

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"

	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/sandbox"
)

// Door is a set of routes that speak one wire dialect.
type Door struct {
	// Name is the door the audit log and the metrics record, e.g.
	// sandbox.DoorSprites; "" is the native API's, recorded as
	// sandbox.DoorCLI when the caller's User-Agent says hearth-cli and
	// sandbox.DoorAPI otherwise.
	Name string
	// Prefix is the path under which every route of the door lies, e.g.
	// "/v1/sprites": a request under it that no route takes is answered in
	// the door's dialect (404, or 405 for a path a route takes with
	// another method). "" is the door of every other path.
	Prefix string
	// Header is set on every response of the door, errors included.
	Header http.Header
	// Routes are the door's routes.
	Routes []Route
	// WriteError answers e, the public form of a call's error (internal
	// causes already logged and hidden), with status; nil is the native
	// body, WriteJSONError.
	WriteError func(w http.ResponseWriter, r *http.Request, status int, e *sandbox.Error)
	// AuditsCalls says the door records its calls' audit events itself
	// (MCP records one per tool call, not one per HTTP request): the chain
	// records only a request it answers with an error.
	AuditsCalls bool
}

// Auth is how a route authenticates its caller.
type Auth int

const (
	// AuthRequired: a missing or bad token is refused (401, with
	// `WWW-Authenticate: Bearer`).
	AuthRequired Auth = iota
	// AuthOptional: a token, if sent, must be good; without one the
	// caller is the zero Principal (a public port's visitor).
	AuthOptional
	// AuthNone: no token is read (the health check).
	AuthNone
	// AuthNode: only another node of the store may call, proving it with
	// its node credential (Options.Forward); no token is read, and the
	// caller is the zero Principal (FromNode names the node).
	AuthNode
)

// Route is one route of a Door.
type Route struct {
	// Pattern is an http.ServeMux pattern, method included.
	Pattern string
	// Match, if set, takes the requests it reports true for before the
	// mux sees them, in place of Pattern (a sandbox's own host name).
	Match func(r *http.Request) bool
	// Verb is the operation's stable name in the audit log and the
	// metrics; a route that does what a native route does uses its verb
	// ("sandbox.create").
	Verb string
	// Sandbox, if set, names the sandbox of a call for the audit log when
	// the path does not (a sandbox's own host name), from the start, so
	// that a refused call names it too.
	Sandbox func(r *http.Request) string
	// Target, if set, names the sandbox a call acts on when neither its
	// path nor Sandbox does (a field of its body), read once the caller
	// is authenticated, for the call to go to that sandbox's node; it
	// must leave the request's body as it found it.
	Target func(r *http.Request) string
	// MakesImage marks a call that makes an image (a pull, an import, a
	// build): on a daemon that makes none (Options.ImageNode) it goes to
	// the node ImageNode chooses.
	MakesImage bool
	// Auth is how the caller authenticates (AuthRequired).
	Auth Auth
	// Quiet calls are not audited (the health check: no caller, and
	// probed constantly); they are counted in the metrics.
	Quiet bool
	// Check, if set, vets the request once the caller is authenticated
	// and before anything else (a strict query, a WebSocket handshake);
	// its error is the answer.
	Check func(w http.ResponseWriter, r *http.Request) error
	// Visible, for a route whose path names a sandbox ({name}) and that
	// reads a body or messages about it, checks that the caller may see
	// that sandbox before Handle runs: a call on another's sandbox is
	// refused before a byte of it is read.
	Visible bool
	// Stream marks a long-lived call (a WebSocket, a file transfer, a
	// proxied request, an MCP request): it holds one of the caller's
	// connections (Options.MaxConnections) while Handle runs, and is
	// refused with rate_limited when the caller holds all of them.
	Stream bool
	// Handle serves a call by p. An error it returns is answered in the
	// door's dialect, so it must return one only before it has written
	// anything; once it has, it answers with WriteError itself or records
	// the outcome with NoteCode.
	Handle func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error
}

// Tenancy authenticates tokens (lifecycle.Tenancy).
type Tenancy interface {
	// Authenticate returns the principal of a token's secret; "" and
	// every bad secret are unauthenticated.
	Authenticate(ctx context.Context, secret string) (sandbox.Principal, error)
}

// Sandboxes finds a sandbox as a caller may see it (lifecycle.Sandboxes).
type Sandboxes interface {
	Get(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error)
}

// AuditRecorder takes the audit event of every call (audit.Recorder).
type AuditRecorder interface {
	// Record queues e for the audit log and returns at once.
	Record(e sandbox.AuditEvent)
}

// Options configure a Chain. The zero value works.
type Options struct {
	// Logger receives internal errors (whose text never reaches the
	// caller); nil discards.
	Logger *slog.Logger
	// Audit, if set, receives the audit event of every call but the Quiet
	// ones; nil records none.
	Audit AuditRecorder
	// Metrics, if set, receives the doors' metrics (record.go).
	Metrics *metrics.Registry
	// Counts, with Metrics, is asked at every scrape for the sandboxes
	// gauge (lifecycle.Sandboxes.Counts); nil: no gauge.
	Counts func(ctx context.Context) (map[[2]string]int, error)
	// MaxConnections bounds the long-lived calls one caller (a token)
	// holds at once, over all the doors (DefaultMaxConnections).
	MaxConnections int
	// Forward, if set, sends calls on other nodes' sandboxes to them
	// (cluster.Forwarder); nil serves every call here.
	Forward Forwarder
	// ImageNode, with Forward, is set on a daemon that makes no image
	// (a fleet's control plane): it names the node that makes one for a
	// call (Route.MakesImage), or answers why none can.
	ImageNode func(ctx context.Context) (string, error)
}

// Forwarder sends a call on a sandbox that another node runs to that
// node (cluster.Forwarder).
type Forwarder interface {
	// Verify returns the node that forwarded r, "" when no node did; a
	// call that claims to be and cannot prove it is refused with the
	// error.
	Verify(r *http.Request) (node string, err error)
	// NodeOf returns the node that runs the sandbox ref names, as p may
	// see it, when that is another node; "" otherwise.
	NodeOf(ctx context.Context, p sandbox.Principal, ref string) string
	// Forward serves r on node; an error means nothing was written.
	Forward(w http.ResponseWriter, r *http.Request, node string) error
}

// Chain is the middleware every call goes through.
type Chain struct {
	tenancy   Tenancy
	sandboxes Sandboxes
	opts      Options
	log       *slog.Logger
	metrics   *doorMetrics // nil without Options.Metrics
	conns     *connLimits
	recent    recent // principals lately authenticated, to forward calls
}

// New returns the chain over lifecycle's tenancy and sandboxes.
func New(tenancy Tenancy, sandboxes Sandboxes, opts Options) *Chain {
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	c := &Chain{tenancy: tenancy, sandboxes: sandboxes, opts: opts, log: opts.Logger, conns: newConnLimits(opts.MaxConnections)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics != nil {
		c.metrics = newDoorMetrics(opts.Metrics, opts.Counts)
	}
	return c
}

// Handler serves doors side by side, each route through the chain. Every
// error, unknown routes and wrong methods included, is answered in the
// dialect of the door whose Prefix holds the path (the longest).
func (c *Chain) Handler(doors ...*Door) http.Handler {
	m := &mux{c: c, doors: doors, mux: http.NewServeMux()}
	for _, d := range doors {
		for _, rt := range d.Routes {
			h := c.route(d, rt)
			if rt.Match != nil {
				m.hosts = append(m.hosts, matched{match: rt.Match, h: h})
				continue
			}
			m.mux.Handle(rt.Pattern, h)
		}
	}
	return m
}

// route is rt's handler: rt.Handle inside the chain.
func (c *Chain) route(d *Door, rt Route) http.Handler {
	return c.observe(d, rt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range d.Header {
			w.Header()[k] = v
		}
		if rt.Sandbox != nil {
			NoteSandbox(r, rt.Sandbox(r))
		}
		if !c.fromNode(w, r) || c.forwardEarly(w, r, rt) {
			return
		}
		p, ok := c.authenticate(w, r, rt.Auth)
		if !ok || c.forward(w, r, rt, p) {
			return
		}
		if rt.Check != nil {
			if err := rt.Check(w, r); err != nil {
				WriteError(w, r, err)
				return
			}
		}
		if rt.Visible && !Visible(w, r, p) {
			return
		}
		if rt.Stream {
			release, ok := Hold(w, r, p)
			if !ok {
				return
			}
			defer release()
		}
		if err := rt.Handle(w, r, p); err != nil {
			WriteError(w, r, err)
		}
	}))
}

// fromNode checks the node credential of a call another node forwarded,
// answering a bad one itself (false).
func (c *Chain) fromNode(w http.ResponseWriter, r *http.Request) bool {
	if c.opts.Forward == nil {
		return true
	}
	node, err := c.opts.Forward.Verify(r)
	if err != nil {
		WriteError(w, r, err)
		return false
	}
	if cl := callOf(r); cl != nil {
		cl.fromNode, cl.node = node != "", node
	}
	return true
}

// forward sends the call to the node that runs the sandbox it names, when
// another node does, and reports whether it did (answering the error when
// that node cannot be reached). A call another node forwarded is never
// sent on: where the sandbox moved meanwhile, lifecycle answers.
func (c *Chain) forward(w http.ResponseWriter, r *http.Request, rt Route, p sandbox.Principal) bool {
	cl := callOf(r)
	if c.opts.Forward == nil || cl == nil || cl.fromNode {
		return false
	}
	node, err := c.nodeFor(r, rt, p)
	if err != nil {
		WriteError(w, r, err)
		return true
	}
	if node == "" {
		return false
	}
	if err := c.opts.Forward.Forward(w, r, node); err != nil {
		WriteError(w, r, err)
		return true
	}
	cl.sentTo = node
	return true
}

// nodeFor is the node a call by p goes to: the node of the sandbox it
// names, when another node runs it; for a call that makes an image on a
// daemon that makes none, the node Options.ImageNode chooses; "" to serve
// it here.
func (c *Chain) nodeFor(r *http.Request, rt Route, p sandbox.Principal) (string, error) {
	if rt.MakesImage && c.opts.ImageNode != nil {
		return c.opts.ImageNode(r.Context())
	}
	ref := r.PathValue("name")
	if ref == "" && rt.Sandbox != nil {
		ref = rt.Sandbox(r)
	}
	if ref == "" && rt.Target != nil {
		ref = rt.Target(r)
	}
	if ref == "" {
		return "", nil
	}
	return c.opts.Forward.NodeOf(r.Context(), p, ref), nil
}

// authenticate reads the caller of r as auth says, answering a refusal
// itself (ok false), and records the principal in the call.
func (c *Chain) authenticate(w http.ResponseWriter, r *http.Request, auth Auth) (sandbox.Principal, bool) {
	if auth == AuthNode {
		if FromNode(r) == "" {
			WriteError(w, r, sandbox.Errorf(sandbox.CodeUnauthenticated, "only another hearth node of this store may make this call").
				WithHint("nodes call each other with the credentials of the store's cluster, never with a token"))
			return sandbox.Principal{}, false
		}
		return sandbox.Principal{}, true
	}
	token := BearerToken(r)
	if auth == AuthNone || auth == AuthOptional && token == "" {
		return sandbox.Principal{}, true
	}
	p, err := c.tenancy.Authenticate(r.Context(), token)
	if err != nil {
		WriteError(w, r, err)
		return sandbox.Principal{}, false
	}
	if c.opts.Forward != nil {
		c.recent.remember(token, p)
	}
	if cl := callOf(r); cl != nil {
		cl.principal, cl.authenticated = p, true
	}
	return p, true
}

// Visible reports whether p may see the sandbox r's path names, answering
// the error itself when not: Route.Visible, for a handler that must check
// later. It costs one lookup, whatever the caller sends.
func Visible(w http.ResponseWriter, r *http.Request, p sandbox.Principal) bool {
	c := callOf(r)
	if c == nil {
		panic("door.Visible outside the chain")
	}
	if _, err := c.chain.sandboxes.Get(r.Context(), p, r.PathValue("name")); err != nil {
		WriteError(w, r, err)
		return false
	}
	return true
}

// BearerToken returns the token of an `Authorization: Bearer <token>`
// header (the scheme is case-insensitive, RFC 7235 §2.1), or, on a
// WebSocket handshake without one, of a WebSocket subprotocol
// "bearer.<token, base64url without padding>" (a browser cannot set a
// WebSocket's headers; see WebSocketProtocol); "" when there is none.
// lifecycle refuses "" like any other bad token.
func BearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	if r.Header.Get("Authorization") != "" || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return ""
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if enc, ok := strings.CutPrefix(strings.TrimSpace(p), bearerProtocol); ok {
				b, err := base64.RawURLEncoding.DecodeString(enc)
				if err != nil {
					return ""
				}
				return string(b)
			}
		}
	}
	return ""
}

// StripToken removes from h, the headers of a request hearth passes on to
// a sandbox, every place BearerToken reads a token from: Authorization,
// and the "bearer." subprotocols of Sec-WebSocket-Protocol (the others
// stay). The caller's token never reaches a sandbox.
func StripToken(h http.Header) {
	h.Del("Authorization")
	var kept []string
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, bearerProtocol) {
				kept = append(kept, p)
			}
		}
	}
	h.Del("Sec-WebSocket-Protocol")
	if len(kept) > 0 {
		h.Set("Sec-WebSocket-Protocol", strings.Join(kept, ", "))
	}
}

// WebSocketProtocol is the subprotocol a WebSocket door selects when the
// client offers it, beside its token as "bearer.<base64url>": a browser
// that offers subprotocols fails a handshake that selects none.
const WebSocketProtocol = "hearth.v1"

// bearerProtocol prefixes a token sent as a WebSocket subprotocol.
const bearerProtocol = "bearer."
