// Package gateway is the egress gateway: the HTTP server on the host
// through which a sandbox calls an upstream API with a tenant's secret
// that the sandbox never holds.
//
// # Addressing
//
// A sandbox in network mode "egress" reaches the gateway as
// http://NAME.hearth.internal/PATH, where NAME is a binding of its
// tenant: the daemon's DNS forwarder answers *.hearth.internal with the
// sandbox's gateway address (the host side of its own veth link) and the
// firewall sends its port-80 traffic there to the gateway's port. The
// hop is plain HTTP, on a link that never leaves the host. The gateway
// knows the sandbox by the TCP source address of the connection, which
// the sandbox cannot choose on its own /31 link; the host name (any case,
// with or without a port or a trailing dot: see sandbox.BindingName)
// names the binding.
//
// # TLS
//
// The gateway terminates no TLS from the sandbox: the sandbox speaks plain
// HTTP to it, which is what lets the gateway read and set headers. The
// gateway speaks HTTPS to the upstream, verifying the upstream's
// certificate against the host's root CAs, or plain HTTP when the
// binding's upstream URL is http://. Redirects are not followed: the
// sandbox gets them as they are and decides.
//
// # The secret
//
// The value is added on the way out and scrubbed on the way back. Any
// copy of the bound header the sandbox sends is dropped (whatever its
// case), with Proxy-Authorization, Forwarded and X-Forwarded-*, and the
// gateway sets the header to the route's value. The sandbox's
// Accept-Encoding is not passed on either: the gateway asks for gzip
// itself and decodes it, so that the response it scrubs is plain bytes;
// a response in any other encoding is refused (502). In every response
// header, trailer and body, the secret and the header's full value are
// replaced by "[secret NAME]" (see package scrub), as the response streams:
// the body is passed on as it comes (server-sent events work), less the
// few bytes that could begin a value, and without its Content-Length,
// since scrubbing can change it.
//
// Two limits: an upstream that transforms the value (encodes, escapes or
// splits it) defeats scrubbing, which is a safeguard against echoes; and
// a protocol switch (a WebSocket upgrade, 101) is passed through with its
// response headers scrubbed but its stream, which is no longer HTTP, as
// it is.
//
// # Errors
//
// When the gateway answers itself rather than the upstream, the body is
// the native API's error body, {"error": {"code", "message", "hint",
// "details"}}: with the status of the code for a resolver's error (the
// same as the native API's), 403 for a client that is not a sandbox, 404
// for a host that is not NAME.hearth.internal, 400 for a CONNECT or a
// path with a "." or ".." segment, and 502 (504 for a timeout) when the
// resolver fails otherwise, or the upstream cannot be reached or is at an
// address the gateway may not dial. An answer of the upstream, whatever
// its status, is passed on as it is, scrubbed.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/scrub"
)

// Route is where one request of a sandbox goes.
type Route struct {
	// Upstream is the binding's URL: scheme (http or https), host and an
	// optional path prefix, to which the request's path is appended. The
	// prefix is a scope: a request path with a "." or ".." segment, which
	// could climb out of it, is refused.
	Upstream *url.URL
	// Header is the header the gateway sets, e.g. "Authorization".
	Header string
	// Value is the header's full value, secret included, e.g.
	// "Bearer sk-…".
	Value []byte
	// Secret is the secret's raw value; it and Value are scrubbed from
	// responses.
	Secret []byte
	// SecretName names the secret in "[secret NAME]", where the scrubbed
	// value was.
	SecretName string
}

// Resolver finds the route of a request from the sandbox at client to the
// binding called binding. An error that is a *sandbox.Error (not_found for
// a binding the sandbox's tenant does not have, say) is answered with its
// code's status; any other is logged and answered as an opaque internal
// error.
type Resolver interface {
	Route(ctx context.Context, client netip.Addr, binding string) (Route, error)
}

// Result is what became of one request, for the daemon's logs and
// counters.
type Result struct {
	// Binding is NAME of NAME.hearth.internal; "" when the host was not
	// one.
	Binding string
	// Client is the sandbox's address (the zero Addr when the request's
	// RemoteAddr was not an address).
	Client netip.Addr
	// Upstream is the upstream's host[:port]; "" when no route was found.
	Upstream string
	// Status is the status the sandbox got; 0 when it went away first.
	Status int
	// Bytes counts the response body bytes sent to the sandbox, after
	// scrubbing; an upgraded connection's stream is not counted.
	Bytes int64
	// Code is the error's code when the gateway answered with an error
	// itself; "" when the upstream answered, whatever its status.
	Code sandbox.Code
}

// Options configure a Gateway. The zero value works, but a Gateway without
// a Resolver answers every request with an internal error.
type Options struct {
	// Resolver finds each request's route.
	Resolver Resolver
	// Transport makes the upstream requests. Nil means a clone of
	// http.DefaultTransport that uses no proxy from the environment, with
	// the timeouts below and Deny checked on every connection; a Transport
	// given here dials as it likes and Deny is not consulted.
	Transport http.RoundTripper
	// Allowed reports whether the gateway serves a client address (the
	// daemon passes its sandbox subnet); others get 403. Nil allows all.
	Allowed func(netip.Addr) bool
	// Deny reports whether the gateway must not connect to an upstream
	// address (the daemon passes the private, link-local and loopback
	// ranges). It is checked on each resolved IP as it is dialled, not on
	// the host name, so that a name that resolves to a public address now
	// and to a private one later gains nothing. Nil denies none.
	Deny func(netip.Addr) bool
	// Logger receives the causes of errors that are not shown to the
	// sandbox. Nil discards.
	Logger *slog.Logger
	// OnRequest, if set, is called once per request as it ends.
	OnRequest func(Result)
}

// The default transport's timeouts: connecting and the TLS handshake are
// quick or broken; an API may think for minutes before its first byte (a
// long completion), but not forever.
const (
	dialTimeout           = 10 * time.Second
	tlsHandshakeTimeout   = 10 * time.Second
	responseHeaderTimeout = 5 * time.Minute
	idleConnTimeout       = 90 * time.Second
)

// Gateway is the egress gateway's HTTP handler. It is safe for concurrent
// use.
type Gateway struct {
	opts  Options
	log   *slog.Logger
	proxy *httputil.ReverseProxy
}

var _ http.Handler = (*Gateway)(nil)

// New returns a Gateway configured by opts.
func New(opts Options) *Gateway {
	g := &Gateway{opts: opts, log: opts.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	transport := opts.Transport
	if transport == nil {
		transport = newTransport(opts.Deny)
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      transport,
		FlushInterval:  -1,
		ModifyResponse: modifyResponse,
		ErrorHandler:   g.proxyError,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	return g
}

// newTransport is the default Transport: no proxy (Deny would check the
// proxy's address, not the upstream's), and deny checked on the address
// of every connection.
func newTransport(deny func(netip.Addr) bool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	if deny != nil {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("gateway: dial %q: %w", address, err) // not an IP: fail closed
			}
			if a := ap.Addr().Unmap(); deny(a) {
				return &deniedError{addr: a}
			}
			return nil
		}
	}
	t.DialContext = d.DialContext
	t.TLSHandshakeTimeout = tlsHandshakeTimeout
	t.ResponseHeaderTimeout = responseHeaderTimeout
	t.IdleConnTimeout = idleConnTimeout
	return t
}

// deniedError is a connection Options.Deny refused.
type deniedError struct{ addr netip.Addr }

func (e *deniedError) Error() string { return "gateway: address " + e.addr.String() + " is denied" }

// encodingError is a response in a Content-Encoding the gateway cannot
// scrub.
type encodingError struct{ encoding string }

func (e *encodingError) Error() string {
	return "gateway: response in Content-Encoding " + e.encoding + " cannot be scrubbed"
}

// call is one request on its way through the gateway.
type call struct {
	binding  string
	client   netip.Addr
	route    Route
	secrets  []scrub.Secret // empty until the route is found
	upgraded bool           // the upstream switched protocols
	code     sandbox.Code
}

type callKey struct{}

func callOf(ctx context.Context) *call { return ctx.Value(callKey{}).(*call) }

// ServeHTTP serves one request of a sandbox: see the package doc.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &call{}
	rec := &recorder{ResponseWriter: w, call: c}
	if g.opts.OnRequest != nil {
		defer func() { g.opts.OnRequest(c.result(rec)) }()
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err == nil {
		c.client = ap.Addr().Unmap()
	}
	if err != nil || (g.opts.Allowed != nil && !g.opts.Allowed(c.client)) {
		g.fail(rec, c, http.StatusForbidden, sandbox.Errorf(sandbox.CodePermissionDenied,
			"the egress gateway serves sandboxes, and %s is not one", r.RemoteAddr).
			WithHint("call bindings from a sandbox in network mode \"egress\""))
		return
	}
	name, ok := sandbox.BindingName(r.Host)
	if !ok {
		g.fail(rec, c, http.StatusNotFound, sandbox.Errorf(sandbox.CodeNotFound,
			"host %q is not a binding's", r.Host).
			WithHint("address a binding of your tenant as http://NAME.%s/PATH", sandbox.GatewayDomain))
		return
	}
	c.binding = name
	if r.Method == http.MethodConnect {
		g.fail(rec, c, http.StatusBadRequest, sandbox.Errorf(sandbox.CodeInvalidArgument,
			"the egress gateway is not a CONNECT proxy").
			WithHint("send plain HTTP to http://NAME.%s/PATH", sandbox.GatewayDomain))
		return
	}
	if hasDotSegment(r.URL.Path) {
		g.fail(rec, c, http.StatusBadRequest, sandbox.Errorf(sandbox.CodeInvalidArgument,
			"path %q has a \".\" or \"..\" segment", r.URL.Path).
			WithHint("send the path in its clean form: the binding's URL path is a prefix it cannot leave"))
		return
	}
	if g.opts.Resolver == nil {
		g.internal(rec, c, errors.New("no resolver"))
		return
	}
	route, err := g.opts.Resolver.Route(r.Context(), c.client, name)
	var se *sandbox.Error
	switch {
	case errors.As(err, &se):
		g.fail(rec, c, se.Code.HTTPStatus(), se)
		return
	case err != nil:
		g.internal(rec, c, fmt.Errorf("resolve: %w", err))
		return
	case route.Upstream == nil || (route.Upstream.Scheme != "https" && route.Upstream.Scheme != "http") ||
		route.Upstream.Host == "" || route.Header == "":
		g.internal(rec, c, fmt.Errorf("resolver gave route to %v with header %q: want an http(s) URL and a header", route.Upstream, route.Header))
		return
	}
	c.route = route
	c.secrets = []scrub.Secret{{Name: route.SecretName, Value: route.Value}, {Name: route.SecretName, Value: route.Secret}}
	// Full duplex: the server must not close the body when the upstream's
	// header goes out, while the transport may still be reading it (its
	// check that the body ends at its Content-Length); that tore answers
	// down mid-stream. A server's writer always supports it.
	_ = http.NewResponseController(rec).EnableFullDuplex()
	g.proxy.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
	if !c.upgraded {
		scrubHeader(w.Header(), c.secrets) // trailers, set after the body
	}
}

// hasDotSegment reports whether path has a "." or ".." segment.
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// rewrite makes the upstream request: the route's URL with the request's
// path appended and its query kept, the upstream's Host, none of the
// sandbox's forwarding or credential headers, and the bound header set.
func rewrite(pr *httputil.ProxyRequest) {
	c := callOf(pr.In.Context())
	pr.SetURL(c.route.Upstream)
	for k := range pr.Out.Header {
		if strings.EqualFold(k, c.route.Header) || strings.EqualFold(k, "Proxy-Authorization") ||
			strings.EqualFold(k, "Forwarded") || strings.EqualFold(k, "Accept-Encoding") ||
			len(k) >= len("X-Forwarded-") && strings.EqualFold(k[:len("X-Forwarded-")], "X-Forwarded-") {
			delete(pr.Out.Header, k)
		}
	}
	pr.Out.Header.Set(c.route.Header, string(c.route.Value))
}

// modifyResponse scrubs the upstream's response headers and wraps its
// body in a scrubber; an upgraded connection's stream is left as it is.
func modifyResponse(resp *http.Response) error {
	c := callOf(resp.Request.Context())
	scrubHeader(resp.Header, c.secrets)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		c.upgraded = true
		return nil
	}
	if resp.Body == nil || resp.Body == http.NoBody || resp.Request.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return nil
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return &encodingError{encoding: ce}
	}
	resp.Body = newScrubReader(resp.Body, c.secrets)
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	return nil
}

// scrubHeader replaces every secret value in h's values by "[secret
// NAME]", and drops a header whose name holds one.
func scrubHeader(h http.Header, secrets []scrub.Secret) {
	for k, vs := range h {
		for _, s := range secrets {
			if len(s.Value) > 0 && strings.Contains(k, string(s.Value)) {
				delete(h, k)
				break
			}
		}
		for i, v := range vs {
			vs[i] = scrubString(v, secrets)
		}
	}
}

// scrubString is s scrubbed of secrets, longest value first so that a
// value containing another wins, as scrub.Writer does.
func scrubString(s string, secrets []scrub.Secret) string {
	found := false
	for _, v := range secrets {
		found = found || len(v.Value) > 0 && strings.Contains(s, string(v.Value))
	}
	if !found {
		return s
	}
	var b strings.Builder
	w := scrub.NewWriter(&b, secrets)
	w.Write([]byte(s))
	w.Flush()
	return b.String()
}

// proxyError answers a request the upstream did not: it could not be
// reached, was denied, took too long, or answered in an encoding the
// gateway cannot scrub. A sandbox that went away gets nothing.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	c := callOf(r.Context())
	rec := w.(*recorder)
	host := c.route.Upstream.Host
	log := g.log.With("binding", c.binding, "client", c.client, "upstream", host)
	var (
		denied *deniedError
		enc    *encodingError
		ne     net.Error
	)
	switch {
	case r.Context().Err() != nil:
		log.Debug("sandbox went away", "err", err)
	case errors.As(err, &denied):
		g.fail(rec, c, http.StatusBadGateway, sandbox.Errorf(sandbox.CodePermissionDenied,
			"binding %q: upstream %s is at %s, an address the gateway may not connect to", c.binding, host, denied.addr).
			WithHint("bind an upstream at a public address"))
	case errors.As(err, &enc):
		g.fail(rec, c, http.StatusBadGateway, sandbox.Errorf(sandbox.CodeUnavailable,
			"binding %q: upstream %s answered in Content-Encoding %q, which the gateway cannot scrub", c.binding, host, enc.encoding).
			WithHint("the gateway asks for gzip or none; an upstream that answers otherwise cannot be bound"))
	case errors.As(err, &ne) && ne.Timeout():
		log.Warn("upstream timed out", "err", err)
		g.fail(rec, c, http.StatusGatewayTimeout, sandbox.Errorf(sandbox.CodeTimeout,
			"binding %q: upstream %s did not answer in time", c.binding, host).
			WithHint("retry; if it persists, the daemon's log has the cause"))
	default:
		log.Warn("upstream unreachable", "err", err)
		g.fail(rec, c, http.StatusBadGateway, sandbox.Errorf(sandbox.CodeUnavailable,
			"binding %q: could not reach upstream %s", c.binding, host).
			WithHint("check the binding's upstream URL; the daemon's log has the cause"))
	}
}

// internal answers an error whose cause is not the sandbox's to see: it
// is logged, and the sandbox gets the opaque internal error with 502, the
// gateway having failed to pass the request on.
func (g *Gateway) internal(w *recorder, c *call, err error) {
	g.log.Error("internal error", "binding", c.binding, "client", c.client, "err", err)
	g.fail(w, c, http.StatusBadGateway, sandbox.AsError(err))
}

// fail answers e with status as the native API's error body.
func (g *Gateway) fail(w *recorder, c *call, status int, e *sandbox.Error) {
	c.code = e.Code
	b, err := json.Marshal(e.Body())
	if err != nil { // a detail that does not marshal: a bug
		g.log.Error("internal error", "op", "encode error", "err", err)
		b = []byte(`{"error":{"code":"internal","message":"internal error","hint":"","details":{}}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// result is the Result of c, answered through rec.
func (c *call) result(rec *recorder) Result {
	res := Result{Binding: c.binding, Client: c.client, Status: rec.status, Bytes: rec.bytes, Code: c.code}
	if c.route.Upstream != nil {
		res.Upstream = c.route.Upstream.Host
	}
	if c.upgraded {
		res.Status = http.StatusSwitchingProtocols // written on the hijacked connection, not through rec
	}
	return res
}

// recorder notes the status and body size a request is answered with, and
// scrubs the headers of every response written, informational ones (103
// Early Hints) included, which the proxy copies without ModifyResponse.
// Unwrap lets http.ResponseController reach Flush and Hijack.
type recorder struct {
	http.ResponseWriter
	call   *call
	status int
	final  bool
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	scrubHeader(r.Header(), r.call.secrets)
	if !r.final {
		r.status, r.final = code, code >= 200
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.final {
		r.WriteHeader(http.StatusOK)
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
