package main

import (
	"context"
	"log/slog"
	"net"

	"github.com/hearth/hearth/gateway"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/metrics"
	"github.com/hearth/hearth/network"
	"github.com/hearth/hearth/store"
)

// defaultGatewayPort is where the egress gateway listens unless
// --gateway-port says otherwise.
const defaultGatewayPort = 10080

// serveGateway runs the egress gateway on ln (every address, at the port
// the network host's rules redirect to) until ctx ends; it serves the
// sandbox subnet only and never dials what the network host blocks for
// sandboxes. Each request is logged and counted.
func serveGateway(ctx context.Context, ln net.Listener, netHost *network.Host, svc *lifecycle.Service, reg *metrics.Registry, log *slog.Logger) error {
	requests := reg.Counter("hearth_gateway_requests_total", "Requests of sandboxes through the egress gateway, by the error code of the gateway's own refusal (ok when the upstream answered).", "code")
	gw := gateway.New(gateway.Options{
		Resolver:  gateway.Routes{Addresses: netHost, Bindings: svc.Credentials},
		Allowed:   netHost.Subnet().Contains,
		Deny:      netHost.Blocks,
		Logger:    log,
		OnRequest: gateway.LogRequests(func(code string) { requests.Inc(code) }, log),
	})
	return gateway.Serve(ctx, ln, gw, log)
}

// egressRefusals returns the network host's OnRefusal: each refusal of a
// sandbox's lookup or connection is logged with the sandbox's name and
// tenant (read from db) and counted by tenant and kind.
func egressRefusals(db store.Store, reg *metrics.Registry, log *slog.Logger) func(network.Refusal) {
	refused := reg.Counter("hearth_egress_refused_total", "Connections and lookups of sandboxes that their network policy refused, by tenant and kind (connection or lookup).", "tenant", "kind")
	return network.LogRefusals(db.Sandboxes(), func(tenant, kind string) { refused.Inc(tenant, kind) }, log)
}
