package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/hearth/hearth/gateway"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/network"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// defaultGatewayPort is where the egress gateway listens unless
// --gateway-port says otherwise.
const defaultGatewayPort = 10080

// gatewayRoutes resolves the egress gateway's requests: the sandbox at
// the client's address (the network host knows it) and its tenant's
// binding with the secret's value (lifecycle decides).
type gatewayRoutes struct {
	net *network.Host
	svc *lifecycle.Service
}

var _ gateway.Resolver = gatewayRoutes{}

func (g gatewayRoutes) Route(ctx context.Context, client netip.Addr, binding string) (gateway.Route, error) {
	id, ok := g.net.SandboxAt(client)
	if !ok {
		return gateway.Route{}, sandbox.Errorf(sandbox.CodePermissionDenied, "%s is no sandbox's address", client).
			WithHint("only egress sandboxes reach the gateway")
	}
	b, value, err := g.svc.Credentials.GatewayRoute(ctx, id, binding)
	if err != nil {
		return gateway.Route{}, err
	}
	u, err := url.Parse(b.Upstream)
	if err != nil {
		return gateway.Route{}, err
	}
	return gateway.Route{Upstream: u, Header: b.Header, Value: b.HeaderValue(value), Secret: value, SecretName: b.Secret}, nil
}

// serveGateway runs the egress gateway on ln (every address, at the port
// the network host's rules redirect to) until ctx ends; it serves the
// sandbox subnet only and never dials what the network host blocks for
// sandboxes. Each request is logged and counted.
func serveGateway(ctx context.Context, ln net.Listener, netHost *network.Host, svc *lifecycle.Service, reg *metrics.Registry, log *slog.Logger) error {
	requests := reg.Counter("hearth_gateway_requests_total", "Requests of sandboxes through the egress gateway, by the error code of the gateway's own refusal (ok when the upstream answered).", "code")
	gw := gateway.New(gateway.Options{
		Resolver: gatewayRoutes{net: netHost, svc: svc},
		Allowed:  netHost.Subnet().Contains,
		Deny:     netHost.Blocks,
		Logger:   log,
		OnRequest: func(r gateway.Result) {
			code := string(r.Code)
			if code == "" {
				code = "ok"
			}
			requests.Inc(code)
			log.Info("gateway request", "binding", r.Binding, "client", r.Client, "upstream", r.Upstream, "status", r.Status, "bytes", r.Bytes, "code", code)
		},
	})
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
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

// egressRefusals returns the network host's OnRefusal: each refusal of a
// sandbox's lookup or connection is logged with the sandbox's name and
// tenant and counted by tenant and kind. The sandbox is read from the
// store by id (a refusal comes at most 10 times a second per sandbox, and
// once per refused lookup).
func egressRefusals(db store.Store, reg *metrics.Registry, log *slog.Logger) func(network.Refusal) {
	refused := reg.Counter("hearth_egress_refused_total", "Connections and lookups of sandboxes that their network policy refused, by tenant and kind (connection or lookup).", "tenant", "kind")
	return func(r network.Refusal) {
		name, tenant := "", ""
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if sb, err := db.Sandboxes().ByID(ctx, r.Sandbox); err == nil {
			name, tenant = sb.Name, sb.Tenant
		}
		if r.Domain != "" {
			refused.Inc(tenant, "lookup")
			log.Info("egress refused", "kind", "lookup", "sandbox", name, "id", r.Sandbox, "tenant", tenant, "domain", r.Domain)
			return
		}
		refused.Inc(tenant, "connection")
		log.Info("egress refused", "kind", "connection", "sandbox", name, "id", r.Sandbox, "tenant", tenant, "dst", r.Dst, "proto", r.Proto, "port", r.Port)
	}
}
