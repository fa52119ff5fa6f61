package network_test

import (
	"encoding/hex"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/network"
)

// TestDomainPolicy, with the kernel's own stack in a namespace (no
// runtime): a sandbox whose policy allows one name gets it answered and
// its address recorded in the allow set for its veth, and gets REFUSED
// for another, which is reported as a Refusal with the domain; a
// connection it opens to a blocked address is reported, with the
// sandbox, destination, protocol and port, from the kernel's log; a Host
// of a restarted daemon knows the sandbox at its address and judges its
// lookups by the same policy; Detach empties the sets of it.
func TestDomainPolicy(t *testing.T) {
	const allowed, denied = "ok.hearth.test", "denied.hearth.test"
	okAddr := netip.MustParseAddr("198.51.100.61")
	upstream := drivertest.NewTestDNS(t, map[string]netip.Addr{allowed: okAddr, denied: okAddr})
	refusals := make(chan network.Refusal, 16)
	h, dir := newHostWith(t, func(r network.Refusal) { refusals <- r }, upstream)
	drivertest.ServeDNS(t, h)
	watchRefusals(t, h)

	a, err := h.Attach(t.Context(), "dpa", network.Limits{}, network.Egress{AllowDomains: []string{allowed}})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := h.SandboxAt(a.Addr); id != "dpa" || !ok {
		t.Errorf("SandboxAt(%s) = %q, %v; want dpa", a.Addr, id, ok)
	}
	if id, ok := h.SandboxAt(a.Gateway); ok {
		t.Errorf("SandboxAt(%s, the gateway) = %q, want none", a.Gateway, id)
	}
	ask := func(id uint16, name string) drivertest.DNSReply {
		t.Helper()
		return queryIn(t, a, id, name)
	}
	if r := ask(1, allowed); r.RCode != 0 || len(r.A) != 1 || r.A[0] != okAddr {
		t.Errorf("query of the allowed %s = %+v, want NOERROR and A %s", allowed, r, okAddr)
	}
	set := run(t, "ipset", "save", testName+"-allow")
	if want := okAddr.String() + "," + a.Link + " timeout "; !strings.Contains(set, want) || !strings.Contains(set, `comment "`+allowed+`"`) {
		t.Errorf("the allow set after the lookup:\n%s\nwant an entry %s… for %s", set, want, allowed)
	}
	if r := ask(2, denied); r.RCode != 5 || len(r.A) != 0 {
		t.Errorf("query of %s, not allowed = %+v, want REFUSED (5)", denied, r)
	}
	want := func(what string, match func(network.Refusal) bool) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case r := <-refusals:
				t.Logf("refusal: %+v", r)
				if match(r) {
					return
				}
			case <-timeout:
				t.Errorf("no refusal of %s reported in 10 s", what)
				return
			}
		}
	}
	want("the lookup of "+denied, func(r network.Refusal) bool { return r == network.Refusal{Sandbox: "dpa", Domain: denied} })

	blocked := netip.MustParseAddr("10.124.0.9")
	if got := probeIn(t, a, blocked.String()+":8443"); got[blocked.String()+":8443"] != "refused" {
		t.Errorf("%s → %s:8443 = %v, want refused", a.ID, blocked, got)
	}
	want("the connection to "+blocked.String(), func(r network.Refusal) bool {
		return r == network.Refusal{Sandbox: "dpa", Dst: blocked, Proto: "TCP", Port: 8443}
	})

	// A restarted daemon's Host knows the sandbox and its policy.
	again := openHost(t, dir, upstream)
	if id, ok := again.SandboxAt(a.Addr); id != "dpa" || !ok {
		t.Errorf("after a restart: SandboxAt(%s) = %q, %v; want dpa", a.Addr, id, ok)
	}
	if network.HostPermits(again, a.Addr, denied) || !network.HostPermits(again, a.Addr, allowed) {
		t.Errorf("after a restart: the Host permits %s %v and %s %v, want only %s", denied, network.HostPermits(again, a.Addr, denied), allowed, network.HostPermits(again, a.Addr, allowed), allowed)
	}

	if err := h.Detach(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	if set := run(t, "ipset", "save", testName+"-allow"); strings.Contains(set, a.Link) {
		t.Errorf("the allow set after Detach:\n%s\nwant no entry of %s", set, a.Link)
	}
	if id, ok := h.SandboxAt(a.Addr); ok {
		t.Errorf("after Detach: SandboxAt(%s) = %q, want none", a.Addr, id)
	}
}

// queryIn sends a DNS query of name with id from a's namespace to port 53
// of its gateway, asking again for up to 10 seconds while it times out
// (the forwarder may not listen yet), and returns the reply.
func queryIn(t *testing.T, a network.Attachment, id uint16, name string) drivertest.DNSReply {
	t.Helper()
	target := "udp:" + a.Gateway.String() + ":53"
	var got map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out := run(t, "ip", "netns", "exec", filepath.Base(a.Namespace), "python3", "-c", dnsProbe, hex.EncodeToString(drivertest.DNSQuery(id, name)), target)
		got = drivertest.ParseProbe(out)
		if got[target] != "timeout" || time.Now().After(deadline) {
			break
		}
	}
	b, err := hex.DecodeString(got[target])
	if err != nil {
		t.Fatalf("%s: query of %s: %q", a.ID, name, got[target])
	}
	r, err := drivertest.ParseDNSReply(b)
	if err != nil {
		t.Fatalf("%s: query of %s: %v", a.ID, name, err)
	}
	return r
}
