package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// Door returns the door of /mcp, the Streamable HTTP transport, for
// door.Chain.Handler. The chain authenticates every request (a missing or
// bad token is 401 with `WWW-Authenticate: Bearer` and the API's error
// body) and holds one of the caller's connections while it lasts: a GET is
// a long-lived stream, a POST lasts as long as its tool call. The chain
// audits only the requests it refuses; the door audits each tool call
// (Options.Audit). Every method: the SDK answers the ones it does not
// take.
func (s *Server) Door() *door.Door {
	h := s.Handler()
	return &door.Door{Name: sandbox.DoorMCP, Prefix: "/mcp", AuditsCalls: true, Routes: []door.Route{{
		Pattern: "/mcp", Verb: "mcp", Stream: true,
		Handle: func(w http.ResponseWriter, r *http.Request, _ sandbox.Principal) error {
			h.ServeHTTP(w, r)
			return nil
		},
	}}}
}

// Handler returns the Streamable HTTP handler of the door, which serves
// the caller the door chain authenticated (door.PrincipalOf; Door is the
// route): a request without one is refused as unauthenticated. A session's
// tools act as the principal of the token that opened it, and a request
// for that session with another token is refused (403). A request with an
// Origin header is refused (403) unless the origin is the handler's own,
// localhost's, or in Options.AllowedOrigins; one without (a client that is
// not a browser) is served. No OAuth metadata is advertised: hearth has no
// authorization server, and a client that saw some would try OAuth instead
// of the token it was given.
//
// Bodies are read only after the token is checked, and bounded
// (Options.MaxBodyBytes: a larger Content-Length is 413 too_large before a
// byte is read, a chunked body is cut at the limit); a caller holding
// Options.MaxSessions sessions is refused another (429 rate_limited).
func (s *Server) Handler() http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		p, ok := door.PrincipalOf(r.Context())
		if !ok {
			return nil // unreachable: ServeHTTP below checked it
		}
		srv := s.For(p)
		if slot, ok := r.Context().Value(slotKey{}).(*sessionSlot); ok {
			slot.add(srv)
		}
		return srv
	}, &mcp.StreamableHTTPOptions{Logger: s.log, SessionTimeout: s.opts.SessionTimeout, MaxRequestBodyBytes: s.opts.MaxBodyBytes})
	// The SDK binds a session to TokenInfo.UserID, which it reads from
	// the context RequireBearerToken fills in.
	bind := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		p, _ := door.PrincipalOf(ctx)
		return &auth.TokenInfo{UserID: tokenIdentity(p)}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(sdk)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := door.PrincipalOf(r.Context())
		if !ok {
			door.WriteError(w, r, sandbox.Errorf(sandbox.CodeUnauthenticated, "missing or invalid token").
				WithHint("serve the MCP door through the door chain (door.Chain.Handler with Server.Door)"))
			return
		}
		if !s.originAllowed(r) {
			door.WriteError(w, r, sandbox.Errorf(sandbox.CodePermissionDenied, "origin %s may not call this server", r.Header.Get("Origin")).
				WithHint("call it from a client that is not a browser, or ask the operator to allow the origin"))
			return
		}
		if err := s.readBody(w, r); err != nil {
			door.WriteError(w, r, err)
			return
		}
		ctx := r.Context()
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" { // a new session
			slot, err := s.sessions.reserve(tokenIdentity(p))
			if err != nil {
				door.WriteError(w, r, err)
				return
			}
			defer slot.done()
			ctx = context.WithValue(ctx, slotKey{}, slot)
		}
		bind.ServeHTTP(w, r.WithContext(ctx))
	})
}

// readBody bounds r's body by Options.MaxBodyBytes with the door's error:
// a Content-Length over the limit is refused before a byte is read; a body
// of unknown length (chunked) is read here, at most the limit, and the SDK
// then reads the copy.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) *sandbox.Error {
	const hint = "keep a tool call's arguments small: put data in files in the sandbox"
	limit := s.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return door.TooLarge(r.ContentLength, limit, hint)
	}
	if r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody {
		// Within the limit, as its length says: the SDK reads it, bounded
		// by the same limit (StreamableHTTPOptions.MaxRequestBodyBytes).
		// Reading it here first made tool calls stall now and then, under
		// load, until the client gave up (the MCP conformance suite's
		// 60 s timeouts).
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return door.TooLarge(-1, limit, hint)
	case err != nil:
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "reading the request body: %v", err).WithHint("send the whole request again")
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

type slotKey struct{}

// sessionLimits counts the HTTP sessions each caller holds, to bound them:
// each holds an MCP server and the SDK's state for it until the client
// closes it or it idles out. A session counts once the request that
// opened it has been answered, for as long as its server has it; requests
// opening sessions at the same time may pass the limit by their number,
// which the caller's connection limit bounds. (Counting those requests
// too refused a client's second session now and then: a client's first
// can still be in flight when its next begins.)
type sessionLimits struct {
	max int
	mu  sync.Mutex
	by  map[string]*callerSessions
}

type callerSessions struct {
	opening int           // requests opening a session, now
	servers []*mcp.Server // the servers of the caller's opened sessions
}

func newSessionLimits(max int) *sessionLimits {
	return &sessionLimits{max: max, by: map[string]*callerSessions{}}
}

// reserve takes a slot for a session of caller, or refuses with
// rate_limited (details limit and current_count) when the caller holds
// its limit. The slot's done must be called when the request ends.
func (l *sessionLimits) reserve(caller string) (*sessionSlot, *sandbox.Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.by[caller]
	if c == nil {
		c = &callerSessions{}
		l.by[caller] = c
	}
	c.servers = slices.DeleteFunc(c.servers, func(srv *mcp.Server) bool {
		for range srv.Sessions() {
			return false
		}
		return true // closed or never opened
	})
	if n := len(c.servers); n >= l.max {
		return nil, sandbox.Errorf(sandbox.CodeRateLimited, "too many MCP sessions: this caller already holds %d of its %d", n, l.max).
			With("limit", l.max).With("current_count", n).
			WithHint("close a session (DELETE /mcp with its Mcp-Session-Id) or let one idle out; the operator sets the limit with `hearth serve --max-connections`")
	}
	c.opening++
	return &sessionSlot{l: l, caller: caller}, nil
}

// sessionSlot is one request opening a session: the servers the SDK asked
// for while serving it.
type sessionSlot struct {
	l       *sessionLimits
	caller  string
	mu      sync.Mutex
	servers []*mcp.Server
}

func (s *sessionSlot) add(srv *mcp.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.servers = append(s.servers, srv)
}

// done ends the request: its servers count from now on as long as they
// hold a session.
func (s *sessionSlot) done() {
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	c := s.l.by[s.caller]
	c.opening--
	c.servers = append(c.servers, servers...)
	if c.opening == 0 && len(c.servers) == 0 {
		delete(s.l.by, s.caller)
	}
}

// tokenIdentity is what a session is bound to: the token that opened it.
func tokenIdentity(p sandbox.Principal) string {
	if p.TokenID != "" {
		return "token:" + p.TokenID
	}
	return "principal:" + p.Tenant + "/" + p.Agent + "/" + string(p.Role)
}

// originAllowed reports whether r may be served given its Origin header:
// absent, the request's own host, a loopback host, or an allowed origin.
func (s *Server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if slices.Contains(s.opts.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if u.Host == r.Host {
		return true
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
