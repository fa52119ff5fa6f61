package network

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// Internals the external tests reach.
var (
	Pair      = pair
	PairOf    = pairOf
	Allocate  = allocate
	LinkName  = linkName
	CheckID   = checkID
	ChainsFor = func(name string) (input, forward, postrouting, prerouting, egress, limits string) {
		c := chainsFor(name)
		return c.input, c.forward, c.postrouting, c.prerouting, c.egress, c.limits
	}
	EgressRules      = egressRules
	LinkRulesRestore = linkRulesRestore
	CheckEgress      = func(e Egress) error { return e.check() }
	IFBName          = ifbName
	BurstBytes       = burstBytes
	ShapeLines       = shapeLines
	UnshapeLines     = unshapeLines
	ConnRule         = connRule
	// Rules returns the rules of a host named name, as iptables -S lists
	// them; dnsPort 0 is a host with no DNS.
	Rules = func(name, linkPrefix string, subnet netip.Prefix, deny []netip.Prefix, dnsPort int) (filter, nat []string) {
		c := chainsFor(name)
		return filterRules(c, linkPrefix, subnet, deny, dnsPort), natRules(c, linkPrefix, subnet, dnsPort)
	}
	RestoreInput = func(name string, filter, nat []string) string {
		return restoreInput(chainsFor(name), filter, nat)
	}
	// HookPlacement is hookPlacement for the jump from chain from to
	// chain to.
	HookPlacement = func(listing []string, from, to string) (count int, first bool) {
		return hookPlacement(listing, hook{from: from, to: to})
	}
)

// ServeDNSOn runs a DNS forwarder as ServeDNS does, on pc and ln, for the
// clients allow allows, with timeout per upstream exchange.
func ServeDNSOn(ctx context.Context, pc *net.UDPConn, ln net.Listener, upstreams []netip.AddrPort, allow func(netip.Addr) bool, timeout time.Duration) error {
	f := &forwarder{upstreams: upstreams, allow: allow, timeout: timeout, log: slog.New(slog.DiscardHandler)}
	return f.serve(ctx, pc, ln)
}
