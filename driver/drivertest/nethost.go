package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHost is a host of a test's own on this machine: a network namespace
// with a veth to the root namespace and a TCP server in it. Tests that
// check what a sandbox's network reaches send their traffic only to such
// hosts (and to loopback), never to an address they did not make.
type TestHost struct {
	// Addr and Port are where the server listens.
	Addr netip.Addr
	Port int
	// Namespace is the name of its network namespace (ip netns).
	Namespace string
}

// Target is the host's server as "addr:port".
func (h *TestHost) Target() string { return net.JoinHostPort(h.Addr.String(), strconv.Itoa(h.Port)) }

// NewTestHost makes a test host at addr, an IPv4 address of the test's
// choosing that nothing on this machine uses: a network namespace of its
// own whose eth0 has addr, paired with a veth in the root namespace that
// has the next address (its peer), so that the root namespace routes addr
// to it; and AcceptServer on addr:port in it, listening when NewTestHost
// returns. The test host routes nothing but its peer: it answers what the
// host sends it (masqueraded traffic of sandboxes included), and sends
// nothing anywhere else. Everything is removed in t's cleanup, also when
// the test fails. It needs root and python3.
func NewTestHost(t testing.TB, addr netip.Addr, port int) *TestHost {
	t.Helper()
	RequireRoot(t)
	var b [4]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	ns, link := "hearthtest-"+suffix, "htt"+suffix
	peer := addr.Next()
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { ipCleanup(t, "netns", "del", ns) })
	ipCmd(t, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
	t.Cleanup(func() {
		if _, err := net.InterfaceByName(link); err == nil {
			ipCleanup(t, "link", "del", link)
		}
	})
	// No IPv6 on the root side: nothing but IPv4 to the test host.
	os.WriteFile("/proc/sys/net/ipv6/conf/"+link+"/disable_ipv6", []byte("1"), 0o644)
	ipCmd(t, "address", "add", peer.String()+"/32", "peer", addr.String()+"/32", "dev", link)
	ipCmd(t, "link", "set", link, "up")
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	ipCmd(t, "-n", ns, "address", "add", addr.String()+"/32", "peer", peer.String()+"/32", "dev", "eth0")
	ipCmd(t, "-n", ns, "link", "set", "eth0", "up")

	h := &TestHost{Addr: addr, Port: port, Namespace: ns}
	srv := exec.Command("ip", "netns", "exec", ns, "python3", "-c", AcceptServer, addr.String(), strconv.Itoa(port))
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatalf("start the server of test host %s: %v", addr, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
		srv.Wait()
	})
	waitListening(t, h.Target())
	t.Logf("test host %s in namespace %s (root side %s %s)", h.Target(), ns, link, peer)
	return h
}

// waitListening waits until target accepts a connection from here; it
// fails t after 15 seconds.
func waitListening(t testing.TB, target string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", target, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("test host %s not listening after 15s: %v", target, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ipCmd runs ip with args, failing t on error.
func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// ipCleanup runs ip with args in a cleanup, reporting an error.
func ipCleanup(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Errorf("cleanup: ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// AcceptServer is a python3 program that listens on TCP at its arguments,
// an IPv4 address and a port, and accepts and closes connections until it
// is killed. Unlike python3 -m http.server, it looks no name up (the
// server's getfqdn would ask the name servers of resolv.conf: traffic
// that tests must never send).
const AcceptServer = `import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
while True:
    c, _ = s.accept()
    c.close()
`

// ConnectProbe is a python3 program that tries a TCP connection to each
// "addr:port" of its arguments at once (numeric: it looks no name up), each
// with a 3 s timeout, and
// prints one line per target, in order: the target, then "ok", "refused",
// "timeout", or the errno's name (EHOSTUNREACH, ENETUNREACH, ...).
const ConnectProbe = `import errno, socket, sys, threading
def probe(target):
    host, port = target.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        return "ok"
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()
res = {}
def run(t):
    res[t] = probe(t)
threads = [threading.Thread(target=run, args=(t,)) for t in sys.argv[1:]]
for th in threads:
    th.start()
for th in threads:
    th.join()
for t in sys.argv[1:]:
    print(t, res[t])
`

// ParseProbe returns ConnectProbe's output as a map from target to result.
func ParseProbe(out string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(out) {
		if target, res, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			m[target] = res
		}
	}
	return m
}
