package drivertest

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/hearth/hearth/driver"
)

// The test host of testEgressLimits, at a public address of its own (a
// TEST-NET-2 address no other check uses), with its servers: one that sends
// limitsBytes to each connection, one that reads and discards, one that
// holds connections open.
var limitsHost = netip.MustParseAddr("198.51.100.33")

const (
	limitsAcceptPort = 8090
	limitsSendPort   = 8091
	limitsSinkPort   = 8092
	limitsHoldPort   = 8093

	// limitsBitsPerSec and limitsConns are the caps of the sandbox
	// under test: small, so that a transfer at the cap takes seconds,
	// not minutes, on any host.
	limitsBitsPerSec = 8_000_000
	limitsConns      = 5
	// limitsBytes moves in about 4 s at the cap.
	limitsBytes = 4 << 20
	// limitsSlack is how far above its cap a transfer may measure: the
	// bucket's burst and the queue in front of it pass at once.
	limitsSlack = 1.5
)

// downloadScript connects to its arguments' address and port, reads until
// the server closes, and prints the bytes it read and the seconds it took
// from the connect.
const downloadScript = `import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(30)
began = time.monotonic()
s.connect((sys.argv[1], int(sys.argv[2])))
n = 0
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    n += len(b)
print(n, time.monotonic() - began)
`

// uploadScript connects to its arguments' address and port (a
// SinkServer), sends its third argument's number of bytes, shuts its side
// down, and prints the count the server answers and the seconds from the
// connect to that answer: the answer comes once every byte arrived, not
// once they are in the socket's buffer.
const uploadScript = `import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(30)
data = bytes(int(sys.argv[3]))
began = time.monotonic()
s.connect((sys.argv[1], int(sys.argv[2])))
s.sendall(data)
s.shutdown(socket.SHUT_WR)
answer = b""
while True:
    b = s.recv(64)
    if not b:
        break
    answer += b
print(int(answer), time.monotonic() - began)
`

// connsScript opens its third argument's number of TCP connections to its
// arguments' address and port (a HoldServer), one after the other, each
// held open while the next is tried, and prints the result of each on one
// line ("ok", "refused", "reset", "timeout" or the errno's name). Then it
// closes them and, on a second line, prints the result of one more
// connection, tried until it is ok or 5 s have passed: a connection closed
// frees its place.
const connsScript = `import errno, socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def connect():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        return s, "ok"
    except socket.timeout:
        r = "timeout"
    except ConnectionRefusedError:
        r = "refused"
    except ConnectionResetError:
        r = "reset"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e))
    s.close()
    return None, r
held, res = [], []
for _ in range(n):
    s, r = connect()
    res.append(r)
    if s:
        held.append(s)
print(" ".join(res))
for s in held:
    s.close()
deadline = time.monotonic() + 5
while True:
    s, r = connect()
    if s or time.monotonic() > deadline:
        break
    time.sleep(0.1)
if s:
    s.close()
print(r)
`

// testEgressLimits, for a driver whose Capabilities say Egress: an egress
// sandbox with network caps (Resources.NetBitsPerSec and NetConns) gets
// no more than its rate each way, while TCP still works under it: a
// download from a test host and an upload to it both finish, measured at
// most limitsSlack times the rate (and at least a quarter of it). It gets exactly NetConns TCP
// connections open at once: the next ones are refused at once, and a
// connection closed frees its place. Woken without caps, it has none: a
// download well above the old rate, and more connections. The test host
// is the test's own (NewTestHost).
func (s *suite) testEgressLimits(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	requireEgress(t, d)
	host := NewTestHost(t, limitsHost, limitsAcceptPort)
	send := host.Serve(t, limitsSendPort, SendServer, strconv.Itoa(limitsBytes))
	sink := host.Serve(t, limitsSinkPort, SinkServer)
	hold := host.Serve(t, limitsHoldPort, HoldServer)

	spec := s.spec(t)
	spec.Network = driver.NetworkEgress
	spec.Resources.NetBitsPerSec, spec.Resources.NetConns = limitsBitsPerSec, limitsConns
	s.start(t, d, spec)
	const limit = limitsSlack * limitsBitsPerSec

	if rate := transfer(t, d, spec.ID, "download", downloadScript, send); rate > limit || rate < limitsBitsPerSec/4 {
		t.Errorf("download into sandbox %s capped at %d bit/s = %.0f bit/s, want at most %.0f, and TCP working under the cap (a quarter of it at least)", spec.ID, limitsBitsPerSec, rate, limit)
	}
	if rate := transfer(t, d, spec.ID, "upload", uploadScript, sink, strconv.Itoa(limitsBytes)); rate > limit || rate < limitsBitsPerSec/4 {
		t.Errorf("upload from sandbox %s capped at %d bit/s = %.0f bit/s, want at most %.0f, and TCP working under the cap (a quarter of it at least)", spec.ID, limitsBitsPerSec, rate, limit)
	}
	want := repeatWords("ok", limitsConns) + " " + repeatWords("refused", 3)
	if got, after := conns(t, d, spec.ID, hold, limitsConns+3); got != want || after != "ok" {
		t.Errorf("sandbox %s capped at %d connections, %d connections held open = %q, then one more after closing them = %q; want %q, then ok", spec.ID, limitsConns, limitsConns+3, got, after, want)
	}

	// Woken without caps: none left.
	if err := d.Stop(t.Context(), spec.ID); err != nil {
		t.Fatalf("Stop(%s) = %v", spec.ID, err)
	}
	spec.Resources.NetBitsPerSec, spec.Resources.NetConns = 0, 0
	s.start(t, d, spec)
	if rate := transfer(t, d, spec.ID, "download", downloadScript, send); rate < 2*limitsBitsPerSec {
		t.Errorf("download into sandbox %s woken without caps = %.0f bit/s, want well above its old cap of %d", spec.ID, rate, limitsBitsPerSec)
	}
	want = repeatWords("ok", limitsConns+3)
	if got, _ := conns(t, d, spec.ID, hold, limitsConns+3); got != want {
		t.Errorf("sandbox %s woken without caps, %d connections held open = %q, want %q", spec.ID, limitsConns+3, got, want)
	}
}

// transfer runs script (downloadScript or uploadScript) in sandbox id
// against target, with args after it, and returns the rate it measured, in
// bits per second; it fails t unless all limitsBytes arrived.
func transfer(t *testing.T, d driver.Driver, id, what, script, target string, args ...string) float64 {
	t.Helper()
	addr, port, _ := net.SplitHostPort(target)
	out := execArgv(t, d, id, append([]string{"python3", "-c", script, addr, port}, args...)...)
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("%s in sandbox %s: %q, want bytes and seconds", what, id, out)
	}
	n, err1 := strconv.ParseInt(f[0], 10, 64)
	secs, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || secs <= 0 {
		t.Fatalf("%s in sandbox %s: %q, want bytes and seconds", what, id, out)
	}
	if n != limitsBytes {
		t.Fatalf("%s in sandbox %s moved %d bytes, want %d", what, id, n, limitsBytes)
	}
	rate := float64(n) * 8 / secs
	t.Logf("%s in sandbox %s: %d bytes in %.2f s: %.2f Mbit/s", what, id, n, secs, rate/1e6)
	return rate
}

// conns runs connsScript in sandbox id against target for n connections
// and returns its two lines: the results of the n, and of the one after.
func conns(t *testing.T, d driver.Driver, id, target string, n int) (results, after string) {
	t.Helper()
	addr, port, _ := net.SplitHostPort(target)
	out := execArgv(t, d, id, "python3", "-c", connsScript, addr, port, strconv.Itoa(n))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("connections from sandbox %s: %q, want two lines", id, out)
	}
	t.Logf("connections from sandbox %s: %s; after closing them: %s", id, lines[0], lines[1])
	return lines[0], lines[1]
}

// repeatWords is word n times, separated by spaces.
func repeatWords(word string, n int) string {
	return strings.TrimSuffix(strings.Repeat(word+" ", n), " ")
}
