package drivertest

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/sandbox"
)

// The test hosts testEgress makes (see NewTestHost), all on port
// egressPort: one at a public address, which egress reaches (TEST-NET-2, a
// documentation range: not private, so the policy lets it through, and
// routed nowhere but to the test's own host), one in a private range and one
// link-local, which it must not reach.
var (
	egressPublic    = netip.MustParseAddr("198.51.100.1")
	egressPrivate   = netip.MustParseAddr("10.123.0.1")
	egressLinkLocal = netip.MustParseAddr("169.254.123.1")
)

const (
	egressPort = 8080
	// sandboxServerPort is where a server in an egress sandbox listens, on
	// 0.0.0.0, for another sandbox to try.
	sandboxServerPort = 8081
)

// netInfoScript prints the sandbox's IPv4 address, the source it would use
// toward its argument (a UDP connect only picks a route, it sends
// nothing), then its default gateway from /proc/net/route.
const netInfoScript = `import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[1], 9))
print(s.getsockname()[0])
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        print(socket.inet_ntoa(struct.pack("=L", int(f[2], 16))))
        break
`

// testEgress, for a driver whose Capabilities say Egress: an egress
// sandbox reaches a test host at a public address; a sandbox with no
// network does not; and an egress sandbox does not reach the host (a
// server bound to 0.0.0.0, through the sandbox's gateway), a test host at
// a private address or a link-local one, nor a server in another egress
// sandbox. A woken sandbox keeps its address and its egress, and so does
// one a new driver value recovered; Delete and a failed start leave
// nothing. The test hosts are the test's own (NewTestHost), so every
// connection stays on this machine whatever the policy does.
func (s *suite) testEgress(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	requireEgress(t, d)
	public := NewTestHost(t, egressPublic, egressPort)
	private := NewTestHost(t, egressPrivate, egressPort)
	linkLocal := NewTestHost(t, egressLinkLocal, egressPort)
	hostPort := ListenAll(t)

	a, b, none := s.spec(t), s.spec(t), s.spec(t)
	a.Network, b.Network, none.Network = driver.NetworkEgress, driver.NetworkEgress, driver.NetworkNone
	for _, spec := range []driver.Spec{a, b, none} {
		s.start(t, d, spec)
	}
	aAddr, aGateway := sandboxNet(t, d, a.ID, public.Addr)
	bAddr, _ := sandboxNet(t, d, b.ID, public.Addr)
	t.Logf("sandbox %s: %s via %s; sandbox %s: %s", a.ID, aAddr, aGateway, b.ID, bAddr)
	if aAddr == bAddr {
		t.Fatalf("sandboxes %s and %s share address %s", a.ID, b.ID, aAddr)
	}

	// A server in b, on every address of b's: b reaches it itself.
	bTarget := net.JoinHostPort(bAddr, strconv.Itoa(sandboxServerPort))
	serveInSandbox(t, d, b.ID, sandboxServerPort)
	for deadline := time.Now().Add(20 * time.Second); probe(t, d, b.ID, bTarget)[bTarget] != "ok"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server in sandbox %s at %s does not answer its own sandbox", b.ID, bTarget)
		}
	}

	gatewayTarget := net.JoinHostPort(aGateway, strconv.Itoa(hostPort))
	got := probe(t, d, a.ID, public.Target(), private.Target(), linkLocal.Target(), gatewayTarget, bTarget)
	if got[public.Target()] != "ok" {
		t.Errorf("egress sandbox %s → test host %s (public) = %s, want ok", a.ID, public.Target(), got[public.Target()])
	}
	for target, what := range map[string]string{
		private.Target():   "a test host at a private address",
		linkLocal.Target(): "a test host at a link-local address",
		gatewayTarget:      "a server of the host on 0.0.0.0, through the sandbox's gateway",
		bTarget:            "a server in another egress sandbox",
	} {
		if got[target] == "ok" {
			t.Errorf("egress sandbox %s → %s (%s) = ok, want it unreachable", a.ID, target, what)
		}
	}
	if res := probe(t, d, none.ID, public.Target())[public.Target()]; res == "ok" {
		t.Errorf("sandbox %s with network %q → test host %s = ok, want it unreachable", none.ID, none.Network, public.Target())
	}

	// A wake keeps the address and the egress.
	if err := d.Stop(t.Context(), a.ID); err != nil {
		t.Fatalf("Stop(%s) = %v", a.ID, err)
	}
	s.start(t, d, a)
	if addr, _ := sandboxNet(t, d, a.ID, public.Addr); addr != aAddr {
		t.Errorf("sandbox %s woke with address %s, want its own %s", a.ID, addr, aAddr)
	}
	got = probe(t, d, a.ID, public.Target(), private.Target())
	if got[public.Target()] != "ok" || got[private.Target()] == "ok" {
		t.Errorf("woken egress sandbox %s: %v; want only %s ok", a.ID, got, public.Target())
	}

	// So does a daemon restart.
	if tg.Reopen != nil {
		d = tg.Reopen(t)
		if _, err := d.Recover(t.Context()); err != nil {
			t.Fatalf("Recover() = %v", err)
		}
		got = probe(t, d, a.ID, public.Target(), private.Target())
		if got[public.Target()] != "ok" || got[private.Target()] == "ok" {
			t.Errorf("egress sandbox %s after a driver restart: %v; want only %s ok", a.ID, got, public.Target())
		}
		if err := d.Stop(t.Context(), b.ID); err != nil {
			t.Fatalf("Stop(%s) = %v", b.ID, err)
		}
	}

	// Delete, of a running and of a stopped egress sandbox, leaves
	// nothing.
	for _, id := range []string{a.ID, b.ID} {
		if err := d.Delete(t.Context(), id); err != nil {
			t.Fatalf("Delete(%s) = %v", id, err)
		}
		wantGone(t, tg, d, id)
	}

	// So does a failed start.
	agent := filepath.Join(t.TempDir(), "exits")
	writeScript(t, agent, "#!/bin/sh\necho drivertest: agent exits at once >&2\nexit 3\n")
	failing := s.spec(t)
	failing.Network, failing.AgentPath = driver.NetworkEgress, agent
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.StartTimeout)
	defer cancel()
	if err := d.Start(ctx, failing); err == nil {
		d.Delete(context.Background(), failing.ID)
		t.Fatalf("Start(%s) with an agent that exits succeeded", failing.ID)
	}
	wantGone(t, tg, d, failing.ID)
}

// ListenAll listens on 0.0.0.0 (every address of the host, a sandbox's
// gateway included) and returns the port; it accepts and closes
// connections until t's cleanup. A connection from the host itself checks
// that it does answer.
func ListenAll(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptAndClose(ln, func() {})
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 3*time.Second)
	if err != nil {
		t.Fatalf("the host's own server on 0.0.0.0:%d: %v", port, err)
	}
	c.Close()
	return port
}

// sandboxNet returns sandbox id's address and default gateway, as the
// sandbox sees them (to is any address its default route leads to).
func sandboxNet(t *testing.T, d driver.Driver, id string, to netip.Addr) (addr, gateway string) {
	t.Helper()
	out := execArgv(t, d, id, "python3", "-c", netInfoScript, to.String())
	lines := strings.Fields(out)
	if len(lines) != 2 {
		t.Fatalf("address and gateway of sandbox %s: %q, want two lines", id, out)
	}
	return lines[0], lines[1]
}

// probe runs ConnectProbe in sandbox id for targets.
func probe(t *testing.T, d driver.Driver, id string, targets ...string) map[string]string {
	t.Helper()
	out := execArgv(t, d, id, append([]string{"python3", "-c", ConnectProbe}, targets...)...)
	got := ParseProbe(out)
	t.Logf("in sandbox %s: %v", id, got)
	return got
}

// serveInSandbox starts AcceptServer on 0.0.0.0:port in the background of
// sandbox id.
func serveInSandbox(t *testing.T, d driver.Driver, id string, port int) {
	t.Helper()
	var out bytes.Buffer
	res, err := agentClient(d, id).Exec(t.Context(), sandbox.ExecRequest{
		Shell:   `python3 -c "$SERVER" 0.0.0.0 ` + strconv.Itoa(port) + ` </dev/null >/dev/null 2>&1 &`,
		Env:     map[string]string{"SERVER": AcceptServer},
		Timeout: sandbox.Duration(30 * time.Second),
	}, nil, &out, &out)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%s, start a server) = %+v, %v: %s", id, res, err, out.Bytes())
	}
}

// execArgv runs argv in sandbox id and returns its stdout; it fails t
// unless it exits 0.
func execArgv(t *testing.T, d driver.Driver, id string, argv ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	res, err := agentClient(d, id).Exec(t.Context(), sandbox.ExecRequest{
		Argv:    argv,
		Timeout: sandbox.Duration(30 * time.Second),
	}, nil, &stdout, &stderr)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%s, %s) = %+v, %v: %s%s", id, argv[0], res, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String()
}

// egressDNSName is the name testEgressDNS resolves, which its own name
// server answers with egressDNSHost (a test host's, TEST-NET-2), and
// egressDNSPrivate an address a query to port 53 is sent to: private, so
// that the policy would reject it if the host did not redirect it.
var (
	egressDNSName    = "testhost.hearth.test"
	egressDNSHost    = netip.MustParseAddr("198.51.100.3")
	egressDNSPrivate = netip.MustParseAddr("10.123.53.53")
)

// ResolveScript resolves its first argument (IPv4, with the C library, as
// any program would) and prints "resolved" and the addresses, or
// "unresolved" and the error; when resolved, it connects to the name at
// its second argument's port and prints "connected" or the error.
const ResolveScript = `import socket, sys
name, port = sys.argv[1], int(sys.argv[2])
try:
    addrs = sorted({ai[4][0] for ai in socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)})
except socket.gaierror as e:
    print("unresolved", e)
    sys.exit(0)
print("resolved", " ".join(addrs))
try:
    socket.create_connection((name, port), timeout=5).close()
    print("connected")
except OSError as e:
    print("connect", e)
`

// rawQueryScript sends its second argument, a DNS query in hex, over UDP
// to port 53 of its first and prints the answer in hex, or "timeout".
const rawQueryScript = `import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(bytes.fromhex(sys.argv[2]), (sys.argv[1], 53))
try:
    print(s.recv(65535).hex())
except socket.timeout:
    print("timeout")
`

// testEgressDNS, for a driver whose network host serves DNS (Config.NewDNS)
// and whose Capabilities say Egress: an egress sandbox resolves a name
// that the test's own name server answers, with the C library and its
// resolv.conf, and connects to the test host by that name; a query it
// sends to port 53 of any other address gets the same answer (the host
// redirects it); a sandbox with no network resolves nothing.
func (s *suite) testEgressDNS(t *testing.T) {
	if s.cfg.NewDNS == nil {
		t.Skip("the driver's test gives no network host with DNS (Config.NewDNS is nil)")
	}
	RequireRoot(t)
	host := NewTestHost(t, egressDNSHost, egressPort)
	upstream := NewTestDNS(t, map[string]netip.Addr{egressDNSName: host.Addr})
	tg := s.cfg.NewDNS(t, upstream)
	d := tg.Driver
	requireEgress(t, d)
	a, none := s.spec(t), s.spec(t)
	a.Network, none.Network = driver.NetworkEgress, driver.NetworkNone
	for _, spec := range []driver.Spec{a, none} {
		s.start(t, d, spec)
	}
	port := strconv.Itoa(egressPort)
	t.Logf("sandbox %s: /etc/resolv.conf:\n%s", a.ID, execArgv(t, d, a.ID, "cat", "/etc/resolv.conf"))
	got := strings.Split(strings.TrimSpace(execArgv(t, d, a.ID, "python3", "-c", ResolveScript, egressDNSName, port)), "\n")
	want := []string{"resolved " + host.Addr.String(), "connected"}
	if !slices.Equal(got, want) {
		t.Errorf("egress sandbox %s: resolve %s and connect = %q, want %q", a.ID, egressDNSName, got, want)
	}

	q := DNSQuery(0x4448, egressDNSName)
	out := strings.TrimSpace(execArgv(t, d, a.ID, "python3", "-c", rawQueryScript, egressDNSPrivate.String(), hex.EncodeToString(q)))
	reply, err := hex.DecodeString(out)
	var r DNSReply
	if err == nil {
		r, err = ParseDNSReply(reply)
	}
	if err != nil || r.ID != 0x4448 || !slices.Equal(r.A, []netip.Addr{host.Addr}) {
		t.Errorf("egress sandbox %s: a query to %s:53 = %q (%+v, %v), want the answer %s", a.ID, egressDNSPrivate, out, r, err, host.Addr)
	}

	got = strings.Split(strings.TrimSpace(execArgv(t, d, none.ID, "python3", "-c", ResolveScript, egressDNSName, port)), "\n")
	if len(got) == 0 || !strings.HasPrefix(got[0], "unresolved") {
		t.Errorf("sandbox %s with network %q: resolve %s = %q, want it unresolved", none.ID, none.Network, egressDNSName, got)
	}
}

// acceptAndClose accepts connections on ln and closes them, calling
// accepted for each, until ln is closed.
func acceptAndClose(ln net.Listener, accepted func()) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		accepted()
		c.Close()
	}
}
