package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

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
	ipBin      string
	iptBin     string
	restoreBin string
	tcBin      string
	ipsetBin   string
	log        *slog.Logger
	onRefusal  func(Refusal)
	// dnsUpstreams are where the forwarder sends queries (none: no
	// name service); dnsPort is where it listens.
	dnsUpstreams []netip.AddrPort
	dnsPort      int
	// gatewayPort is the egress gateway's port (0: none), and
	// gatewayDomain its names' domain.
	gatewayPort   int
	gatewayDomain string

	mu    sync.Mutex // guards the records (allocation) and setUp
	setUp bool

	netMu   sync.Mutex // guards byAddr, its sandboxNets, and scanned
	byAddr  map[netip.Addr]*sandboxNet
	scanned time.Time
}

// New returns a Host for opts. It checks the options and that this host
// can do it: root, and the ip, tc, iptables and iptables-restore commands
// (ErrUnavailable otherwise). It changes nothing on the host: Setup does.
func New(opts Options) (*Host, error) {
	subnet := opts.Subnet
	if !subnet.IsValid() {
		subnet = defaultSubnet
	}
	if err := checkSubnet(subnet); err != nil {
		return nil, err
	}
	subnet = subnet.Masked()
	for _, p := range opts.Deny {
		if !p.IsValid() || !p.Addr().Is4() {
			return nil, fmt.Errorf("network: deny %v: want an IPv4 prefix", p)
		}
	}
	name := opts.Name
	if name == "" {
		name = "hearth"
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	prefix := opts.LinkPrefix
	if prefix == "" {
		prefix = "hv"
	}
	if !lowerAlnum(prefix, 2, 4, false) {
		return nil, fmt.Errorf("network: link prefix %q: want 2 to 4 lowercase letters", prefix)
	}
	stateDir := opts.StateDir
	if stateDir == "" {
		stateDir = "/var/lib/hearth/network"
	}
	dnsPort := opts.DNSPort
	if dnsPort == 0 {
		dnsPort = DefaultDNSPort
	}
	if dnsPort < 1 || dnsPort > 65535 || dnsPort == 53 {
		return nil, fmt.Errorf("network: dns port %d: want a port from 1 to 65535 other than 53", dnsPort)
	}
	for _, u := range opts.DNSUpstreams {
		if !u.IsValid() || u.Port() == 0 {
			return nil, fmt.Errorf("network: dns upstream %v: want an address and a port", u)
		}
	}
	if opts.GatewayPort < 0 || opts.GatewayPort > 65535 || opts.GatewayPort == 80 || opts.GatewayPort != 0 && opts.GatewayPort == dnsPort {
		return nil, fmt.Errorf("network: gateway port %d: want a port from 1 to 65535 other than 80 and the DNS port", opts.GatewayPort)
	}
	gatewayDomain := opts.GatewayDomain
	if gatewayDomain == "" {
		gatewayDomain = "hearth.internal"
	}
	if d, ok := sandbox.DomainName(gatewayDomain); !ok || d != gatewayDomain {
		return nil, fmt.Errorf("network: gateway domain %q: want a domain name in lower case", gatewayDomain)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	onRefusal := opts.OnRefusal
	if onRefusal == nil {
		onRefusal = func(Refusal) {}
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: it needs root", ErrUnavailable)
	}
	h := &Host{
		subnet:     subnet,
		deny:       opts.Deny,
		stateDir:   stateDir,
		name:       name,
		linkPrefix: prefix,
		chains:     chainsFor(name),
		log:        log,

		dnsUpstreams:  slices.Clone(opts.DNSUpstreams),
		dnsPort:       dnsPort,
		gatewayPort:   opts.GatewayPort,
		gatewayDomain: gatewayDomain,
		onRefusal:     onRefusal,
		byAddr:        map[netip.Addr]*sandboxNet{},
	}
	for _, b := range []struct {
		bin  *string
		name string
		pkg  string
	}{{&h.ipBin, "ip", "iproute2"}, {&h.tcBin, "tc", "iproute2"}, {&h.iptBin, "iptables", "iptables"}, {&h.restoreBin, "iptables-restore", "iptables"}, {&h.ipsetBin, "ipset", "ipset"}} {
		p, err := exec.LookPath(b.name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s not found (install %s)", ErrUnavailable, b.name, b.pkg)
		}
		*b.bin = p
	}
	return h, nil
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
	if err := h.ensureSets(ctx); err != nil {
		return fmt.Errorf("network: setup: %w", err)
	}
	// Before the policy, which jumps to them.
	for _, chain := range []string{h.chains.egress, h.chains.limits} {
		if err := h.ensureChain(ctx, "filter", chain); err != nil {
			return fmt.Errorf("network: setup: %w", err)
		}
	}
	in := restoreInput(h.chains, h.filterRules(), h.natRules())
	if _, err := h.run(ctx, strings.NewReader(in), h.restoreBin, "-w", "--noflush"); err != nil {
		return fmt.Errorf("network: setup: %w", err)
	}
	for _, hk := range h.chains.hooks() {
		if err := h.hookFirst(ctx, hk); err != nil {
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

// hookFirst places hk at the top of its built-in chain (see
// hookPlacement), as the only jump of its kind there: where other Hosts'
// jumps alone are above it, it stays. A jump found further down (another
// program inserted rules above it) moves to the first rule without a
// moment unhooked, and without
// deleting by rule number, which a program changing the chain meanwhile
// would make delete the wrong rule: a marked copy of the jump goes in
// first, then every plain one comes out (by its spec), the plain one goes in
// first, and the copy comes out.
func (h *Host) hookFirst(ctx context.Context, hk hook) error {
	listing, err := h.listChain(ctx, hk.table, hk.from)
	if err != nil {
		return err
	}
	count, placed := hookPlacement(listing, hk)
	if count == 1 && placed {
		return nil
	}
	plain := []string{"-t", hk.table, "-I", hk.from, "1", "-j", hk.to}
	if count == 0 {
		_, err := h.iptables(ctx, plain...)
		return err
	}
	marked := []string{"-m", "comment", "--comment", movingComment, "-j", hk.to}
	if _, err := h.iptables(ctx, append([]string{"-t", hk.table, "-I", hk.from, "1"}, marked...)...); err != nil {
		return err
	}
	if err := h.deleteHook(ctx, hk, count); err != nil {
		return err
	}
	if _, err := h.iptables(ctx, plain...); err != nil {
		return err
	}
	_, err = h.iptables(ctx, append([]string{"-t", hk.table, "-D", hk.from}, marked...)...)
	return err
}

// deleteHook deletes n plain jumps hk, each time the first one left.
func (h *Host) deleteHook(ctx context.Context, hk hook, n int) error {
	for range n {
		if _, err := h.iptables(ctx, "-t", hk.table, "-D", hk.from, "-j", hk.to); err != nil {
			return err
		}
	}
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
		listing, err := h.listChain(ctx, hk.table, hk.from)
		if err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
		count, _ := hookPlacement(listing, hk)
		if err := h.deleteHook(ctx, hk, count); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
	}
	// The egress and limits chains after the forward chain, the one that
	// jumps to them.
	for _, c := range []struct{ table, chain string }{{"filter", h.chains.input}, {"filter", h.chains.forward}, {"filter", h.chains.egress}, {"filter", h.chains.limits}, {"filter", h.chains.refuse}, {"nat", h.chains.postrouting}, {"nat", h.chains.prerouting}} {
		exists, err := h.chainExists(ctx, c.table, c.chain)
		if err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
		if !exists {
			continue
		}
		if _, err := h.iptables(ctx, "-t", c.table, "-F", c.chain); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
		if _, err := h.iptables(ctx, "-t", c.table, "-X", c.chain); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
	}
	// The sets once no rule matches them.
	for _, set := range []string{h.chains.allowSet, h.chains.denySet} {
		if _, err := h.run(ctx, nil, h.ipsetBin, "list", "-n", set); err != nil {
			continue
		}
		if _, err := h.run(ctx, nil, h.ipsetBin, "destroy", set); err != nil {
			return fmt.Errorf("network: teardown: %w", err)
		}
	}
	return nil
}

// Rules returns the Host's rules as iptables -S lists them, by table: what
// Setup installs.
func (h *Host) Rules() (filter, nat []string) {
	return h.filterRules(), h.natRules()
}

// redirectPort is the port sandboxes' DNS queries are redirected to, or 0
// when the Host serves no DNS (no redirect, no accept).
func (h *Host) redirectPort() int {
	if !h.ServesDNS() {
		return 0
	}
	return h.dnsPort
}

func (h *Host) filterRules() []string {
	return filterRules(h.chains, h.linkPrefix, h.subnet, h.deny, h.redirectPort(), h.gatewayPort)
}

func (h *Host) natRules() []string {
	return natRules(h.chains, h.linkPrefix, h.subnet, h.redirectPort(), h.gatewayPort)
}

// ensureChain creates chain in table unless it is there.
func (h *Host) ensureChain(ctx context.Context, table, chain string) error {
	if exists, err := h.chainExists(ctx, table, chain); err != nil || exists {
		return err
	}
	if _, err := h.iptables(ctx, "-t", table, "-N", chain); err != nil {
		// Another process may have made it meanwhile.
		if exists, _ := h.chainExists(ctx, table, chain); exists {
			return nil
		}
		return err
	}
	return nil
}

// chainExists reports whether table has chain.
func (h *Host) chainExists(ctx context.Context, table, chain string) (bool, error) {
	listing, err := h.listChain(ctx, table, "")
	if err != nil {
		return false, err
	}
	return slices.Contains(listing, "-N "+chain), nil
}

// listChain returns `iptables -t table -S [chain]`, line by line.
func (h *Host) listChain(ctx context.Context, table, chain string) ([]string, error) {
	args := []string{"-t", table, "-S"}
	if chain != "" {
		args = append(args, chain)
	}
	out, err := h.iptables(ctx, args...)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// iptables runs iptables -w (waiting for the xtables lock that another
// program may hold) with args.
func (h *Host) iptables(ctx context.Context, args ...string) ([]byte, error) {
	return h.run(ctx, nil, h.iptBin, append([]string{"-w"}, args...)...)
}

// ip runs ip with args.
func (h *Host) ip(ctx context.Context, args ...string) ([]byte, error) {
	return h.run(ctx, nil, h.ipBin, args...)
}

// run runs bin with args and stdin, and returns its stdout; the error
// quotes the command and its stderr.
func (h *Host) run(ctx context.Context, stdin *strings.Reader, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	h.log.Debug("network command", "cmd", bin, "args", args, "took", time.Since(began).Round(time.Microsecond), "err", err)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
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
