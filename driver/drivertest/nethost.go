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
// the test fails. It needs root and python3. Serve adds servers.
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
	h.Serve(t, port, AcceptServer)
	t.Logf("test host %s in namespace %s (root side %s %s)", h.Target(), ns, link, peer)
	return h
}

// Serve starts another server on the test host: program, a python3
// program such as AcceptServer, SendServer, SinkServer or HoldServer, run
// with h.Addr, port and args as its arguments. It returns the server as
// "addr:port" once it listens (a connection from the root namespace tells,
// which the server must bear), and kills it in t's cleanup.
func (h *TestHost) Serve(t testing.TB, port int, program string, args ...string) string {
	t.Helper()
	target := net.JoinHostPort(h.Addr.String(), strconv.Itoa(port))
	srv := exec.Command("ip", append([]string{"netns", "exec", h.Namespace, "python3", "-c", program, h.Addr.String(), strconv.Itoa(port)}, args...)...)
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatalf("start a server of test host %s: %v", target, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
		srv.Wait()
	})
	waitListening(t, target)
	return target
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

// The test servers are python3 programs that listen on TCP at their first
// two arguments, an IPv4 address and a port, and serve each connection in
// a thread of its own until they are killed. Unlike python3 -m
// http.server, they look no name up (its getfqdn would ask the name
// servers of resolv.conf: traffic that tests must never send). serverLoop
// is their shared end: it calls each one's handle(c).
const serverLoop = `
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// AcceptServer accepts and closes connections.
const AcceptServer = `import socket, sys, threading
def handle(c):
    c.close()
` + serverLoop

// SendServer sends each connection its third argument's number of zero
// bytes, then closes it.
const SendServer = `import socket, sys, threading
data = bytes(int(sys.argv[3]))
def handle(c):
    try:
        c.sendall(data)
    except OSError:
        pass
    finally:
        c.close()
` + serverLoop

// SinkServer reads what each connection sends, until the peer shuts its
// side down, then answers with the number of bytes it read, in decimal,
// and closes it: the answer tells the peer that everything arrived.
const SinkServer = `import socket, sys, threading
def handle(c):
    n = 0
    try:
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            n += len(b)
        c.sendall(str(n).encode())
    except OSError:
        pass
    finally:
        c.close()
` + serverLoop

// HoldServer holds each connection open until the peer closes it, then
// closes its side.
const HoldServer = `import socket, sys, threading
def handle(c):
    try:
        while c.recv(1 << 16):
            pass
    except OSError:
        pass
    finally:
        c.close()
` + serverLoop

// HeaderServer answers each HTTP request (one per connection) with 200 and
// a body of "path=PATH" and "NAME=VALUE" lines, where NAME is its third
// argument (a header name, e.g. Authorization) and VALUE that header of
// the request ("-" when it has none); it echoes VALUE in an X-Seen header
// too, and appends the line "PATH VALUE" to the file at its fourth
// argument, where a test reads what the server saw.
const HeaderServer = `import socket, sys, threading
want, seen_path = sys.argv[3].lower(), sys.argv[4]
lock = threading.Lock()
def handle(c):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            b = c.recv(65536)
            if not b:
                return
            data += b
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        path = head[0].split(" ")[1]
        value = "-"
        for line in head[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == want:
                value = v.strip()
        with lock:
            with open(seen_path, "a") as f:
                f.write(path + " " + value + "\n")
        body = ("path=%s\n%s=%s\n" % (path, sys.argv[3], value)).encode("latin-1")
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Seen: " + value.encode("latin-1") + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    except OSError:
        pass
    finally:
        c.close()
` + serverLoop

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
