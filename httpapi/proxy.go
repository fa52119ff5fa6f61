package httpapi

import (
	"context"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// The sandbox's URL: HTTP requests, WebSocket upgrades included, to
// /v1/sandboxes/{name}/proxy/{port}/… (or, with Options.BaseDomain, to any
// path of the host {port}-{name}.{domain}) reach that port on the
// sandbox's own loopback, through its agent, waking it if it sleeps. A port
// is private by default: the caller sends the token of someone who may see
// the sandbox, which is taken off the request before it goes in. A port the
// sandbox made public (Sandbox.PublicPorts) needs no token; without one,
// any other port answers 401, whether the sandbox exists or not.

// verbProxy is the proxy's verb in the audit log and the metrics.
const verbProxy = "sandbox.proxy"

// proxyTarget is one proxied request's sandbox, port and path in it.
type proxyTarget struct {
	name string
	port int
	path string
	// prefix is what the URL has before path (X-Forwarded-Prefix).
	prefix string
}

// handleProxy serves /v1/sandboxes/{name}/proxy/{port}/{path...}.
func (s proxies) handleProxy(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	name := r.PathValue("name")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		door.WriteError(w, r, sandbox.Errorf(sandbox.CodeInvalidArgument, "port %q is not a number", r.PathValue("port")).
			WithHint("use /v1/sandboxes/%s/proxy/PORT/…", name))
		return
	}
	prefix := "/v1/sandboxes/" + url.PathEscape(name) + "/proxy/" + strconv.Itoa(port)
	s.proxy(w, r, p, proxyTarget{name: name, port: port, path: "/" + r.PathValue("path"), prefix: prefix})
}

// handleProxyRoot redirects the proxy URL without its trailing slash to
// the one with it, as a browser expects of a site's root.
func (s proxies) handleProxyRoot(w http.ResponseWriter, r *http.Request, _ sandbox.Principal) {
	u := *r.URL
	u.Path += "/"
	u.RawPath = ""
	http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
}

// hostTarget reads a request to {port}-{name}.{BaseDomain}, an operators'
// sandbox, or {port}-{name}.{tenant}.{BaseDomain}, a tenant's (see
// sandbox.ProxyURL); ok is false for any other host.
func (s proxies) hostTarget(r *http.Request) (proxyTarget, bool) {
	if s.opts.BaseDomain == "" {
		return proxyTarget{}, false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	labels, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(s.opts.BaseDomain))
	label, tenant, qualified := strings.Cut(labels, ".")
	if !ok || strings.Contains(tenant, ".") || qualified && tenant == "" {
		return proxyTarget{}, false
	}
	portText, name, ok := strings.Cut(label, "-")
	port, err := strconv.Atoi(portText)
	if !ok || err != nil {
		return proxyTarget{}, false
	}
	if qualified {
		name = sandbox.Ref(tenant, name)
	}
	return proxyTarget{name: name, port: port, path: r.URL.Path}, true
}

// isHost reports whether r is addressed to a sandbox's own host name
// (hostTarget).
func (s proxies) isHost(r *http.Request) bool {
	_, ok := s.hostTarget(r)
	return ok
}

// hostName names the sandbox of a request to its host name, for the audit
// log.
func (s proxies) hostName(r *http.Request) string {
	t, _ := s.hostTarget(r)
	return t.name
}

// handleHost serves a request to a sandbox's own host name.
func (s proxies) handleHost(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	t, _ := s.hostTarget(r)
	s.proxy(w, r, p, t)
}

// proxy serves one request to t by p, the zero Principal for a public
// port's visitor (the chain has authenticated a token if there was one).
func (s proxies) proxy(w http.ResponseWriter, r *http.Request, p sandbox.Principal, t proxyTarget) {
	door.NoteSandbox(r, t.name)
	token := door.BearerToken(r)
	var dial func(ctx context.Context) (net.Conn, error)
	if token != "" {
		dial = func(ctx context.Context) (net.Conn, error) { return s.svc.Processes.Connect(ctx, p, t.name, t.port) }
	} else {
		dial = func(ctx context.Context) (net.Conn, error) { return s.svc.Processes.ConnectPublic(ctx, t.name, t.port) }
	}
	release, ok := door.Hold(w, r, p)
	if !ok {
		return
	}
	defer release()
	// The first connection is made here, so that a sandbox or port that
	// cannot be reached is hearth's error, not the proxy's bare 502.
	conn, err := dial(r.Context())
	if err != nil {
		if token == "" && sandbox.IsCode(err, sandbox.CodeNotFound) {
			err = sandbox.Errorf(sandbox.CodeUnauthenticated, "missing or invalid token").
				WithHint("port %d of this sandbox is private: send a token of someone who may see the sandbox as `Authorization: Bearer <token>`", t.port)
		}
		door.WriteError(w, r, err)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			if t.prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
			}
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "localhost:"+strconv.Itoa(t.port)
			pr.Out.URL.Path, pr.Out.URL.RawPath = t.path, ""
			pr.Out.Host = pr.Out.URL.Host
			door.StripToken(pr.Out.Header) // hearth's token stays out of the sandbox
		},
		Transport: &http.Transport{
			DialContext:       (&firstConn{conn: conn, dial: dial}).dialContext,
			DisableKeepAlives: true,
		},
		FlushInterval: -1, // stream as the server writes (server-sent events)
		// The sandbox's server speaks for itself, never for hearth: no
		// header of hearth's (door.HeaderMovedTo, the node headers)
		// passes from it, so that nothing it answers can steer a node
		// that forwarded the call.
		ModifyResponse: func(resp *http.Response) error {
			for k := range resp.Header {
				if strings.HasPrefix(k, "Hearth-") {
					resp.Header.Del(k)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			door.WriteError(w, r, sandbox.Errorf(sandbox.CodeUnavailable, "the server on port %d in the sandbox failed to answer: %v", t.port, err).
				WithHint("check the server in the sandbox; its listening ports are at GET /v1/sandboxes/%s/ports", t.name))
		},
	}
	// Full duplex: the server must not close the body when the sandbox's
	// header goes out, while the transport may still be reading it (its
	// check that the body ends at its Content-Length); that tore answers
	// down mid-stream. The chain's writers unwrap to the server's own.
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(w, r)
}

// firstConn hands the transport the connection proxy made, then dials
// anew should it ask again.
type firstConn struct {
	mu   sync.Mutex
	conn net.Conn
	dial func(ctx context.Context) (net.Conn, error)
}

func (f *firstConn) dialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	f.mu.Lock()
	conn := f.conn
	f.conn = nil
	f.mu.Unlock()
	if conn != nil {
		return conn, nil
	}
	return f.dial(ctx)
}

// handlePorts answers the sandbox's ports: those processes listen on, and
// those ?port= names (repeatable), each with its URL.
func (s proxies) handlePorts(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	name := r.PathValue("name")
	q := queryParams(r, "port*")
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	var asked []int
	for _, v := range q.q["port"] {
		port, err := strconv.Atoi(v)
		if err == nil {
			err = sandbox.ValidatePort(port)
		}
		if err != nil {
			door.WriteError(w, r, sandbox.Errorf(sandbox.CodeInvalidArgument, "port %q is not a TCP port", v).WithHint("use a port from 1 to 65535"))
			return
		}
		asked = append(asked, port)
	}
	sb, listening, err := s.svc.Processes.Ports(r.Context(), p, name)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	byPort := map[int]*sandbox.PortInfo{}
	info := func(port int) *sandbox.PortInfo {
		if byPort[port] == nil {
			byPort[port] = &sandbox.PortInfo{Port: port, Public: slices.Contains(sb.PublicPorts, port),
				URL: sandbox.ProxyURL(scheme, r.Host, s.opts.BaseDomain, sb.Tenant, sb.Name, port)}
		}
		return byPort[port]
	}
	for _, l := range listening {
		pi := info(l.Port)
		if !pi.Listening {
			pi.Listening, pi.Address = true, l.Address
		}
	}
	for _, port := range asked {
		info(port)
	}
	out := portList{Ports: []sandbox.PortInfo{}}
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		out.Ports = append(out.Ports, *byPort[port])
	}
	s.encode(w, http.StatusOK, out)
}

// portList is the body of GET /v1/sandboxes/{name}/ports.
type portList struct {
	Ports []sandbox.PortInfo `json:"ports"`
}
