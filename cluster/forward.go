package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// Headers of a call one node forwards to another. The caller's own
// headers, its Authorization among them, go through unchanged: the node
// that serves the call authenticates the caller itself, against the
// store every node shares, so a node's credential vouches for the hop
// only, never for who is calling.
const (
	// HeaderNode names the forwarding node.
	HeaderNode = "Hearth-Node"
	// HeaderCredential carries its credential (Member.Secret).
	HeaderCredential = "Hearth-Node-Credential"
)

// Forwarder sends calls on another node's sandboxes to that node: the
// door chain's forwarder (door.Forwarder).
type Forwarder struct {
	m *Member
	// nodeOf is lifecycle's Sandboxes.NodeOf.
	nodeOf    func(ctx context.Context, p sandbox.Principal, ref string) string
	transport http.RoundTripper
	// wakeMoves: the store's nodes may move a sandbox to wake it (see
	// SetWakeMoves).
	wakeMoves bool

	mu      sync.Mutex
	targets map[string]cachedTarget // by node: what target last found
}

// cachedTarget is a live node's address as the store said at a time:
// reused for targetTTL, a fraction of the time a node takes to count as
// down, so that a call forwarded costs no store round trips for its
// target. Why a node cannot be reached is never reused: a node that comes
// back is reached at once.
type cachedTarget struct {
	url *url.URL
	at  time.Time
}

// targetTTL is how long a node's target is reused.
const targetTTL = time.Second

// NewForwarder returns the forwarder of m's node; nodeOf says which node
// runs a sandbox a caller names, when another does
// (lifecycle.Sandboxes.NodeOf).
func NewForwarder(m *Member, nodeOf func(ctx context.Context, p sandbox.Principal, ref string) string) *Forwarder {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // node to node, never through the environment's proxy
	t.MaxIdleConnsPerHost = 64
	return &Forwarder{m: m, nodeOf: nodeOf, transport: t}
}

// SetWakeMoves says, before f forwards anything, that the store's nodes
// may move a sandbox to wake it (a fleet's nodes: lifecycle's
// Options.Fits): only then does Forward keep bodies to send again after
// such a move, and wake a sandbox ahead of a call whose body it cannot
// keep.
func (f *Forwarder) SetWakeMoves(on bool) { f.wakeMoves = on }

// NodeOf returns the node that runs the sandbox ref names for p when it
// is not this one, "" otherwise.
func (f *Forwarder) NodeOf(ctx context.Context, p sandbox.Principal, ref string) string {
	return f.nodeOf(ctx, p, ref)
}

// Verify returns the node that forwarded r, checking its credential: a
// call that names a node must prove it, or is refused (unauthenticated);
// "" for a call no node forwarded.
func (f *Forwarder) Verify(r *http.Request) (string, error) {
	node := r.Header.Get(HeaderNode)
	if node == "" && r.Header.Get(HeaderCredential) == "" {
		return "", nil
	}
	ok, err := f.m.Verify(r.Context(), node, r.Header.Get(HeaderCredential))
	if err != nil && err != ErrUnknownNode {
		return "", sandbox.Errorf(sandbox.CodeInternal, "verify the credential of node %q: %v", node, err)
	}
	if !ok {
		return "", sandbox.Errorf(sandbox.CodeUnauthenticated, "the call names node %q with a credential that is not its own", node).
			WithHint("only hearth daemons of this store forward calls to each other")
	}
	return node, nil
}

// Forward serves r on node, streaming both ways (WebSocket upgrades
// included). It returns an error, having written nothing, when node is
// gone (its heartbeats stopped) or cannot be reached: the caller answers
// it. Where nodes move sandboxes to wake them (SetWakeMoves), a call the
// node answers by moving the sandbox (door.HeaderMovedTo) is sent once
// more, to the sandbox's new node, when it has no body or one of at most
// MaxReplayBody bytes, which Forward reads before sending; ahead of a
// call on a sandbox ({name}) with a larger or streamed body, Forward
// wakes the sandbox as the caller (POST …/wake), and sends the call to
// the node the wake moved it to, if it moved.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, node string) error {
	if f.wakeMoves {
		if err := replayable(r); err != nil {
			return err
		}
		node = f.wakeAhead(r, node)
	}
	target, err := f.target(r.Context(), node)
	if err != nil {
		return err
	}
	var failed error
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // a sandbox's own host name routes there too
			pr.SetXForwarded()
			f.sign(pr.Out.Header)
			// The node's span of the call is a child of this one.
			otel.GetTextMapPropagator().Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
		},
		Transport:     movedRetry{f},
		FlushInterval: -1,
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
			failed = sandbox.Errorf(sandbox.CodeUnavailable, "node %s, which runs the sandbox, does not answer at %s: %v", node, target.Host, err).
				WithHint("retry shortly; if it persists, the node is down (see GET /v1/health)").With("node", node).With("retry_after_seconds", 1)
		},
	}
	// A proxy reads the caller's body while the owner's answer streams
	// back. Without full duplex, this node's server would close the body
	// once the owner's header went out, and the transport's last read of
	// it (the check that a body ends at its Content-Length) would then
	// fail and tear the connection down mid-answer.
	// Every writer a door hands here unwraps to the server's own.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		return sandbox.Errorf(sandbox.CodeInternal, "forward to node %s: %v", node, err)
	}
	proxy.ServeHTTP(w, r)
	return failed
}

// wakeAhead wakes the sandbox r names on node, as r's caller, when r has
// a body Forward cannot send again, and returns the node the sandbox is
// on then: the one the wake moved it to, or node. Whatever else the wake
// answers, the call itself answers it.
func (f *Forwarder) wakeAhead(r *http.Request, node string) string {
	ref := r.PathValue("name")
	if r.Body == nil || r.Body == http.NoBody || r.GetBody != nil || ref == "" {
		return node
	}
	target, err := f.target(r.Context(), node)
	if err != nil {
		return node
	}
	wake, err := http.NewRequestWithContext(r.Context(), http.MethodPost, target.JoinPath("/v1/sandboxes", ref, "wake").String(), nil)
	if err != nil {
		return node
	}
	wake.Header.Set("Authorization", r.Header.Get("Authorization"))
	f.sign(wake.Header)
	resp, err := f.transport.RoundTrip(wake)
	if err != nil {
		return node
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if to := resp.Header.Get(door.HeaderMovedTo); resp.StatusCode == http.StatusServiceUnavailable && to != "" {
		return to
	}
	return node
}

// MaxReplayBody is the largest request body Forward keeps to send again
// to a sandbox's new node.
const MaxReplayBody = 1 << 20

// replayable reads r's body into memory when its length is known and at
// most MaxReplayBody, so that r.GetBody can send it again.
func replayable(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 || r.ContentLength > MaxReplayBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength))
	if err == nil && int64(len(b)) < r.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "read the request's body of %d bytes: %v", r.ContentLength, err).
			WithHint("send the whole body again")
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return nil
}

// target is node's base URL, or unavailable when it is gone, as the
// store said at most targetTTL ago.
func (f *Forwarder) target(ctx context.Context, node string) (*url.URL, error) {
	f.mu.Lock()
	c, ok := f.targets[node]
	f.mu.Unlock()
	if ok && time.Since(c.at) < targetTTL {
		return c.url, nil
	}
	u, err := f.lookup(ctx, node)
	if err == nil {
		f.mu.Lock()
		if f.targets == nil {
			f.targets = map[string]cachedTarget{}
		}
		f.targets[node] = cachedTarget{url: u, at: time.Now()}
		f.mu.Unlock()
	}
	return u, err
}

// lookup is target's answer from the store.
func (f *Forwarder) lookup(ctx context.Context, node string) (*url.URL, error) {
	n, err := f.m.opts.Store.Nodes().Get(ctx, node)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "node %s, which runs the sandbox, is not known to the store: %v", node, err).
			WithHint("the node may have been removed; an operator can see the nodes in GET /v1/health").With("node", node)
	}
	now, err := f.m.opts.Store.Nodes().Now(ctx)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "the store does not answer: %v", err).WithHint("retry shortly").With("retry_after_seconds", 1)
	}
	if age := now.Sub(n.HeartbeatAt); age > f.m.opts.DeadAfter {
		return nil, gone(n.Name, n.HeartbeatAt, age)
	}
	if n.Address == "" {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "node %s, which runs the sandbox, takes no forwarded calls (it has no address)", node).
			WithHint("restart node %s with an address the other daemons reach (--listen)", node).With("node", node)
	}
	return &url.URL{Scheme: "http", Host: n.Address}, nil
}

// gone is the error of a call on a sandbox whose node stopped
// heartbeating at last, age ago.
func gone(node string, last time.Time, age time.Duration) error {
	return sandbox.Errorf(sandbox.CodeUnavailable, "node %s, which runs the sandbox, stopped heartbeating %s ago (at %s); its sandboxes are unavailable until it is back",
		node, age.Round(time.Second), last.UTC().Format(time.RFC3339)).
		WithHint("wait for node %s to restart, or ask an operator", node).
		With("node", node).With("heartbeat_at", last.UTC().Format(time.RFC3339)).With("reason", "node_down")
}

// String names the forwarder's node, for logs.
func (f *Forwarder) String() string { return fmt.Sprintf("forwarder of node %s", f.m.Node()) }

// NodeClient returns node's base URL and a client whose requests carry
// this node's credential, or unavailable when node is gone: for a door
// that forwards by calling the other node itself (MCP's tool calls).
func (f *Forwarder) NodeClient(ctx context.Context, node string) (*url.URL, *http.Client, error) {
	target, err := f.target(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	return target, &http.Client{Transport: signed{f}}, nil
}

// signed is the forwarder's transport, adding its node's headers.
type signed struct{ f *Forwarder }

func (s signed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	s.f.sign(r.Header)
	return s.f.transport.RoundTrip(r)
}

// sign sets the headers that prove a call comes from this node.
func (f *Forwarder) sign(h http.Header) {
	h.Set(HeaderNode, f.m.Node())
	h.Set(HeaderCredential, f.m.Secret())
}

// movedRetry is Forward's transport: a call the node answers with a move
// (its sandbox did not fit there awake and moved to wake: lifecycle's
// Options.Fits), which the node's door marks with door.HeaderMovedTo, is
// sent once more, to that node, when it has no body or one it can send
// again (replayable). A call with a body that streamed gets the answer,
// whose hint says to retry. The header, not the body, decides: a
// sandbox's own answers (its URL) never carry it.
type movedRetry struct{ f *Forwarder }

func (t movedRetry) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.f.transport.RoundTrip(r)
	bodied := r.Body != nil && r.Body != http.NoBody
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || bodied && r.GetBody == nil {
		return resp, err
	}
	to := resp.Header.Get(door.HeaderMovedTo)
	if to == "" {
		return resp, nil
	}
	target, err := t.f.target(r.Context(), to)
	if err != nil {
		return resp, nil
	}
	again := r.Clone(r.Context())
	again.URL.Scheme, again.URL.Host = target.Scheme, target.Host
	if bodied {
		if again.Body, err = r.GetBody(); err != nil {
			return resp, nil
		}
	}
	resp.Body.Close()
	return t.f.transport.RoundTrip(again)
}
