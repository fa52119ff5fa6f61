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
	// EgressRules is egressRules for the host named name.
	EgressRules      = func(name, link string, e Egress) []string { return egressRules(chainsFor(name), link, e) }
	LinkRulesRestore = linkRulesRestore
	IFBName          = ifbName
	BurstBytes       = burstBytes
	ShapeLines       = shapeLines
	UnshapeLines     = unshapeLines
	ConnRule         = connRule
	// Rules returns the rules of a host named name, as iptables -S lists
	// them; dnsPort 0 is a host with no DNS, gatewayPort 0 one with no
	// gateway.
	Rules = func(name, linkPrefix string, subnet netip.Prefix, deny []netip.Prefix, dnsPort, gatewayPort int) (filter, nat []string) {
		c := chainsFor(name)
		return filterRules(c, linkPrefix, subnet, deny, dnsPort, gatewayPort), natRules(c, linkPrefix, subnet, dnsPort, gatewayPort)
	}
	RestoreInput = func(name string, filter, nat []string) string {
		return restoreInput(chainsFor(name), filter, nat)
	}
	// HookPlacement is hookPlacement for the jump from chain from to
	// chain to.
	HookPlacement = func(listing []string, from, to string) (count int, placed bool) {
		return hookPlacement(listing, hook{from: from, to: to})
	}
	// HashlimitName is hashlimitName for the host named name.
	HashlimitName = func(name string) string { return hashlimitName(chainsFor(name)) }
)

// ServeDNSOn runs a DNS forwarder as ServeDNS does, on pc and ln, for the
// clients allow allows, with timeout per upstream exchange, judging
// queries by names (nil: none).
func ServeDNSOn(ctx context.Context, pc *net.UDPConn, ln net.Listener, upstreams []netip.AddrPort, allow func(netip.Addr) bool, timeout time.Duration, names *Names) error {
	f := &forwarder{upstreams: upstreams, allow: allow, timeout: timeout, log: slog.New(slog.DiscardHandler)}
	if names != nil {
		f.names = names
	}
	return f.serve(ctx, pc, ln)
}

// Names is a name policy of a test's: Permit and Local decide, and Learn
// hears what was learned.
type Names struct {
	Permit func(client netip.Addr, name string) bool
	Learn  func(client netip.Addr, name string, addrs []netip.Addr)
	Local  func(client netip.Addr, name string) (netip.Addr, bool)
}

func (n *Names) permit(client netip.Addr, name string) bool { return n.Permit(client, name) }
func (n *Names) learn(_ context.Context, client netip.Addr, name string, addrs []netip.Addr) {
	n.Learn(client, name, addrs)
}
func (n *Names) local(client netip.Addr, name string) (netip.Addr, bool) {
	return n.Local(client, name)
}

// HostPermits is Host.permit: whether the sandbox at client may resolve
// name, by the policy the Host knows.
func HostPermits(h *Host, client netip.Addr, name string) bool { return h.nets.permit(client, name) }

// HostLearn is Host.learn: name resolved to addrs for the sandbox at
// client.
func HostLearn(h *Host, ctx context.Context, client netip.Addr, name string, addrs []netip.Addr) {
	h.nets.learn(ctx, client, name, addrs)
}

// Permits is Egress.permits.
func Permits(e Egress, name string) bool { return e.permits(name) }

// ParseRefusal and ParseSetEntry parse what the kernel logs and ipset
// lists.
var (
	ParseRefusal  = parseRefusal
	ParseSetEntry = func(line string) (set, link, name string, addr netip.Addr, timeout time.Duration, ok bool) {
		e, ok := parseSetEntry(line)
		return e.set, e.link, e.name, e.addr, e.timeout, ok
	}
	SetAddLine = setAddLine
)
