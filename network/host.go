package network

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/hearth/hearth/sandbox"
)

// ErrUnavailable is returned by New when this host cannot give sandboxes a
// network: not root, or iproute2, iptables or ipset missing. A daemon then runs
// sandboxes without one (and refuses to start one that asks for it).
var ErrUnavailable = errors.New("network: sandbox networking is not available on this host")

// defaultSubnet is where sandboxes get their addresses when Options.Subnet
// is zero.
var defaultSubnet = netip.MustParsePrefix("10.89.0.0/16")

// Options configure a Host. The zero value works on a host where nothing
// else uses 10.89.0.0/16.
type Options struct {
	// Subnet holds every sandbox's address pair (see the package doc); it
	// must not overlap a network the host reaches, nor another Host's
	// subnet. Zero means 10.89.0.0/16. IPv4, with a prefix length from 8
	// to 29, inside one of the private or shared ranges every Host always
	// blocks (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10):
	// so every other Host's rules refuse it too, and no sandbox of
	// another Host (another daemon's instance) reaches one of this Host's,
	// whichever Host's chains judge the packet first.
	Subnet netip.Prefix
	// Deny are more destinations no sandbox may reach, besides the private
	// and reserved ranges that are always blocked: a host whose own LAN
	// uses public addresses lists it here.
	Deny []netip.Prefix
	// StateDir is where the Host records each sandbox's address; it must
	// persist across daemon restarts and belong to this Host alone. Empty
	// means /var/lib/hearth/network.
	StateDir string
	// Name names the Host's namespaces (/run/netns/<name>-<id>), its
	// ipsets (<name>-allow, <name>-deny), the prefix of its refusals in
	// the kernel's log ("<name>-refused: ") and, upper-cased, its iptables
	// chains (<NAME>-INPUT, ...): "hearth" followed by lowercase letters,
	// digits and dashes, at most 16 characters in all (a chain name has
	// at most 28), not ending in a dash nor holding two in a row. Empty
	// means "hearth". Two Hosts on one machine (two daemons' instances,
	// tests) need different names, link prefixes, subnets and DNS ports;
	// a name may begin with another's (hearth, hearth-staging), since no
	// sandbox id holds a dash. Every Host's name begins with "hearth" so
	// that Hosts know each other's jumps (see Setup).
	Name string
	// LinkPrefix begins the name of the host side of every sandbox's veth:
	// 2 to 4 lowercase letters, which no other interface of the host may
	// begin with (the rules match sandboxes by it): another Host's link
	// prefix may neither equal it nor begin with it. Empty means "hv".
	LinkPrefix string
	// DNSUpstreams are the name servers the Host's DNS forwarder
	// (ServeDNS) sends sandboxes' queries to, in order; none means
	// sandboxes get no name service (no redirect rules, and ServeDNS
	// refuses to run). The daemon uses the host's own (its resolv.conf:
	// see Nameservers); they are reached from the host, not the sandbox,
	// so a loopback resolver works.
	DNSUpstreams []netip.AddrPort
	// DNSPort is the port the forwarder listens on, on every address of
	// the host, and the sandboxes' queries are redirected to. Zero means
	// DefaultDNSPort (10053). Two Hosts on one machine need different
	// ones: a daemon's instance other than the default one listens first,
	// at a port ListenDNS picks, and passes that port here.
	DNSPort int
	// GatewayPort is where the daemon's egress gateway listens, on every
	// address of the host; zero means the Host has none. With one, a
	// sandbox's connections to port 80 of its gateway address are
	// redirected there, and the forwarder answers GatewayDomain, and
	// every name below it, with that address (see the package doc).
	GatewayPort int
	// GatewayDomain is the gateway's domain; empty means
	// "hearth.internal".
	GatewayDomain string
	// OnRefusal, when not nil, is called for every refusal of a
	// sandbox's lookup by the forwarder, and for each refused connection
	// WatchRefusals reads from the kernel's log. It must not block.
	OnRefusal func(Refusal)
	// Logger receives the Host's log; nil discards.
	Logger *slog.Logger
}

// Host sets up this host for sandbox networking and attaches sandboxes to
// it. It is safe for concurrent use, but calls on one id must not overlap
// (the driver serializes them).
type Host struct {
	subnet     netip.Prefix
	deny       []netip.Prefix
	stateDir   string
	name       string
	linkPrefix string
	chains     chains
	cmd        *commands
	log        *slog.Logger
	onRefusal  func(Refusal)
	// dnsUpstreams are where the forwarder sends queries (none: no
	// name service); dnsPort is where it listens.
	dnsUpstreams []netip.AddrPort
	dnsPort      int
	// gatewayPort is the egress gateway's port (0: none).
	gatewayPort int
	// nets knows the attached sandboxes' policies, for the forwarder;
	// limits applies their Limits.
	nets   *sandboxNets
	limits *limiter

	mu    sync.Mutex // guards the records (allocation) and setUp
	setUp bool
}

// New returns a Host for opts. It checks the options and that this host
// can do it: root, and the ip, tc, iptables and iptables-restore commands
// (ErrUnavailable otherwise). It changes nothing on the host: Setup does.
func New(opts Options) (*Host, error) {
	o, err := opts.complete()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: it needs root", ErrUnavailable)
	}
	cmd, err := lookCommands(o.Logger)
	if err != nil {
		return nil, err
	}
	h := &Host{
		subnet:     o.Subnet,
		deny:       o.Deny,
		stateDir:   o.StateDir,
		name:       o.Name,
		linkPrefix: o.LinkPrefix,
		chains:     chainsFor(o.Name),
		cmd:        cmd,
		log:        o.Logger,

		dnsUpstreams: slices.Clone(o.DNSUpstreams),
		dnsPort:      o.DNSPort,
		gatewayPort:  o.GatewayPort,
		onRefusal:    o.OnRefusal,
	}
	h.nets = &sandboxNets{
		subnet: o.Subnet, stateDir: o.StateDir, linkPrefix: o.LinkPrefix, chains: h.chains, cmd: cmd, log: o.Logger,
		onRefusal: o.OnRefusal, gatewayPort: o.GatewayPort, gatewayDomain: o.GatewayDomain, record: h.readRecord,
		byAddr: map[netip.Addr]*sandboxNet{},
	}
	h.limits = &limiter{linkPrefix: o.LinkPrefix, chains: h.chains, cmd: cmd, nets: h.nets}
	return h, nil
}

// complete returns o with its defaults filled in, or why it is not valid.
func (o Options) complete() (Options, error) {
	if !o.Subnet.IsValid() {
		o.Subnet = defaultSubnet
	}
	if err := checkSubnet(o.Subnet); err != nil {
		return o, err
	}
	o.Subnet = o.Subnet.Masked()
	for _, p := range o.Deny {
		if !p.IsValid() || !p.Addr().Is4() {
			return o, fmt.Errorf("network: deny %v: want an IPv4 prefix", p)
		}
	}
	o.Name = cmp.Or(o.Name, "hearth")
	if err := checkName(o.Name); err != nil {
		return o, err
	}
	o.LinkPrefix = cmp.Or(o.LinkPrefix, "hv")
	if !lowerAlnum(o.LinkPrefix, 2, 4, false) {
		return o, fmt.Errorf("network: link prefix %q: want 2 to 4 lowercase letters", o.LinkPrefix)
	}
	o.StateDir = cmp.Or(o.StateDir, "/var/lib/hearth/network")
	if err := o.checkServices(); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnRefusal == nil {
		o.OnRefusal = func(Refusal) {}
	}
	return o, nil
}

// checkServices fills in the DNS port and the gateway's domain, and
// checks them, the upstreams and the gateway's port.
func (o *Options) checkServices() error {
	o.DNSPort = cmp.Or(o.DNSPort, DefaultDNSPort)
	if o.DNSPort < 1 || o.DNSPort > 65535 || o.DNSPort == 53 {
		return fmt.Errorf("network: dns port %d: want a port from 1 to 65535 other than 53", o.DNSPort)
	}
	for _, u := range o.DNSUpstreams {
		if !u.IsValid() || u.Port() == 0 {
			return fmt.Errorf("network: dns upstream %v: want an address and a port", u)
		}
	}
	if o.GatewayPort < 0 || o.GatewayPort > 65535 || o.GatewayPort == 80 || o.GatewayPort != 0 && o.GatewayPort == o.DNSPort {
		return fmt.Errorf("network: gateway port %d: want a port from 1 to 65535 other than 80 and the DNS port", o.GatewayPort)
	}
	o.GatewayDomain = cmp.Or(o.GatewayDomain, "hearth.internal")
	if d, ok := sandbox.DomainName(o.GatewayDomain); !ok || d != o.GatewayDomain {
		return fmt.Errorf("network: gateway domain %q: want a domain name in lower case", o.GatewayDomain)
	}
	return nil
}

// checkName refuses a Host name that is not one (see Options.Name).
func checkName(name string) error {
	rest, ok := strings.CutPrefix(name, "hearth")
	if !ok || len(name) > 16 || strings.HasSuffix(name, "-") || strings.Contains(name, "--") || !lowerAlnum(strings.ReplaceAll(rest, "-", ""), 0, 16, true) {
		return fmt.Errorf("network: name %q: want hearth followed by lowercase letters, digits and single dashes, at most 16 characters", name)
	}
	return nil
}

// lowerAlnum reports whether s has lo to hi lowercase letters (and
// digits, when digits is set) only.
func lowerAlnum(s string, lo, hi int, digits bool) bool {
	if len(s) < lo || len(s) > hi {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (!digits || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Subnet returns the subnet sandboxes get their addresses from.
func (h *Host) Subnet() netip.Prefix { return h.subnet }

// Setup prepares the host for sandboxes, idempotently: IPv4 forwarding
// on, and the Host's policy chains created or emptied and filled with the
// policy (see the package doc) in one iptables-restore transaction per
// table, so that no packet ever sees them half made, then jumped to from
// the top of INPUT, FORWARD, nat POSTROUTING and nat PREROUTING (once
// each, above every rule but other Hosts' jumps: see hookPlacement; the
// PREROUTING chain holds the DNS redirect, and is empty when the Host
// serves no DNS). Other Hosts' chains, sets and jumps are never touched.
// Calling
// it at every daemon start refreshes the rules without duplicating any.
// The egress and limits chains (<NAME>-EGRESS, <NAME>-LIMITS) are created
// when missing but never emptied: they hold the egress rules and the
// connection caps of attached sandboxes, which Attach and SetEgress put
// there and Detach takes out. Attach and SetEgress call Setup the first
// time they are used.
func (h *Host) Setup(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.setupLocked(ctx)
}

func (h *Host) setupLocked(ctx context.Context) error {
	// The sets before the rules that match them.
	if err := h.nets.ensureSets(ctx); err != nil {
		return fmt.Errorf("network: setup: %w", err)
	}
	// Before the policy, which jumps to them.
	for _, chain := range []string{h.chains.egress, h.chains.limits} {
		if err := h.cmd.ensureChain(ctx, "filter", chain); err != nil {
			return fmt.Errorf("network: setup: %w", err)
		}
	}
	filter, nat := h.Rules()
	in := restoreInput(h.chains, filter, nat)
	if err := h.cmd.iptablesRestore(ctx, in); err != nil {
		return fmt.Errorf("network: setup: %w", err)
	}
	for _, hk := range h.chains.hooks() {
		if err := h.cmd.hookFirst(ctx, hk); err != nil {
			return fmt.Errorf("network: setup: %w", err)
		}
	}
	// Last, once the rules are in place: forwarding with no rules would let
	// sandboxes through to wherever the host routes.
	if err := writeSysctl("/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
		return fmt.Errorf("network: setup: turn on IPv4 forwarding: %w", err)
	}
	h.setUp = true
	h.log.Info("sandbox network set up", "subnet", h.subnet, "chains", h.chains.input+" "+h.chains.forward+" "+h.chains.postrouting+" "+h.chains.prerouting, "dns", h.ServesDNS())
	return nil
}

// ensureSetup runs Setup unless this Host has already.
func (h *Host) ensureSetup(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.setUp {
		return nil
	}
	return h.setupLocked(ctx)
}

// Teardown undoes this Host: it detaches every sandbox it has a record or
// a namespace of, then removes the jumps to its chains and the chains. It
// detaches first because rules gone under attached sandboxes would let
// them reach whatever the host's own policy allows. IPv4 forwarding is
// left on: something else may need it. For tests and uninstalling.
func (h *Host) Teardown(ctx context.Context) error {
	ids, err := h.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		errs = append(errs, h.Detach(ctx, id))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setUp = false
	for _, hk := range h.chains.hooks() {
		listing, err := h.cmd.listChain(ctx, hk.table, hk.from)
		if err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
		count, _ := hookPlacement(listing, hk)
		if err := h.cmd.deleteHook(ctx, hk, count); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
	}
	// The egress and limits chains after the forward chain, the one that
	// jumps to them.
	for _, c := range []struct{ table, chain string }{{"filter", h.chains.input}, {"filter", h.chains.forward}, {"filter", h.chains.egress}, {"filter", h.chains.limits}, {"filter", h.chains.refuse}, {"nat", h.chains.postrouting}, {"nat", h.chains.prerouting}} {
		exists, err := h.cmd.chainExists(ctx, c.table, c.chain)
		if err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
		if !exists {
			continue
		}
		if _, err := h.cmd.iptables(ctx, "-t", c.table, "-F", c.chain); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
		if _, err := h.cmd.iptables(ctx, "-t", c.table, "-X", c.chain); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
	}
	// The sets once no rule matches them.
	for _, set := range []string{h.chains.allowSet, h.chains.denySet} {
		if _, err := h.cmd.ipset(ctx, "list", "-n", set); err != nil {
			continue
		}
		if _, err := h.cmd.ipset(ctx, "destroy", set); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
	}
	return nil
}

// Rules returns the Host's rules as iptables -S lists them, by table: what
// Setup installs.
func (h *Host) Rules() (filter, nat []string) {
	dnsPort := 0 // no redirect, no accept
	if h.ServesDNS() {
		dnsPort = h.dnsPort
	}
	return filterRules(h.chains, h.linkPrefix, h.subnet, h.deny, dnsPort, h.gatewayPort), natRules(h.chains, h.linkPrefix, h.subnet, dnsPort, h.gatewayPort)
}

// writeSysctl writes value to the sysctl file path unless it holds it
// already.
func writeSysctl(path, value string) error {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == value {
		return nil
	}
	return os.WriteFile(path, []byte(value), 0o644)
}

// Blocks reports whether addr is a destination the Host's policy keeps
// every sandbox from: an always-blocked range, the sandbox subnet, or
// Options.Deny; for IPv6 (which sandboxes do not have), any address that
// is not a global unicast one, or is a unique-local one. The daemon's
// egress gateway, which connects from the host on a sandbox's behalf,
// refuses such an upstream.
func (h *Host) Blocks(addr netip.Addr) bool {
	addr = addr.Unmap()
	if addr.Is6() {
		return !addr.IsGlobalUnicast() || addr.IsPrivate()
	}
	for _, p := range slices.Concat(blocked, []netip.Prefix{h.subnet}, h.deny) {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
