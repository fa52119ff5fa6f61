package network_test

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/network"
)

// The host of these tests has a name, link prefix, subnet and test host
// addresses of its own, so that it never meets a daemon's, nor driver/oci's
// tests running at the same time.
const (
	testName   = "hearthnet"
	testPrefix = "hn"
	testChain  = "HEARTHNET"
)

var testSubnet = netip.MustParsePrefix("10.202.0.0/16")

// testDNSPort is where the DNS forwarder of these tests listens: not a
// daemon's, nor driver/oci's tests'.
const testDNSPort = 10253

// hostNames are what sets a test's Host apart from every other on this
// machine: its name, link prefix, subnet and DNS port.
type hostNames struct {
	name, prefix string
	subnet       netip.Prefix
	dnsPort      int
}

// testHost is the names of the Host of most tests.
var testHost = hostNames{testName, testPrefix, testSubnet, testDNSPort}

// openHost returns a Host on stateDir for the tests, serving DNS through
// upstreams when there are any.
func openHost(t testing.TB, stateDir string, upstreams ...netip.AddrPort) *network.Host {
	t.Helper()
	return openNamedHost(t, testHost, stateDir, nil, upstreams...)
}

// openNamedHost is openHost for the Host named by names, with
// Options.OnRefusal.
func openNamedHost(t testing.TB, names hostNames, stateDir string, onRefusal func(network.Refusal), upstreams ...netip.AddrPort) *network.Host {
	t.Helper()
	h, err := network.New(network.Options{Subnet: names.subnet, StateDir: stateDir, Name: names.name, LinkPrefix: names.prefix, DNSUpstreams: upstreams, DNSPort: names.dnsPort, OnRefusal: onRefusal})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return h
}

// newHost is openHost on a fresh state directory, as root; t's cleanup
// tears it down and wants nothing of it left on the host.
func newHost(t testing.TB, upstreams ...netip.AddrPort) (*network.Host, string) {
	t.Helper()
	return newNamedHost(t, testHost, nil, upstreams...)
}

// newHostWith is newHost with Options.OnRefusal.
func newHostWith(t testing.TB, onRefusal func(network.Refusal), upstreams ...netip.AddrPort) (*network.Host, string) {
	t.Helper()
	return newNamedHost(t, testHost, onRefusal, upstreams...)
}

// newNamedHost is newHostWith for the Host named by names.
func newNamedHost(t testing.TB, names hostNames, onRefusal func(network.Refusal), upstreams ...netip.AddrPort) (*network.Host, string) {
	t.Helper()
	drivertest.RequireRoot(t)
	dir := t.TempDir()
	h := openNamedHost(t, names, dir, onRefusal, upstreams...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.Teardown(ctx); err != nil {
			t.Errorf("cleanup: Teardown() = %v", err)
		}
		for _, left := range drivertest.NetworkObjects(t, names.name, names.prefix) {
			t.Errorf("after Teardown, left on the host: %s", left)
		}
	})
	return h, dir
}

// run runs a command and returns its output; it fails t on error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// rules returns the rules of chain in table, as iptables -S lists them.
func rules(t testing.TB, table, chain string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(run(t, "iptables", "-w", "-t", table, "-S", chain), "\n") {
		if strings.HasPrefix(line, "-A ") {
			out = append(out, line)
		}
	}
	return out
}

// hookPlaced reports whether listing, the rules of built-in chain from,
// holds the jump to chain to once, with nothing above it but other
// hosts' jumps (another daemon's or test's Host may run meanwhile).
func hookPlaced(listing []string, from, to string) bool {
	count, placed := network.HookPlacement(listing, from, to)
	return count == 1 && placed
}

// wantChains checks that each of h's chains (a table and the suffix of
// the chain's name) holds exactly h's rules for it.
func wantChains(t *testing.T, h *network.Host, when string, chains ...[2]string) {
	t.Helper()
	filter, nat := h.Rules()
	for _, c := range chains {
		table, chain := c[0], testChain+c[1]
		var want []string
		for _, r := range slices.Concat(filter, nat) {
			if strings.HasPrefix(r, "-A "+chain+" ") {
				want = append(want, r)
			}
		}
		if got := rules(t, table, chain); !slices.Equal(got, want) {
			t.Errorf("%s %s %s:\n%s\nwant:\n%s", table, chain, when, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestSetup: two Setups (a daemon restart) leave the policy once, its
// chains each jumped to once from the top of INPUT, FORWARD, POSTROUTING
// and PREROUTING (empty with no DNS), and IPv4
// forwarding on; a Setup after another program put a rule above a jump
// (and a stray copy of it further down) moves the jump back up, leaving
// that program's rule alone.
func TestSetup(t *testing.T) {
	h, _ := newHost(t)
	for i := range 2 {
		if err := h.Setup(t.Context()); err != nil {
			t.Fatalf("Setup() #%d = %v", i+1, err)
		}
	}
	foreign := []string{"INPUT", "-i", testPrefix + "zz+", "-m", "comment", "--comment", "network test: another program", "-j", "ACCEPT"}
	run(t, "iptables", append([]string{"-w", "-I"}, foreign...)...)
	t.Cleanup(func() { exec.Command("iptables", append([]string{"-w", "-D"}, foreign...)...).Run() })
	run(t, "iptables", "-w", "-A", "INPUT", "-j", testChain+"-INPUT")
	if err := h.Setup(t.Context()); err != nil {
		t.Fatalf("Setup() after another program's rule = %v", err)
	}
	if got := rules(t, "filter", "INPUT"); !slices.ContainsFunc(got, func(r string) bool { return strings.Contains(r, "network test: another program") }) {
		t.Errorf("INPUT after Setup = %q, want the other program's rule kept", got)
	}
	// A Host of another process on the same state: the same rules again.
	if err := openHost(t, t.TempDir()).Setup(t.Context()); err != nil {
		t.Fatalf("Setup() by another Host = %v", err)
	}
	// With no DNS, the PREROUTING chain is there, hooked, and empty.
	wantChains(t, h, "after three Setups", [2]string{"filter", "-INPUT"}, [2]string{"filter", "-FORWARD"}, [2]string{"nat", "-POSTROUTING"}, [2]string{"nat", "-PREROUTING"})
	for _, c := range []struct{ table, from, to string }{{"filter", "INPUT", "-INPUT"}, {"filter", "FORWARD", "-FORWARD"}, {"nat", "POSTROUTING", "-POSTROUTING"}, {"nat", "PREROUTING", "-PREROUTING"}} {
		if got := rules(t, c.table, c.from); !hookPlaced(got, c.from, testChain+c.to) {
			t.Errorf("%s %s = %q, want the jump to %s once, at the top", c.table, c.from, got, testChain+c.to)
		}
	}
	if got := rules(t, "filter", testChain+"-LIMITS"); len(got) != 0 {
		t.Errorf("filter %s-LIMITS with no sandbox attached = %q, want it empty", testChain, got)
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Errorf("ip_forward = %q, %v; want 1", b, err)
	}
}

// TestSetupDNS: a Host with DNS upstreams adds, at two Setups once each,
// the redirect of port 53 in its PREROUTING chain (hooked first in nat
// PREROUTING) and the accept of redirected queries first in its INPUT
// chain; Teardown (newHost's cleanup) leaves none of it. A Host with no
// upstreams refuses to serve DNS.
func TestSetupDNS(t *testing.T) {
	h, _ := newHost(t, netip.MustParseAddrPort("127.0.0.1:1053"))
	for i := range 2 {
		if err := h.Setup(t.Context()); err != nil {
			t.Fatalf("Setup() #%d = %v", i+1, err)
		}
	}
	wantChains(t, h, "after two Setups", [2]string{"filter", "-INPUT"}, [2]string{"nat", "-PREROUTING"})
	port := strconv.Itoa(testDNSPort)
	for _, c := range []struct {
		table, chain, rule string
		at                 int
	}{
		{"nat", "PREROUTING", "-A PREROUTING -j " + testChain + "-PREROUTING", 0},
		{"nat", testChain + "-PREROUTING", "-A " + testChain + "-PREROUTING -i " + testPrefix + "+ -p udp -m udp --dport 53 -j REDIRECT --to-ports " + port, 0},
		{"nat", testChain + "-PREROUTING", "-A " + testChain + "-PREROUTING -i " + testPrefix + "+ -p tcp -m tcp --dport 53 -j REDIRECT --to-ports " + port, 1},
		{"filter", testChain + "-INPUT", "-A " + testChain + "-INPUT -i " + testPrefix + "+ -p udp -m udp --dport " + port + " -m conntrack --ctstate DNAT -j ACCEPT", 0},
		{"filter", testChain + "-INPUT", "-A " + testChain + "-INPUT -i " + testPrefix + "+ -p tcp -m tcp --dport " + port + " -m conntrack --ctstate DNAT -j ACCEPT", 1},
	} {
		got := rules(t, c.table, c.chain)
		if n := strings.Count(strings.Join(got, "\n")+"\n", c.rule+"\n"); n != 1 || len(got) <= c.at || got[c.at] != c.rule {
			t.Errorf("%s %s = %q, want %q once, rule %d", c.table, c.chain, got, c.rule, c.at+1)
		}
	}
	if err := openHost(t, t.TempDir()).ServeDNS(t.Context()); !errors.Is(err, network.ErrNoDNS) {
		t.Errorf("ServeDNS() with no upstreams = %v, want ErrNoDNS", err)
	}
}

// dnsProbe is a python3 program that sends its first argument, a DNS query
// in hex, to each "udp:addr:port" or "tcp:addr:port" of the others (TCP
// framed by its length) and prints one line per target: the target and
// the answer in hex, "timeout", "refused" or "error" and the errno.
const dnsProbe = `import socket, sys
q = bytes.fromhex(sys.argv[1])
for t in sys.argv[2:]:
    proto, host, port = t.split(":")
    try:
        if proto == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(3)
            s.connect((host, int(port)))
            s.send(q)
            r = s.recv(65535)
        else:
            s = socket.create_connection((host, int(port)), timeout=3)
            s.sendall(len(q).to_bytes(2, "big") + q)
            h = b""
            while len(h) < 2:
                b = s.recv(2 - len(h))
                if not b:
                    raise ConnectionRefusedError()
                h += b
            n, r = int.from_bytes(h, "big"), b""
            while len(r) < n:
                b = s.recv(n - len(r))
                if not b:
                    break
                r += b
        print(t, r.hex())
    except socket.timeout:
        print(t, "timeout")
    except ConnectionRefusedError:
        print(t, "refused")
    except OSError as e:
        print(t, "error", e.errno)
`

// TestDNS, with the kernel's own stack in a sandbox's namespace: a DNS
// query to port 53 of its gateway, over UDP and TCP, and to port 53 of an
// address that is not the host's (a private one, which the policy would
// reject) reaches the forwarder and gets the test upstream's answer; the
// forwarder's own port, asked directly, refuses.
func TestDNS(t *testing.T) {
	upstream := drivertest.NewTestDNS(t, map[string]netip.Addr{testDNSName: testAddr})
	h, _ := newHost(t, upstream)
	drivertest.ServeDNS(t, h)
	a, err := h.Attach(t.Context(), "dnsa", network.Limits{}, network.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	gw, port := a.Gateway.String(), strconv.Itoa(testDNSPort)
	targets := []string{"udp:" + gw + ":53", "tcp:" + gw + ":53", "udp:10.124.53.53:53"}
	direct := []string{"udp:" + gw + ":" + port, "tcp:" + gw + ":" + port}
	var got map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out := run(t, "ip", append([]string{"netns", "exec", filepath.Base(a.Namespace), "python3", "-c", dnsProbe, hex.EncodeToString(drivertest.DNSQuery(77, testDNSName))}, slices.Concat(targets, direct)...)...)
		got = drivertest.ParseProbe(out)
		if got[targets[0]] != "timeout" || time.Now().After(deadline) {
			break // the forwarder listens (or never will)
		}
	}
	t.Logf("in %s: %v", a.ID, got)
	for _, target := range targets {
		b, err := hex.DecodeString(got[target])
		var r drivertest.DNSReply
		if err == nil {
			r, err = drivertest.ParseDNSReply(b)
		}
		wantAnswer(t, a.ID+" → "+target, r, err, 77)
	}
	for _, target := range direct {
		if got[target] != "refused" {
			t.Errorf("%s → %s (the forwarder's own port) = %s, want refused", a.ID, target, got[target])
		}
	}
}

// TestAttach: Attach makes the namespace, the veth, the /31 and the
// default route, with no IPv6; again (or by a Host of a restarted daemon)
// it returns the same attachment and repairs what gVisor takes away;
// another sandbox gets another address; Detach removes it all, twice.
func TestAttach(t *testing.T) {
	h, dir := newHost(t)
	ctx := t.Context()
	a, err := h.Attach(ctx, "sba", network.Limits{}, network.Egress{})
	if err != nil {
		t.Fatalf("Attach(sba) = %v", err)
	}
	t.Logf("Attach(sba) = %+v", a)
	if a.ID != "sba" || a.Namespace != "/run/netns/"+testName+"-sba" || a.Link != h.Link("sba") || !testSubnet.Contains(a.Addr) || a.Gateway.Next() != a.Addr {
		t.Errorf("Attach(sba) = %+v, want the namespace, link and a pair of %v", a, testSubnet)
	}
	wantPlumbed(t, a)

	b, err := h.Attach(ctx, "sbb", network.Limits{}, network.Egress{})
	if err != nil {
		t.Fatalf("Attach(sbb) = %v", err)
	}
	if b.Addr == a.Addr || b.Gateway == a.Gateway || b.Link == a.Link {
		t.Errorf("Attach(sbb) = %+v, shares with %+v", b, a)
	}

	// gVisor takes eth0's addresses (and with them the routes) away.
	run(t, "ip", "-n", testName+"-sba", "address", "flush", "dev", "eth0")
	again, err := openHost(t, dir).Attach(ctx, "sba", network.Limits{}, network.Egress{})
	if err != nil || again != a {
		t.Errorf("Attach(sba) by a new Host = %+v, %v; want %+v", again, err, a)
	}
	wantPlumbed(t, a)
	if ids, err := h.List(); err != nil || !slices.Equal(ids, []string{"sba", "sbb"}) {
		t.Errorf("List() = %v, %v; want [sba sbb]", ids, err)
	}

	for i := range 2 {
		if err := h.Detach(ctx, "sba"); err != nil {
			t.Fatalf("Detach(sba) #%d = %v", i+1, err)
		}
	}
	if h.Attached("sba") {
		t.Errorf("Attached(sba) after Detach = true")
	}
	if _, err := os.Lstat(a.Namespace); err == nil {
		t.Errorf("namespace %s still there after Detach", a.Namespace)
	}
	if _, err := net.InterfaceByName(a.Link); err == nil {
		t.Errorf("link %s still there after Detach", a.Link)
	}
	if _, err := os.Stat(filepath.Join(dir, "sba")); err == nil {
		t.Errorf("address record of sba still there after Detach")
	}
	if !h.Attached("sbb") {
		t.Errorf("Attached(sbb) = false after Detach(sba)")
	}
}

// wantPlumbed checks a's namespace, veth, addresses and routes.
func wantPlumbed(t *testing.T, a network.Attachment) {
	t.Helper()
	ns := filepath.Base(a.Namespace)
	var st syscall.Statfs_t
	if err := syscall.Statfs(a.Namespace, &st); err != nil || st.Type != 0x6e736673 {
		t.Errorf("%s is not a mounted namespace: %v", a.Namespace, err)
	}
	if got := run(t, "ip", "-4", "-o", "address", "show", "dev", a.Link); !strings.Contains(got, "inet "+a.Gateway.String()+"/31 ") {
		t.Errorf("host side %s: %q, want %s/31", a.Link, got, a.Gateway)
	}
	if got := run(t, "ip", "-6", "-o", "address", "show", "dev", a.Link); got != "" {
		t.Errorf("host side %s has IPv6: %q", a.Link, got)
	}
	if got := run(t, "ip", "-n", ns, "-4", "-o", "address", "show", "dev", "eth0"); !strings.Contains(got, "inet "+a.Addr.String()+"/31 ") {
		t.Errorf("eth0 in %s: %q, want %s/31", ns, got, a.Addr)
	}
	if got := run(t, "ip", "-n", ns, "-6", "-o", "address", "show"); got != "" {
		t.Errorf("namespace %s has IPv6 addresses: %q", ns, got)
	}
	if got := run(t, "ip", "-n", ns, "route", "show", "default"); !strings.HasPrefix(got, "default via "+a.Gateway.String()+" dev eth0") {
		t.Errorf("default route in %s = %q, want via %s", ns, got, a.Gateway)
	}
	if got := run(t, "ip", "-n", ns, "-o", "link", "show", "lo"); !strings.Contains(got, ",UP") {
		t.Errorf("lo in %s = %q, want it up", ns, got)
	}
	if got := run(t, "ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6"); got != "1" {
		t.Errorf("IPv6 in %s: disable_ipv6 = %q, want 1", ns, got)
	}
}

// TestLimits: Attach with limits puts a token bucket on the sandbox's veth
// each way (from the sandbox, through its ifb) and one connection rule in
// the limits chain; Setup again (a daemon restart, by this Host or
// another) keeps that rule, once; Attach again with other limits leaves
// only those, and with none, none; Detach leaves nothing of them. Another
// sandbox, attached with none, has none throughout.
func TestLimits(t *testing.T) {
	h, dir := newHost(t)
	ctx := t.Context()
	if _, err := h.Attach(ctx, "limneg", network.Limits{BitsPerSec: -1}, network.Egress{}); err == nil {
		t.Errorf("Attach(limneg, a negative rate) = nil, want an error")
	}
	if h.Attached("limneg") {
		t.Errorf("Attach(limneg, a negative rate) attached it")
	}
	small := network.Limits{BitsPerSec: 8e6, Conns: 5}
	a, err := h.Attach(ctx, "lima", small, network.Egress{})
	if err != nil {
		t.Fatalf("Attach(lima, %+v) = %v", small, err)
	}
	b, err := h.Attach(ctx, "limb", network.Limits{}, network.Egress{})
	if err != nil {
		t.Fatalf("Attach(limb) = %v", err)
	}
	wantLimits(t, h, a, small)
	wantLimits(t, h, b, network.Limits{})

	for i := range 2 {
		if err := h.Setup(ctx); err != nil {
			t.Fatalf("Setup() #%d = %v", i+1, err)
		}
	}
	if err := openHost(t, dir).Setup(ctx); err != nil {
		t.Fatalf("Setup() by another Host = %v", err)
	}
	wantLimits(t, h, a, small)
	if again, err := openHost(t, dir).Attach(ctx, "lima", small, network.Egress{}); err != nil || again != a {
		t.Fatalf("Attach(lima, %+v) again by a new Host = %+v, %v; want %+v", small, again, err, a)
	}
	wantLimits(t, h, a, small)

	for _, lim := range []network.Limits{
		{BitsPerSec: 16e6, Conns: 7},
		{Conns: 7},
		{BitsPerSec: 16e6},
		{},
		small,
	} {
		if _, err := h.Attach(ctx, "lima", lim, network.Egress{}); err != nil {
			t.Fatalf("Attach(lima, %+v) = %v", lim, err)
		}
		wantLimits(t, h, a, lim)
	}
	wantLimits(t, h, b, network.Limits{})

	if err := h.Detach(ctx, "lima"); err != nil {
		t.Fatalf("Detach(lima) = %v", err)
	}
	if _, err := net.InterfaceByName(h.IFB("lima")); err == nil {
		t.Errorf("ifb %s still there after Detach", h.IFB("lima"))
	}
	if got := limitRulesOf(t, a.Link); len(got) != 0 {
		t.Errorf("limit rules of %s after Detach = %q, want none", a.Link, got)
	}
	if h.Attached("lima") {
		t.Errorf("Attached(lima) after Detach = true")
	}
	wantLimits(t, h, b, network.Limits{})
}

// wantLimits checks that a has the limits lim and no others: the qdiscs
// of its veth and its ifb, the filter between them, and its rule in the
// limits chain. The rates used are whole Mbit/s, which tc prints as such.
func wantLimits(t *testing.T, h *network.Host, a network.Attachment, lim network.Limits) {
	t.Helper()
	ifb := h.IFB(a.ID)
	qdiscs := run(t, "tc", "qdisc", "show", "dev", a.Link)
	_, ifbErr := net.InterfaceByName(ifb)
	if lim.BitsPerSec > 0 {
		rate := " rate " + strconv.FormatInt(lim.BitsPerSec/1e6, 10) + "Mbit "
		if n := strings.Count(qdiscs, "qdisc tbf "); n != 1 || !strings.Contains(qdiscs, " root ") || !strings.Contains(qdiscs, rate) || !strings.Contains(qdiscs, "qdisc ingress ffff:") {
			t.Errorf("%s: tc qdisc show dev %s:\n%s\nwant one tbf root with%sand an ingress", a.ID, a.Link, qdiscs, rate)
		}
		if filters := run(t, "tc", "filter", "show", "dev", a.Link, "ingress"); strings.Count(filters, "mirred") != 1 || !strings.Contains(filters, "mirred (Egress Redirect to device "+ifb+")") {
			t.Errorf("%s: tc filter show dev %s ingress:\n%s\nwant one redirect to %s", a.ID, a.Link, filters, ifb)
		}
		if ifbErr != nil {
			t.Errorf("%s: ifb %s: %v", a.ID, ifb, ifbErr)
		} else {
			if got := run(t, "tc", "qdisc", "show", "dev", ifb); !strings.HasPrefix(got, "qdisc tbf ") || !strings.Contains(got, " root ") || !strings.Contains(got, rate) {
				t.Errorf("%s: tc qdisc show dev %s:\n%s\nwant a tbf root with%s", a.ID, ifb, got, rate)
			}
			if got := run(t, "ip", "-o", "link", "show", "dev", ifb); !strings.Contains(got, ",UP") {
				t.Errorf("%s: ifb %s = %q, want it up", a.ID, ifb, got)
			}
		}
	} else {
		if strings.Contains(qdiscs, "tbf") || strings.Contains(qdiscs, "ingress") {
			t.Errorf("%s with no rate cap: tc qdisc show dev %s:\n%s\nwant no tbf and no ingress", a.ID, a.Link, qdiscs)
		}
		if ifbErr == nil {
			t.Errorf("%s with no rate cap has an ifb %s", a.ID, ifb)
		}
	}
	var want []string
	if lim.Conns > 0 {
		want = []string{network.ConnRule(testChain+"-LIMITS", a.Link, lim.Conns)}
	}
	if got := limitRulesOf(t, a.Link); !slices.Equal(got, want) {
		t.Errorf("%s: limit rules = %q, want %q", a.ID, got, want)
	}
}

// limitRulesOf returns the rules of the limits chain for link.
func limitRulesOf(t *testing.T, link string) []string {
	t.Helper()
	return linkRulesOf(t, testChain+"-LIMITS", link)
}

// TestPolicy, with the kernel's own stack in the namespaces (no runtime):
// a sandbox reaches a test host at a public address, and not one at a
// private or a link-local address, the host through its gateway, nor
// another sandbox; and nothing it did not open reaches it.
func TestPolicy(t *testing.T) {
	h, _ := newHost(t)
	ctx := t.Context()
	public := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.1"), 8080)
	private := drivertest.NewTestHost(t, netip.MustParseAddr("10.124.0.1"), 8080)
	linkLocal := drivertest.NewTestHost(t, netip.MustParseAddr("169.254.124.1"), 8080)
	a, err := h.Attach(ctx, "pola", network.Limits{}, network.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Attach(ctx, "polb", network.Limits{}, network.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	hostTarget := net.JoinHostPort(a.Gateway.String(), strconv.Itoa(drivertest.ListenAll(t)))

	// A server in b's namespace, on 0.0.0.0; b reaches it itself.
	bTarget := net.JoinHostPort(b.Addr.String(), "8081")
	srv := exec.Command("ip", "netns", "exec", filepath.Base(b.Namespace), "python3", "-c", drivertest.AcceptServer, "0.0.0.0", "8081")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for deadline := time.Now().Add(15 * time.Second); probeIn(t, b, bTarget)[bTarget] != "ok"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server in %s at %s does not answer its own namespace", b.Namespace, bTarget)
		}
	}

	got := probeIn(t, a, public.Target(), private.Target(), linkLocal.Target(), hostTarget, bTarget)
	if got[public.Target()] != "ok" {
		t.Errorf("%s → %s (public) = %s, want ok", a.ID, public.Target(), got[public.Target()])
	}
	for _, target := range []string{private.Target(), linkLocal.Target(), hostTarget, bTarget} {
		if got[target] != "refused" {
			t.Errorf("%s → %s = %s, want refused (rejected)", a.ID, target, got[target])
		}
	}

	// The public test host sees the host (masquerade), not the sandbox.
	peer := exec.Command("ip", "netns", "exec", public.Namespace, "python3", "-c",
		"import socket; s = socket.socket(); s.bind(('"+public.Addr.String()+"', 8082)); s.listen(); s.settimeout(20); c, a = s.accept(); print(a[0])")
	var seen strings.Builder
	peer.Stdout = &seen
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Process.Kill(); peer.Wait() })
	target := net.JoinHostPort(public.Addr.String(), "8082")
	for deadline := time.Now().Add(15 * time.Second); probeIn(t, a, target)[target] != "ok"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s → %s never ok", a.ID, target)
		}
	}
	peer.Wait()
	if got := strings.TrimSpace(seen.String()); got == a.Addr.String() || got == "" {
		t.Errorf("the public test host saw the connection from %q, want the host's address, not the sandbox's %s", got, a.Addr)
	}
}

// probeIn runs drivertest.ConnectProbe in a's namespace.
func probeIn(t *testing.T, a network.Attachment, targets ...string) map[string]string {
	t.Helper()
	out := run(t, "ip", append([]string{"netns", "exec", filepath.Base(a.Namespace), "python3", "-c", drivertest.ConnectProbe}, targets...)...)
	got := drivertest.ParseProbe(out)
	t.Logf("in %s: %v", a.ID, got)
	return got
}
