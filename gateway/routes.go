package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Addresses tells which sandbox has an address (network.Host does).
type Addresses interface {
	SandboxAt(addr netip.Addr) (id string, ok bool)
}

// Bindings resolves a sandbox's binding, with its secret's value, for the
// gateway (lifecycle does, deciding whether the sandbox may use it).
type Bindings interface {
	GatewayRoute(ctx context.Context, sandboxID, binding string) (sandbox.Binding, []byte, error)
}

// Routes is the daemon's Resolver: the sandbox at the client's address
// (Addresses knows it) and its tenant's binding with the secret's value
// (Bindings decides). A client that is no sandbox is refused with
// permission_denied.
type Routes struct {
	Addresses Addresses
	Bindings  Bindings
}

var _ Resolver = Routes{}

// Route implements Resolver.
func (r Routes) Route(ctx context.Context, client netip.Addr, binding string) (Route, error) {
	id, ok := r.Addresses.SandboxAt(client)
	if !ok {
		return Route{}, sandbox.Errorf(sandbox.CodePermissionDenied, "%s is no sandbox's address", client).
			WithHint("only egress sandboxes reach the gateway")
	}
	b, value, err := r.Bindings.GatewayRoute(ctx, id, binding)
	if err != nil {
		return Route{}, err
	}
	u, err := url.Parse(b.Upstream)
	if err != nil {
		return Route{}, err
	}
	return Route{Upstream: u, Header: b.Header, Value: b.HeaderValue(value), Secret: value, SecretName: b.Secret}, nil
}

// LogRequests returns an Options.OnRequest that logs each request and
// counts it with count, by the code of the gateway's own refusal ("ok"
// when the upstream answered); count and log may be nil.
func LogRequests(count func(code string), log *slog.Logger) func(Result) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(r Result) {
		code := string(r.Code)
		if code == "" {
			code = "ok"
		}
		if count != nil {
			count(code)
		}
		log.Info("gateway request", "binding", r.Binding, "client", r.Client, "upstream", r.Upstream, "status", r.Status, "bytes", r.Bytes, "code", code)
	}
}

// Serve serves g on ln until ctx ends, then shuts it down, giving the
// requests in flight 5 s. It returns nil once ctx has ended, else the
// error that stopped the server.
func Serve(ctx context.Context, ln net.Listener, g *Gateway, log *slog.Logger) error {
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	})
	defer stop()
	log.Info("egress gateway listening", "addr", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
