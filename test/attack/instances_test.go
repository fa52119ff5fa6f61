package attack_test

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/instance"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
)

// instanceProbe is run in a sandbox: it resolves its first argument and
// connects to it at its second (drivertest.ResolveScript), then asks the
// egress gateway for a binding nobody has, printing the status (the
// gateway answers 404), and prints the sandbox's own address.
const instanceProbe = drivertest.ResolveScript + `
import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://nobody.` + sandbox.GatewayDomain + `/", timeout=10)
    print("gateway 200")
except urllib.error.HTTPError as e:
    print("gateway", e.code)
except OSError as e:
    print("gateway", e)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[3], 9))
print("address", s.getsockname()[0])
`

// TestInstances: two daemons on one host, each on a data dir of its own
// (production beside staging, or a test run), each with an egress
// sandbox. Whatever happens to daemon 1 (a restart, a kill -9 and a
// restart, sandboxes created and destroyed in it), daemon 2's sandbox
// still resolves its name through daemon 2's forwarder, reaches its test
// host, and gets answers from daemon 2's gateway; and daemon 2's chains,
// jumps, sets, namespaces, links, cgroups and mounts are exactly as they
// were. Before instances, daemon 1's restart took daemon 2's sandbox's
// namespace away (its Recover removed every hearth-<id> it did not know)
// and both daemons' forwarders and gateways fought for one port. Daemon
// 1's sandbox, a hostile one, reaches neither daemon 2's sandbox (whose
// server hears nothing) nor daemon 2's forwarder and gateway directly.
// Once both daemons have destroyed their sandboxes and stopped, neither
// instance leaves a process, namespace, link or sandbox cgroup; the
// harness's teardown then wants nothing of either left at all.
func TestInstances(t *testing.T) {
	daemonproc.ForEachRuntime(t, func(t *testing.T, runtime string) {
		hosts := [2]*drivertest.TestHost{
			drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.71"), 8111),
			drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.73"), 8111),
		}
		dns := drivertest.NewTestDNS(t, map[string]netip.Addr{"one.instances.test": hosts[0].Addr, "two.instances.test": hosts[1].Addr})
		var ds [2]*daemonproc.Daemon
		for i := range ds {
			ds[i] = daemonproc.New(t, runtime, "--dns-upstream", dns.String())
			if _, stderr, code := ds[i].CLI("", "create", "sb", "--network", "egress"); code != 0 {
				t.Fatalf("daemon %d: hearth create sb --network egress = %d %q", i+1, code, stderr)
			}
		}
		d1, d2 := ds[0], ds[1]
		n1, n2 := names(t, d1), names(t, d2)
		if n1.Instance == n2.Instance || n1.Slot == n2.Slot {
			t.Fatalf("two daemons share an instance or a slot: %+v and %+v", n1, n2)
		}
		// What each daemon's sandbox reaches, and where daemon 2's is.
		works := func(when string, i int, sb string) string {
			t.Helper()
			name := [2]string{"one.instances.test", "two.instances.test"}[i]
			out, stderr, code := ds[i].CLI("", "exec", sb, "--", "python3", "-c", instanceProbe, name, "8111", hosts[i].Addr.String())
			want := "resolved " + hosts[i].Addr.String() + "\nconnected\ngateway 404\naddress "
			if code != 0 || !strings.HasPrefix(out, want) {
				t.Errorf("%s: daemon %d's sandbox %s = %d %q %q, want it to resolve, connect and reach its gateway (%q)", when, i+1, sb, code, out, stderr, want)
			}
			_, addr, _ := strings.Cut(strings.TrimSpace(out), "address ")
			return addr
		}
		works("at first", 0, "sb")
		addr2 := works("at first", 1, "sb")
		before := objects(t, d2)
		unharmed := func(when string) {
			t.Helper()
			works(when, 1, "sb")
			works(when, 0, "sb")
			if after := objects(t, d2); !slices.Equal(after, before) {
				t.Errorf("%s, daemon 2's objects changed:\n%s\nwant:\n%s", when, strings.Join(after, "\n"), strings.Join(before, "\n"))
			}
		}

		d1.Stop()
		d1.Start()
		unharmed("after daemon 1 restarted")
		d1.Kill()
		d1.Start()
		unharmed("after daemon 1 was killed and restarted")
		for _, args := range [][]string{{"create", "more", "--network", "egress"}, {"create", "plain"}} {
			if _, stderr, code := d1.CLI("", args...); code != 0 {
				t.Fatalf("daemon 1: hearth %s = %d %q", strings.Join(args, " "), code, stderr)
			}
		}
		works("in a new sandbox", 0, "more")
		for _, sb := range []string{"more", "plain"} {
			if _, stderr, code := d1.CLI("", "destroy", sb); code != 0 {
				t.Fatalf("daemon 1: hearth destroy %s = %d %q", sb, code, stderr)
			}
		}
		unharmed("after daemon 1 created and destroyed sandboxes")

		// Daemon 1's sandbox against daemon 2's: its sandbox's server,
		// its gateway address's port 80, gateway and forwarder.
		heard := serveIn(t, d2, "sb", 8113)
		gw := netip.MustParseAddr(addr2).Prev().String()
		ports := logged(t, d2, `dns_port=([0-9]+)`, `gateway_port=([0-9]+)`)
		targets := []string{net.JoinHostPort(addr2, "8113"), net.JoinHostPort(gw, "80"), net.JoinHostPort(gw, ports[0]), net.JoinHostPort(gw, ports[1])}
		out, _, _ := d1.CLI("", append([]string{"exec", "sb", "--", "python3", "-c", drivertest.ConnectProbe}, targets...)...)
		got := drivertest.ParseProbe(out)
		for _, target := range targets {
			if got[target] != "refused" {
				t.Errorf("daemon 1's sandbox → %s (daemon 2's) = %q, want refused", target, got[target])
			}
		}
		if h := heard(); h != "" {
			t.Errorf("the server in daemon 2's sandbox heard from %s", h)
		}

		for i, d := range ds {
			if _, stderr, code := d.CLI("", "destroy", "sb"); code != 0 {
				t.Errorf("daemon %d: hearth destroy sb = %d %q", i+1, code, stderr)
			}
			d.Stop()
		}
		for i, d := range ds {
			n := names(t, d)
			for _, left := range daemonproc.Leftovers(t, n, d.DataDir) {
				if !persistent(left, n) {
					t.Errorf("daemon %d stopped with no sandbox, and left %s", i+1, left)
				}
			}
		}
	})
}

// names returns the names of d's instance.
func names(t *testing.T, d *daemonproc.Daemon) instance.Names {
	t.Helper()
	n, err := d.Names()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// objects lists what d's instance holds outside its data dir, and its
// mounts (daemonproc.Leftovers), but its processes, which come and go
// with the commands its sandboxes run.
func objects(t *testing.T, d *daemonproc.Daemon) []string {
	t.Helper()
	var out []string
	for _, o := range daemonproc.Leftovers(t, names(t, d), d.DataDir) {
		if !strings.HasPrefix(o, "process ") {
			out = append(out, o)
		}
	}
	return out
}

// serveIn runs a TCP server at port in sandbox sb of d until t ends, and
// returns a function that tells from where it was connected to, if ever.
func serveIn(t *testing.T, d *daemonproc.Daemon, sb string, port int) (heard func() string) {
	t.Helper()
	const server = `import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(8)
print("listening", flush=True)
while True:
    c, a = s.accept()
    print("heard", a[0], flush=True)
    c.close()
`
	cmd := exec.Command(daemonproc.Require(t).Hearth, "exec", sb, "--", "python3", "-c", server, strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "HEARTH_URL="+d.URL, "HEARTH_TOKEN="+d.Token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); line != "listening\n" {
		t.Fatalf("the server in %s said %q, %v", sb, line, err)
	}
	lines := make(chan string, 16)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(lines)
				io.Copy(io.Discard, r)
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	return func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(time.Second):
			return ""
		}
	}
}

// logged returns the first submatch of each of res in d's log.
func logged(t *testing.T, d *daemonproc.Daemon, res ...string) []string {
	t.Helper()
	var out []string
	for _, re := range res {
		m := regexp.MustCompile(re).FindStringSubmatch(d.Out.String())
		if m == nil {
			t.Fatalf("no %s in the daemon's log", re)
		}
		out = append(out, m[1])
	}
	return out
}

// persistent reports whether left, a line of daemonproc.Leftovers, is what
// an instance keeps with no sandbox while its daemon is stopped: the data
// dir's mounts, its cgroup parent, its sets (empty) and its chains' rules
// and jumps, none of which names a sandbox's link.
func persistent(left string, n instance.Names) bool {
	switch kind, rest, _ := strings.Cut(left, " "); kind {
	case "mount":
		return true
	case "cgroup":
		return strings.HasPrefix(rest, "parent ")
	case "ipset":
		return !strings.Contains(rest, ":")
	case "filter:", "nat:":
		return !regexp.MustCompile(` -[io] ` + n.LinkPrefix + `[a-z0-9]`).MatchString(rest)
	}
	return false
}
