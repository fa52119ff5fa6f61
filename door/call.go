package door

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/hearth/hearth/sandbox"
)

// call is what the chain learns about one call while its handler runs,
// kept in the request's context.
type call struct {
	chain *Chain
	// door serves the call; nil answers in the native dialect.
	door *Door
	// principal is the authenticated caller; zero when authentication
	// failed or the route needs none.
	principal     sandbox.Principal
	authenticated bool
	// sandbox names the sandbox when the path does not: a create's.
	sandbox string
	// code is the error code of the answer; empty for a success.
	code sandbox.Code
	// fromNode: another node forwarded the call here, and proved it
	// (Forwarder.Verify), so it is served here and never forwarded again.
	fromNode bool
	// node names the node that forwarded the call, when fromNode.
	node string
	// sentTo is the node the call was forwarded to, which audits it.
	sentTo string
}

type callKey struct{}

// callOf returns the call of r, or nil outside the chain.
func callOf(r *http.Request) *call {
	c, _ := r.Context().Value(callKey{}).(*call)
	return c
}

// HeaderMovedTo names, on an answer of this daemon (never a sandbox's:
// its URL proxy strips every Hearth- header of what a sandbox answers),
// the node the sandbox moved to, from the error's detail
// sandbox.DetailMovedTo.
const HeaderMovedTo = "Hearth-Moved-To"

// FromNode returns the node that made or forwarded the call r, having
// proved it with its node credential; "" for any other caller.
func FromNode(r *http.Request) string {
	if c := callOf(r); c != nil && c.fromNode {
		return c.node
	}
	return ""
}

// PrincipalOf returns the caller the chain authenticated for the request
// of ctx; ok is false when none was (outside the chain, or a route that
// takes anonymous callers).
func PrincipalOf(ctx context.Context) (p sandbox.Principal, ok bool) {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil || !c.authenticated {
		return sandbox.Principal{}, false
	}
	return c.principal, true
}

// NoteCode records code as the outcome of r's call, for a handler that
// answered an error itself (within a stream, say).
func NoteCode(r *http.Request, code sandbox.Code) {
	if c := callOf(r); c != nil {
		c.code = code
	}
}

// NoteSandbox names the sandbox of r's call for the audit log when r's
// path does not (a create's, a proxied host's).
func NoteSandbox(r *http.Request, name string) {
	if c := callOf(r); c != nil {
		c.sandbox = name
	}
}

// WriteError answers err in the dialect of r's door with the status of
// its code (sandbox.Code.HTTPStatus, or WithStatus's), and records the
// code as the call's outcome. A 401 also carries `WWW-Authenticate:
// Bearer` (RFC 6750 §3); an error with the detail moved_to (a sandbox
// moved to another node to wake) carries HeaderMovedTo, which a
// forwarding node acts on. An error that is not a *sandbox.Error is
// answered as internal and its cause logged, never sent.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	c := callOf(r)
	var chain *Chain
	if c != nil {
		chain = c.chain
	}
	e := chain.publicError(r.Context(), r.Method+" "+r.URL.Path, err)
	NoteCode(r, e.Code)
	status := e.Code.HTTPStatus()
	var se *statusError
	if errors.As(err, &se) {
		status = se.status
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	if to, ok := e.Details[sandbox.DetailMovedTo].(string); ok && to != "" {
		w.Header().Set(HeaderMovedTo, to)
	}
	if c != nil && c.door != nil && c.door.WriteError != nil {
		c.door.WriteError(w, r, status, e)
		return
	}
	WriteJSONError(w, r, status, e)
}

// WriteJSONError is the native dialect's error: the body {"error": {...}}
// (sandbox.ErrorBody) with status, and Retry-After when its details say
// retry_after_seconds. The MCP door's HTTP errors take it too.
func WriteJSONError(w http.ResponseWriter, _ *http.Request, status int, e *sandbox.Error) {
	b, _ := json.Marshal(e.Body())
	if secs, ok := e.Number("retry_after_seconds"); ok {
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// PublicError returns the *sandbox.Error to show for err, within a call
// of the chain (ctx is its request's, or one made from it). An error that
// is not one becomes the opaque internal error and its cause is logged
// (op says where), never sent. When ctx has ended the error is most likely
// the caller going away, and is only noted.
func PublicError(ctx context.Context, op string, err error) *sandbox.Error {
	var chain *Chain
	if c, _ := ctx.Value(callKey{}).(*call); c != nil {
		chain = c.chain
	}
	return chain.publicError(ctx, op, err)
}

// publicError is PublicError; a nil c logs nothing.
func (c *Chain) publicError(ctx context.Context, op string, err error) *sandbox.Error {
	var e *sandbox.Error
	if errors.As(err, &e) {
		return e
	}
	if c != nil && ctx.Err() != nil {
		c.log.Debug("caller went away", "op", op, "err", err)
	} else if c != nil {
		c.log.Error("internal error", "op", op, "err", err)
	}
	return sandbox.AsError(err)
}

// WithStatus answers e with status rather than its code's: 405 and 426
// have no code of their own.
func WithStatus(status int, e *sandbox.Error) error {
	return &statusError{status: status, err: e}
}

type statusError struct {
	status int
	err    *sandbox.Error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }
