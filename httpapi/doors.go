package httpapi

import (
	"net/http"
	"strings"

	"github.com/hearth/hearth/sandbox"
)

// Door is a set of routes that speak a wire dialect of their own, such as
// the Sprites-compatible API (package spritesapi). The API serves them on
// its listener like its own routes: it authenticates each call with the
// same tokens, then records it in the audit log and the metrics under
// Name. Only the shape of what goes over the wire is the door's: its
// errors, authentication failures included, are written by WriteError.
type Door struct {
	// Name is the door the audit log and the metrics record, e.g.
	// "sprites".
	Name string
	// Prefix is the path under which every route of the door lies, e.g.
	// "/v1/sprites": a request under it that no route takes is the door's
	// not_found (or, for a path a route takes with another method, its 405).
	Prefix string
	// Header is set on every response of the door, errors included.
	Header http.Header
	// Routes are the door's routes.
	Routes []Route
	// WriteError answers e, the public form of a call's error (internal
	// causes already logged and hidden), with status.
	WriteError func(w http.ResponseWriter, r *http.Request, status int, e *sandbox.Error)
}

// Route is one route of a Door.
type Route struct {
	// Pattern is an http.ServeMux pattern, method included.
	Pattern string
	// Verb is the operation's stable name in the audit log and the
	// metrics; a route that does what a native route does uses its verb
	// ("sandbox.create").
	Verb string
	// Handle serves a call by the authenticated p. An error it returns is
	// answered by the door's WriteError, so it must return one only before
	// it has written anything; once it has, it records the outcome with
	// NoteCode instead.
	Handle func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error
	// Visible, for a route whose path names a sandbox ({name}) and that
	// reads a body or WebSocket messages about it, has the API check that
	// the caller may see that sandbox before Handle runs: a call on
	// another's sandbox is refused before a byte of it is read.
	Visible bool
	// Stream marks a long-lived call (a WebSocket, a file transfer, a
	// command's output): it holds one of the caller's connections
	// (Options.MaxConnections) while Handle runs, and is refused with
	// rate_limited when the caller holds all of them.
	Stream bool
}

// BodyHint is what a door's too_large error for a JSON body advises.
const BodyHint = "JSON requests are small; file content goes in the body of a file write"

// NoteCode records code as the outcome of r's call, for a handler of a
// Door route that answered an error itself (within a stream, say).
func NoteCode(r *http.Request, code sandbox.Code) { noteCode(r, code) }

// NoteSandbox names the sandbox of r's call for the audit log when r's
// path does not (a create's).
func NoteSandbox(r *http.Request, name string) {
	if c := callOf(r); c != nil {
		c.sandbox = name
	}
}

// mountDoor registers d's routes. A door's queries are its own dialect's:
// they are not checked here.
func (s *server) mountDoor(d *Door) {
	for _, rt := range d.Routes {
		h := func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
			if rt.Visible && !s.visible(w, r, p) {
				return
			}
			if rt.Stream {
				release, ok := s.holdConn(w, r, p)
				if !ok {
					return
				}
				defer release()
			}
			if err := rt.Handle(w, r, p); err != nil {
				s.writeError(w, r, err)
			}
		}
		s.mux.Handle(rt.Pattern, s.observe(rt.Verb, d.Name, s.inDoor(d, s.authedQuery(h))))
	}
}

// inDoor marks the calls h serves as d's, so that writeError answers them
// in d's dialect, and sets d's headers.
func (s *server) inDoor(d *Door, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range d.Header {
			w.Header()[k] = v
		}
		if c := callOf(r); c != nil {
			c.door = d
		}
		h.ServeHTTP(w, r)
	})
}

// doorOf returns the door whose prefix holds path, or nil.
func (s *server) doorOf(path string) *Door {
	for _, d := range s.opts.Doors {
		if path == d.Prefix || strings.HasPrefix(path, d.Prefix+"/") {
			return d
		}
	}
	return nil
}
