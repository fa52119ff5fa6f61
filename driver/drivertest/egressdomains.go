package drivertest

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/hearth/hearth/driver"
)

// The test hosts of testEgressDomains and the names its name server gives
// them (TEST-NET-2 addresses no other check uses).
var (
	domainsFirst      = netip.MustParseAddr("198.51.100.50")
	domainsSecond     = netip.MustParseAddr("198.51.100.52")
	domainsFirstName  = "api.allowed.test"
	domainsSecondName = "www.other.test"
)

// testEgressDomains, for a driver whose network host serves DNS
// (Config.NewDNS) and whose Capabilities say Egress: an egress sandbox
// whose rules allow only *.allowed.test resolves and reaches a name there,
// resolves no other name, and cannot reach that other name's host by its
// address; SetEgress, while it runs, to allow the other name too and deny
// the first makes the first unresolvable and unreachable at the address
// the sandbox resolved before (denied at connection level, not only at
// DNS), and the second reachable by name; SetEgress to no rules makes the
// first reachable by its address again.
func (s *suite) testEgressDomains(t *testing.T) {
	if s.cfg.NewDNS == nil {
		t.Skip("the driver's test gives no network host with DNS (Config.NewDNS is nil)")
	}
	RequireRoot(t)
	first := NewTestHost(t, domainsFirst, egressPort)
	second := NewTestHost(t, domainsSecond, egressPort)
	upstream := NewTestDNS(t, map[string]netip.Addr{domainsFirstName: first.Addr, domainsSecondName: second.Addr})
	d := s.cfg.NewDNS(t, upstream).Driver
	es := egressSetter(t, d)
	a := s.spec(t)
	a.Network = driver.NetworkEgress
	a.Egress = driver.EgressRules{AllowDomains: []string{"*.allowed.test"}}
	s.start(t, d, a)
	port := strconv.Itoa(egressPort)

	resolve := func(when, name string, want ...string) {
		t.Helper()
		got := strings.Split(strings.TrimSpace(execArgv(t, d, a.ID, "python3", "-c", ResolveScript, name, port)), "\n")
		if len(want) == 1 && strings.HasPrefix(got[0], want[0]) || strings.Join(got, "\n") == strings.Join(want, "\n") {
			return
		}
		t.Errorf("%s: sandbox %s: resolve %s and connect = %q, want %q", when, a.ID, name, got, want)
	}
	reach := func(when string, firstWant, secondWant string) {
		t.Helper()
		got := probe(t, d, a.ID, first.Target(), second.Target())
		if got[first.Target()] != firstWant || got[second.Target()] != secondWant {
			t.Errorf("%s: sandbox %s → %s, %s by address = %s, %s; want %s, %s", when, a.ID, first.Target(), second.Target(), got[first.Target()], got[second.Target()], firstWant, secondWant)
		}
	}

	when := "allowed *.allowed.test"
	resolve(when, domainsFirstName, "resolved "+first.Addr.String(), "connected")
	resolve(when, domainsSecondName, "unresolved")
	reach(when, "ok", "refused")

	when = "live: allowed " + domainsSecondName + " too, denied " + domainsFirstName
	if err := es.SetEgress(t.Context(), a.ID, driver.EgressRules{AllowDomains: []string{"*.allowed.test", domainsSecondName}, DenyDomains: []string{domainsFirstName}}); err != nil {
		t.Fatalf("SetEgress(%s) = %v", a.ID, err)
	}
	resolve(when, domainsFirstName, "unresolved")
	reach(when, "refused", "refused") // the second's address is not learned yet
	resolve(when, domainsSecondName, "resolved "+second.Addr.String(), "connected")
	reach(when+", "+domainsSecondName+" resolved", "refused", "ok")

	when = "live: no rules"
	if err := es.SetEgress(t.Context(), a.ID, driver.EgressRules{}); err != nil {
		t.Fatalf("SetEgress(%s) = %v", a.ID, err)
	}
	reach(when, "ok", "ok")
}
