package door

import (
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Forwarding: a call on a sandbox that another node runs is sent there
// (Options.Forward), where that node's chain serves it as its own and
// authenticates the caller itself against the store every node shares.
// This node authenticates the caller only to resolve the sandbox the
// call names, so for a token it authenticated within recentTTL it
// decides from that principal without asking the store again: a token
// revoked meanwhile is refused by the node the call goes to, and a call
// this node serves itself is always authenticated afresh.

// recentTTL is how long a principal is reused to decide where a call
// goes.
const recentTTL = time.Second

// recentMax bounds the principals kept; when full, the table is emptied.
const recentMax = 4096

// recent are the principals of the tokens authenticated lately, by the
// SHA-256 of the token.
type recent struct {
	mu sync.Mutex
	m  map[[32]byte]recentPrincipal
}

type recentPrincipal struct {
	p  sandbox.Principal
	at time.Time
}

// remember keeps p as token's principal.
func (rc *recent) remember(token string, p sandbox.Principal) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.m == nil || len(rc.m) >= recentMax {
		rc.m = map[[32]byte]recentPrincipal{}
	}
	rc.m[sha256.Sum256([]byte(token))] = recentPrincipal{p: p, at: time.Now()}
}

// lookup returns token's principal if it was authenticated within
// recentTTL.
func (rc *recent) lookup(token string) (sandbox.Principal, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e, ok := rc.m[sha256.Sum256([]byte(token))]
	if !ok || time.Since(e.at) >= recentTTL {
		return sandbox.Principal{}, false
	}
	return e.p, true
}

// forwardEarly forwards the call before it is authenticated here, when
// its token was authenticated lately and the sandbox it names runs on
// another node; it reports whether it did.
func (c *Chain) forwardEarly(w http.ResponseWriter, r *http.Request, rt Route) bool {
	token := BearerToken(r)
	if c.opts.Forward == nil || rt.Auth == AuthNone || token == "" {
		return false
	}
	p, ok := c.recent.lookup(token)
	if !ok || !c.forward(w, r, rt, p) {
		return false
	}
	if cl := callOf(r); cl != nil && cl.sentTo == "" {
		// Not sent (the node is down): this node audits the refusal, as
		// the caller it authenticated a moment ago.
		cl.principal, cl.authenticated = p, true
	}
	return true
}
