package e2e_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/sandbox"
)

// TestNetworkModes: through the daemon, `hearth create --network egress`
// gives a sandbox outbound connections and the default gives it none; a
// tenant whose policy forbids egress is refused. The only host reached is
// one this test makes, at a documentation (TEST-NET-3) address.
func TestNetworkModes(t *testing.T) {
	requireDaemon(t)
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		host := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.7"), 8099)
		probe := func(name string) string {
			t.Helper()
			out, stderr, code := d.CLI("", "exec", name, "--", "python3", "-c", drivertest.ConnectProbe, host.Target())
			if code != 0 {
				t.Fatalf("probe in %s = %d %q %q", name, code, out, stderr)
			}
			return drivertest.ParseProbe(out)[host.Target()]
		}
		if out, stderr, code := d.CLI("", "create", "out", "--network", "egress"); code != 0 || !strings.Contains(out, "created") {
			t.Fatalf("hearth create out --network egress = %d %q %q", code, out, stderr)
		}
		if _, stderr, code := d.CLI("", "create", "in"); code != 0 {
			t.Fatalf("hearth create in = %d %q", code, stderr)
		}
		if got := probe("out"); got != "ok" {
			t.Errorf("egress sandbox to the test host: %s, want ok", got)
		}
		if got := probe("in"); got == "ok" {
			t.Errorf("sandbox without network reached the test host")
		}
		sb, err := d.Client().Get(ctxT(t), "out")
		if err != nil || sb.Network != sandbox.NetworkEgress {
			t.Errorf("get out = %q, %v; want network egress", sb.Network, err)
		}
		// A live change of the sandbox's egress policy, while it runs.
		if out, stderr, code := d.CLI("", "egress", "out", "--deny", host.Addr.String()); code != 0 || !strings.Contains(out, host.Addr.String()) {
			t.Fatalf("hearth egress out --deny = %d %q %q", code, out, stderr)
		}
		if got := probe("out"); got == "ok" {
			t.Errorf("egress sandbox reached a host its policy denies")
		}
		if _, stderr, code := d.CLI("", "egress", "out", "--clear"); code != 0 {
			t.Fatalf("hearth egress out --clear = %d %q", code, stderr)
		}
		if got := probe("out"); got != "ok" {
			t.Errorf("after --clear: %s, want ok", got)
		}
		if _, stderr, code := d.CLI("", "egress", "out", "--allow", "fe80::/10"); code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(stderr, "not IPv4") {
			t.Errorf("hearth egress --allow fe80::/10 = %d %q; want invalid_argument", code, stderr)
		}

		tok := d.agentToken(t, "closed", "boxed", 2)
		no := false
		if _, err := d.Client().Admin().UpdateTenant(ctxT(t), "closed", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{AllowEgress: &no}}); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := d.CLIAs(tok, "", "create", "x", "--network", "egress")
		if want := "error: the tenant's policy does not allow egress\n"; code != sandbox.CodePermissionDenied.ExitCode() || !strings.HasPrefix(stderr, want) {
			t.Errorf("egress create in a closed tenant = %d %q; want %d and %q", code, stderr, sandbox.CodePermissionDenied.ExitCode(), want)
		}
	})
}

// TestEgressDomains: through the daemon, `hearth egress NAME --allow
// NAME` lets a running sandbox resolve and reach that name only; a name
// outside does not resolve, and its host is refused at its address too;
// each refusal is in the daemon's log with the sandbox's name, tenant and
// what was refused, and counted in /metrics. The name server and hosts are
// the test's own.
func TestEgressDomains(t *testing.T) {
	requireDaemon(t)
	forEachRuntime(t, func(t *testing.T, runtime string) {
		allowed := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.31"), 8095)
		other := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.33"), 8095)
		dns := drivertest.NewTestDNS(t, map[string]netip.Addr{"api.allowed.test": allowed.Addr, "www.other.test": other.Addr})
		d := newDaemon(t, runtime, "--dns-upstream", dns.String())
		if _, stderr, code := d.CLI("", "create", "dom", "--network", "egress"); code != 0 {
			t.Fatalf("hearth create dom = %d %q", code, stderr)
		}
		if out, stderr, code := d.CLI("", "egress", "dom", "--allow", "*.allowed.test"); code != 0 || !strings.Contains(out, "*.allowed.test") {
			t.Fatalf("hearth egress dom --allow *.allowed.test = %d %q %q", code, out, stderr)
		}
		resolve := func(name string) string {
			t.Helper()
			out, stderr, code := d.CLI("", "exec", "dom", "--", "python3", "-c", drivertest.ResolveScript, name, "8095")
			if code != 0 {
				t.Fatalf("resolve %s in dom = %d %q %q", name, code, out, stderr)
			}
			return strings.TrimSpace(out)
		}
		if got, want := resolve("api.allowed.test"), "resolved "+allowed.Addr.String()+"\nconnected"; got != want {
			t.Errorf("resolve and connect api.allowed.test = %q, want %q", got, want)
		}
		if got := resolve("www.other.test"); !strings.HasPrefix(got, "unresolved") {
			t.Errorf("resolve www.other.test = %q, want it unresolved", got)
		}
		out, _, _ := d.CLI("", "exec", "dom", "--", "python3", "-c", drivertest.ConnectProbe, other.Target())
		if got := drivertest.ParseProbe(out)[other.Target()]; got != "refused" {
			t.Errorf("dom → %s by address = %q, want refused", other.Target(), got)
		}
		for _, want := range []string{
			"kind=lookup sandbox=dom",
			"tenant=system domain=www.other.test",
			"kind=connection sandbox=dom",
			"tenant=system dst=" + other.Addr.String() + " proto=TCP port=8095",
		} {
			d.Out.WaitFor(t, want, 10*time.Second)
		}
		_, body := get(t, d.URL+"/metrics", d.Token)
		for _, want := range []string{`hearth_egress_refused_total{tenant="system",kind="lookup"}`, `hearth_egress_refused_total{tenant="system",kind="connection"}`} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics has no %s", want)
			}
		}
	})
}
