package mcpserver

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/sandbox"
)

// Handler returns the Streamable HTTP handler of the door, for /mcp. Every
// request must carry `Authorization: Bearer <token>`, a token of the API:
// a missing or bad one is 401 with `WWW-Authenticate: Bearer` and the API's
// error body. A session's tools act as the principal of the token that
// opened it, and a request for that session with another token is refused
// (403). A request with an Origin header is refused (403) unless the origin
// is the handler's own, localhost's, or in Options.AllowedOrigins; one
// without (a client that is not a browser) is served. No OAuth metadata is
// advertised: hearth has no authorization server, and a client that saw
// some would try OAuth instead of the token it was given.
func (s *Server) Handler() http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		p, ok := r.Context().Value(principalKey{}).(sandbox.Principal)
		if !ok {
			return nil // unreachable: ServeHTTP below put it there
		}
		return s.For(p)
	}, &mcp.StreamableHTTPOptions{Logger: s.log, SessionTimeout: s.opts.SessionTimeout})
	// The SDK binds a session to TokenInfo.UserID, which it reads from
	// the context RequireBearerToken fills in.
	bind := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		p, _ := ctx.Value(principalKey{}).(sandbox.Principal)
		return &auth.TokenInfo{UserID: tokenIdentity(p)}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(sdk)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.originAllowed(r) {
			writeError(w, sandbox.Errorf(sandbox.CodePermissionDenied, "origin %s may not call this server", r.Header.Get("Origin")).
				WithHint("call it from a client that is not a browser, or ask the operator to allow the origin"))
			return
		}
		p, err := s.svc.Authenticate(r.Context(), bearerToken(r))
		if err != nil {
			writeError(w, s.publicError(r.Context(), "authenticate", err))
			return
		}
		bind.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

type principalKey struct{}

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

// bearerToken returns the token of an `Authorization: Bearer <token>`
// header, or "", which Authenticate refuses like any bad token.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// writeError answers e as the API does: the body {"error": {...}} with the
// status of its code, and `WWW-Authenticate: Bearer` on a 401.
func writeError(w http.ResponseWriter, e *sandbox.Error) {
	status := e.Code.HTTPStatus()
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e.Body())
}
