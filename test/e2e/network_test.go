package e2e_test

import (
	"net/netip"
	"strings"
	"testing"

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
			out, stderr, code := d.cli("", "exec", name, "--", "python3", "-c", drivertest.ConnectProbe, host.Target())
			if code != 0 {
				t.Fatalf("probe in %s = %d %q %q", name, code, out, stderr)
			}
			return drivertest.ParseProbe(out)[host.Target()]
		}
		if out, stderr, code := d.cli("", "create", "out", "--network", "egress"); code != 0 || !strings.Contains(out, "created") {
			t.Fatalf("hearth create out --network egress = %d %q %q", code, out, stderr)
		}
		if _, stderr, code := d.cli("", "create", "in"); code != 0 {
			t.Fatalf("hearth create in = %d %q", code, stderr)
		}
		if got := probe("out"); got != "ok" {
			t.Errorf("egress sandbox to the test host: %s, want ok", got)
		}
		if got := probe("in"); got == "ok" {
			t.Errorf("sandbox without network reached the test host")
		}
		sb, err := d.client().Get(ctxT(t), "out")
		if err != nil || sb.Network != sandbox.NetworkEgress {
			t.Errorf("get out = %q, %v; want network egress", sb.Network, err)
		}
		// A live change of the sandbox's egress policy, while it runs.
		if out, stderr, code := d.cli("", "egress", "out", "--deny", host.Addr.String()); code != 0 || !strings.Contains(out, host.Addr.String()) {
			t.Fatalf("hearth egress out --deny = %d %q %q", code, out, stderr)
		}
		if got := probe("out"); got == "ok" {
			t.Errorf("egress sandbox reached a host its policy denies")
		}
		if _, stderr, code := d.cli("", "egress", "out", "--clear"); code != 0 {
			t.Fatalf("hearth egress out --clear = %d %q", code, stderr)
		}
		if got := probe("out"); got != "ok" {
			t.Errorf("after --clear: %s, want ok", got)
		}
		if _, stderr, code := d.cli("", "egress", "out", "--allow", "fe80::/10"); code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(stderr, "not IPv4") {
			t.Errorf("hearth egress --allow fe80::/10 = %d %q; want invalid_argument", code, stderr)
		}

		tok := d.agentToken(t, "closed", "boxed", 2)
		no := false
		if _, err := d.client().UpdateTenant(ctxT(t), "closed", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{AllowEgress: &no}}); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := d.cliAs(tok, "", "create", "x", "--network", "egress")
		if want := "error: the tenant's policy does not allow egress\n"; code != sandbox.CodePermissionDenied.ExitCode() || !strings.HasPrefix(stderr, want) {
			t.Errorf("egress create in a closed tenant = %d %q; want %d and %q", code, stderr, sandbox.CodePermissionDenied.ExitCode(), want)
		}
	})
}
