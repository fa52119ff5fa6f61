package fetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// plainHTTP reports whether host (host[:port]) may be spoken to over plain
// HTTP: a host whose Registry says Insecure may; one whose Registry gives
// a CA may not; otherwise only a loopback host may.
func (o *Options) plainHTTP(host string) bool {
	r, ok := o.registry(host)
	switch {
	case ok && r.Insecure:
		return true
	case ok && len(r.CA) > 0:
		return false
	}
	return isLoopback(host)
}

// isLoopback reports whether host (host[:port], an IPv6 address in
// brackets) is localhost or a loopback address.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// isInternal reports whether host is an IP literal of a loopback, private,
// link-local or unspecified address, or localhost.
func isInternal(host string) bool {
	if isLoopback(host) {
		return true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return err == nil && internalAddr(a)
}

// internalAddr reports whether a is on the host's own or a private
// network: loopback, private, link-local or unspecified.
func internalAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified()
}

// publicOnly wraps dial to refuse internal addresses for hosts Registries
// does not list (Options.PublicOnly): it resolves the host itself and dials
// the first public address that answers, never the name, so the address
// dialed is the one checked.
func (o *Options) publicOnly(dial dialFunc) dialFunc {
	lookup := o.lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if o.listed(host, port) {
			return dial(ctx, network, addr)
		}
		if isInternal(host) {
			return nil, kindf(ErrInternal, "%s is on the host's own or a private network, and has no login", host)
		}
		addrs, err := lookup(ctx, host)
		if a, perr := netip.ParseAddr(host); perr == nil {
			addrs, err = []netip.Addr{a}, nil
		}
		if err != nil {
			return nil, err
		}
		err = kindf(ErrInternal, "%s has no address", host)
		for _, a := range addrs {
			if internalAddr(a) {
				err = kindf(ErrInternal, "%s is at %s, on the host's own or a private network, and has no login", host, a)
				continue
			}
			c, derr := dial(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
			if derr == nil {
				return c, nil
			}
			err = derr
		}
		return nil, err
	}
}

// listed reports whether Registries lists host at port: by host:port, or
// by host alone for the default ports.
func (o *Options) listed(host, port string) bool {
	if _, ok := o.registry(net.JoinHostPort(host, port)); ok {
		return true
	}
	_, ok := o.registry(host)
	return ok && (port == "443" || port == "80")
}

// plainHTTPError is a plain-HTTP request the transport refused to send.
type plainHTTPError struct{ host string }

func (e *plainHTTPError) Error() string {
	if isLoopback(e.host) {
		return fmt.Sprintf("plain HTTP to %s refused: its registry has a CA, so it is reached over TLS only", e.host)
	}
	return fmt.Sprintf("plain HTTP to %s refused: it is not a loopback host and its registry is not marked insecure", e.host)
}

// roundTripper is the bottom of a pull's HTTP stack, under
// go-containerregistry's authentication: it refuses plain HTTP to hosts
// that need TLS, and gives each host in Options.Registries its own TLS
// settings.
type roundTripper struct {
	o      *Options
	def    *http.Transport
	byHost map[string]*http.Transport
}

var _ http.RoundTripper = (*roundTripper)(nil)

func newRoundTripper(o *Options) (*roundTripper, error) {
	rt := &roundTripper{o: o, byHost: map[string]*http.Transport{}}
	var err error
	if rt.def, err = o.transport(nil); err != nil {
		return nil, err
	}
	for host, r := range o.Registries {
		if len(r.CA) == 0 && !r.Insecure {
			continue
		}
		if rt.byHost[host], err = o.transport(&r); err != nil {
			return nil, fmt.Errorf("registry %s: %w", host, err)
		}
	}
	return rt, nil
}

// transport is an HTTP transport for the hosts r describes (nil: any
// other host, with the system's roots).
func (o *Options) transport(r *Registry) (*http.Transport, error) {
	dial := o.dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if o.PublicOnly {
		dial = o.publicOnly(dial)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if r != nil && len(r.CA) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(r.CA) {
			return nil, kindf(ErrInvalid, "the CA holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if r != nil && r.Insecure {
		cfg.InsecureSkipVerify = true
	}
	return &http.Transport{
		DialContext:           dial,
		TLSClientConfig:       cfg,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   o.Parallel + 2,
	}, nil
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	host := strings.ToLower(req.URL.Host)
	if req.URL.Scheme == "http" && !rt.o.plainHTTP(host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &plainHTTPError{host: host}
	}
	if t, ok := rt.byHost[host]; ok {
		return t.RoundTrip(req)
	}
	return rt.def.RoundTrip(req)
}

// closeIdle closes the connections the pull left open.
func (rt *roundTripper) closeIdle() {
	rt.def.CloseIdleConnections()
	for _, t := range rt.byHost {
		t.CloseIdleConnections()
	}
}

// checkRedirect follows at most 10 redirects, and none from a registry
// that is not itself at an internal address to one that is (a hostile
// registry must not aim the daemon at the host's loopback, the LAN or a
// cloud's metadata service). Scheme rules apply to each hop: the
// round-tripper sees it.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return permanentError{errors.New("stopped after 10 redirects")}
	}
	from, to := via[0].URL.Hostname(), req.URL.Hostname()
	if isInternal(to) && !isInternal(from) {
		return permanentError{fmt.Errorf("redirect from %s to internal address %s refused", from, to)}
	}
	return nil
}

// isNetError reports whether err is a network failure (a dial, a read, a
// timeout) as opposed to a refusal.
func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
