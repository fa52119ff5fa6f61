package door

import (
	"net"
	"net/http"
	"sync"

	"github.com/hearth/hearth/sandbox"
)

// DefaultMaxConnections is Options.MaxConnections when zero: far above
// what an agent or a person does at once, far below what exhausts the
// daemon.
const DefaultMaxConnections = 64

// connLimits bounds the long-lived connections each caller holds at once:
// exec streams, file transfers, proxied requests (a sandbox URL, Sprites'
// TCP proxy) and MCP requests, the calls that hold a goroutine, buffers and
// a connection into a sandbox for as long as the caller likes. A caller is
// a token; an anonymous caller of a public port is its address. One
// caller at its limit is refused (rate_limited); every other caller is
// unaffected.
type connLimits struct {
	max  int
	mu   sync.Mutex
	held map[string]int
}

func newConnLimits(max int) *connLimits {
	return &connLimits{max: max, held: map[string]int{}}
}

// acquire takes one of caller's connections, or refuses with
// rate_limited (details limit and current_count) when caller holds its
// limit. release gives it back; call it once.
func (l *connLimits) acquire(caller string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.held[caller]; n >= l.max {
		return nil, sandbox.Errorf(sandbox.CodeRateLimited, "too many connections: this caller already holds %d of its %d concurrent connections (exec streams, file transfers, proxied requests, MCP requests)", n, l.max).
			With("limit", l.max).With("current_count", n).
			WithHint("wait for one to end, or close one; the operator sets the limit with `hearth serve --max-connections`")
	}
	l.held[caller]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.held[caller]--; l.held[caller] <= 0 {
				delete(l.held, caller)
			}
		})
	}, nil
}

// callerKey is who holds a connection: the token of p, or, for a caller
// without one (a public port's visitor), "addr:" and r's remote address.
func callerKey(r *http.Request, p sandbox.Principal) string {
	switch {
	case p.TokenID != "":
		return "token:" + p.TokenID
	case p.Role != "":
		return "principal:" + p.Tenant + "/" + p.Agent + "/" + string(p.Role)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

// Hold takes one of the caller's connections for r's call, answering the
// refusal itself (ok false: the call ends): Route.Stream, for a handler
// that must check the request first. The caller defers release.
func Hold(w http.ResponseWriter, r *http.Request, p sandbox.Principal) (release func(), ok bool) {
	c := callOf(r)
	if c == nil {
		panic("door.Hold outside the chain")
	}
	release, err := c.chain.conns.acquire(callerKey(r, p))
	if err != nil {
		WriteError(w, r, err)
		return nil, false
	}
	return release, true
}
