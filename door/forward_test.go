package door_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// forwarder says "elsewhere" runs on node n2, proves a node by the
// credential "node-secret", and counts what it forwards; down makes
// Forward fail as for a node that stopped heartbeating.
type forwarder struct {
	forwarded atomic.Int64
	down      atomic.Bool
}

func (f *forwarder) Verify(r *http.Request) (string, error) {
	switch r.Header.Get("Hearth-Node-Credential") {
	case "":
		return "", nil
	case "node-secret":
		return "n1", nil
	}
	return "", sandbox.Errorf(sandbox.CodeUnauthenticated, "bad node credential")
}

func (f *forwarder) NodeOf(_ context.Context, p sandbox.Principal, ref string) string {
	if p.Tenant == "t1" && ref == "elsewhere" {
		return "n2"
	}
	return ""
}

func (f *forwarder) Forward(w http.ResponseWriter, _ *http.Request, node string) error {
	if f.down.Load() {
		return sandbox.Errorf(sandbox.CodeUnavailable, "node %s stopped heartbeating", node)
	}
	f.forwarded.Add(1)
	w.WriteHeader(http.StatusAccepted) // what n2 answered
	return nil
}

// TestForward: a call on another node's sandbox is forwarded, not served
// here, and not audited here (the node it goes to audits it); a token
// authenticated within the last second is not asked of the store again
// to forward; a call another node forwarded with its credential is served
// here, never sent on; a bad node credential is refused before anything;
// a node that cannot be reached answers unavailable, audited here.
func TestForward(t *testing.T) {
	ten, rec, fwd := &tenancy{}, &recorder{}, &forwarder{}
	var ran atomic.Int64
	handle := func(w http.ResponseWriter, _ *http.Request, _ sandbox.Principal) error {
		ran.Add(1)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	h := door.New(ten, sandboxes{}, door.Options{Audit: rec, Forward: fwd}).Handler(&door.Door{Routes: []door.Route{
		{Pattern: "GET /v1/x/{name}", Verb: "x.get", Handle: handle}}})
	call := func(name, token, credential string) int {
		r, _ := http.NewRequest("GET", "/v1/x/"+name, nil)
		r.Header.Set("Authorization", "Bearer "+token)
		if credential != "" {
			r.Header.Set("Hearth-Node", "n1")
			r.Header.Set("Hearth-Node-Credential", credential)
		}
		w := &statusWriter{header: http.Header{}}
		h.ServeHTTP(w, r)
		return w.status
	}
	if got := call("elsewhere", "good", ""); got != http.StatusAccepted || fwd.forwarded.Load() != 1 || ran.Load() != 0 {
		t.Fatalf("a call on another node's sandbox = %d, forwarded %d, served here %d; want forwarded only", got, fwd.forwarded.Load(), ran.Load())
	}
	before := ten.calls.Load()
	if got := call("elsewhere", "good", ""); got != http.StatusAccepted || ten.calls.Load() != before {
		t.Errorf("a second call within a second = %d with %d more authentications; want forwarded with none", got, ten.calls.Load()-before)
	}
	if got := call("mine", "good", ""); got != http.StatusNoContent || ten.calls.Load() != before+1 {
		t.Errorf("a call served here = %d with %d authentications; want served, authenticated afresh", got, ten.calls.Load()-before)
	}
	if got := call("elsewhere", "good", "node-secret"); got != http.StatusNoContent || fwd.forwarded.Load() != 2 {
		t.Errorf("a call another node forwarded = %d (forwarded %d in all); want served here, not sent on", got, fwd.forwarded.Load())
	}
	if got := call("mine", "good", "forged"); got != http.StatusUnauthorized || ran.Load() != 2 {
		t.Errorf("a forged node credential = %d (served %d in all); want 401, not served", got, ran.Load())
	}
	fwd.down.Store(true)
	if got := call("elsewhere", "good", ""); got != http.StatusServiceUnavailable {
		t.Errorf("a call on a sandbox of a node that is down = %d, want 503", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var verbs []string
	for _, e := range rec.events {
		verbs = append(verbs, string(e.Code))
	}
	// Served here: mine, the forwarded-in call, the forged one; and the
	// unavailable one. The two forwarded out are the other node's.
	if len(rec.events) != 4 || rec.events[3].Code != sandbox.CodeUnavailable || rec.events[3].TokenID != "tok" {
		t.Errorf("audit codes = %q (%d events); want 4, the last unavailable and attributed", verbs, len(rec.events))
	}
}

// TestForwardImageCalls: a call whose body names the sandbox it acts on
// (Route.Target) goes to that sandbox's node, its body intact; a call
// that makes an image goes to the node Options.ImageNode names, and an
// error of ImageNode is the answer; without ImageNode both makers and a
// call on a sandbox served here run here.
func TestForwardImageCalls(t *testing.T) {
	fwd := &forwarder{}
	var ran atomic.Int64
	var bodies []string
	handle := func(w http.ResponseWriter, r *http.Request, _ sandbox.Principal) error {
		ran.Add(1)
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	from := func(r *http.Request) string {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		return strings.TrimPrefix(string(b), "from:")
	}
	routes := []door.Route{
		{Pattern: "POST /v1/make", Verb: "x.make", MakesImage: true, Handle: handle},
		{Pattern: "POST /v1/of", Verb: "x.of", Target: from, Handle: handle},
	}
	imageNode := func(context.Context) (string, error) { return "n3", nil }
	call := func(h http.Handler, path, body string) int {
		r, _ := http.NewRequest("POST", path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer good")
		w := &statusWriter{header: http.Header{}}
		h.ServeHTTP(w, r)
		return w.status
	}
	cp := door.New(&tenancy{}, sandboxes{}, door.Options{Forward: fwd, ImageNode: imageNode}).Handler(&door.Door{Routes: routes})
	if got := call(cp, "/v1/make", "pull"); got != http.StatusAccepted || fwd.forwarded.Load() != 1 || ran.Load() != 0 {
		t.Errorf("a maker on a daemon with ImageNode = %d, forwarded %d, served %d; want forwarded only", got, fwd.forwarded.Load(), ran.Load())
	}
	if got := call(cp, "/v1/of", "from:elsewhere"); got != http.StatusAccepted || fwd.forwarded.Load() != 2 || ran.Load() != 0 {
		t.Errorf("a call whose body names another node's sandbox = %d, forwarded %d, served %d; want forwarded only", got, fwd.forwarded.Load(), ran.Load())
	}
	if got := call(cp, "/v1/of", "from:mine"); got != http.StatusNoContent || len(bodies) != 1 || bodies[0] != "from:mine" {
		t.Errorf("a call whose body names a sandbox here = %d, bodies %q; want served with its body whole", got, bodies)
	}
	none := door.New(&tenancy{}, sandboxes{}, door.Options{Forward: fwd, ImageNode: func(context.Context) (string, error) {
		return "", sandbox.Errorf(sandbox.CodeUnavailable, "no node")
	}}).Handler(&door.Door{Routes: routes})
	if got := call(none, "/v1/make", "pull"); got != http.StatusServiceUnavailable {
		t.Errorf("a maker with no node to make it = %d, want 503", got)
	}
	node := door.New(&tenancy{}, sandboxes{}, door.Options{Forward: fwd}).Handler(&door.Door{Routes: routes})
	if got := call(node, "/v1/make", "pull"); got != http.StatusNoContent || fwd.forwarded.Load() != 2 {
		t.Errorf("a maker on a node = %d, forwarded %d in all; want served here", got, fwd.forwarded.Load())
	}
}

// TestAuthNode: a node-only route serves a call another node made with
// its credential, naming that node, and refuses every other caller,
// whatever token it sends (an operator's included), before the handler.
func TestAuthNode(t *testing.T) {
	var from []string
	h := door.New(&tenancy{}, sandboxes{}, door.Options{Forward: &forwarder{}}).Handler(&door.Door{Routes: []door.Route{
		{Pattern: "PUT /v1/internal/x/{id}", Verb: "x.put", Auth: door.AuthNode, Handle: func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
			from = append(from, door.FromNode(r)+"/"+string(p.Role))
			w.WriteHeader(http.StatusNoContent)
			return nil
		}}}})
	for _, c := range []struct {
		token, credential string
		want              int
	}{{"good", "", http.StatusUnauthorized}, {"", "", http.StatusUnauthorized}, {"", "forged", http.StatusUnauthorized}, {"", "node-secret", http.StatusNoContent}} {
		r, _ := http.NewRequest("PUT", "/v1/internal/x/abc", nil)
		if c.token != "" {
			r.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.credential != "" {
			r.Header.Set("Hearth-Node", "n1")
			r.Header.Set("Hearth-Node-Credential", c.credential)
		}
		w := &statusWriter{header: http.Header{}}
		h.ServeHTTP(w, r)
		if w.status != c.want {
			t.Errorf("token %q, node credential %q = %d, want %d", c.token, c.credential, w.status, c.want)
		}
	}
	if len(from) != 1 || from[0] != "n1/" {
		t.Errorf("the handler ran for %q, want once, for node n1 with no principal", from)
	}
}

// statusWriter is a ResponseWriter that keeps the status.
type statusWriter struct {
	header http.Header
	status int
}

func (w *statusWriter) Header() http.Header { return w.header }
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}
func (w *statusWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
