package network_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/network"
)

// TestRepair: after the host's firewall lost the Host's rules (its hooks
// and chains deleted, as a firewall reload does), Repair puts back the
// policy and each attached sandbox's egress rules and connection cap, so
// that the sandbox is refused again where it was; with everything in
// place it does nothing.
func TestRepair(t *testing.T) {
	h, _ := newHost(t)
	ctx := t.Context()
	denied := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.52"), 8080)
	eg := network.Egress{Deny: prefixes(denied.Addr.String() + "/32")}
	a, err := h.Attach(ctx, "gra", network.Limits{Conns: 7}, eg)
	if err != nil {
		t.Fatal(err)
	}
	if repaired, err := h.Repair(ctx); repaired || err != nil {
		t.Fatalf("Repair() with the rules in place = %v, %v; want false, nil", repaired, err)
	}
	wantEgress := network.EgressRules(testName, a.Link, eg)
	wantLimits := limitRulesOf(t, a.Link)
	if len(wantLimits) != 1 {
		t.Fatalf("limit rules of %s = %q, want one", a.ID, wantLimits)
	}

	// What a firewall reload does to the Host's rules.
	for _, hk := range [][3]string{{"filter", "INPUT", "-INPUT"}, {"filter", "FORWARD", "-FORWARD"}, {"nat", "POSTROUTING", "-POSTROUTING"}, {"nat", "PREROUTING", "-PREROUTING"}} {
		run(t, "iptables", "-w", "-t", hk[0], "-D", hk[1], "-j", testChain+hk[2])
	}
	for _, c := range [][2]string{{"filter", "-INPUT"}, {"filter", "-FORWARD"}, {"filter", "-EGRESS"}, {"filter", "-LIMITS"}, {"filter", "-REFUSE"}, {"nat", "-POSTROUTING"}, {"nat", "-PREROUTING"}} {
		run(t, "iptables", "-w", "-t", c[0], "-F", testChain+c[1])
	}
	for _, c := range [][2]string{{"filter", "-INPUT"}, {"filter", "-FORWARD"}, {"filter", "-EGRESS"}, {"filter", "-LIMITS"}, {"filter", "-REFUSE"}, {"nat", "-POSTROUTING"}, {"nat", "-PREROUTING"}} {
		run(t, "iptables", "-w", "-t", c[0], "-X", testChain+c[1])
	}

	if repaired, err := h.Repair(ctx); !repaired || err != nil {
		t.Fatalf("Repair() after a flush = %v, %v; want true, nil", repaired, err)
	}
	if got := egressRulesOf(t, a.Link); !slices.Equal(got, wantEgress) {
		t.Errorf("egress rules after Repair:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEgress, "\n"))
	}
	if got := limitRulesOf(t, a.Link); !slices.Equal(got, wantLimits) {
		t.Errorf("limit rules after Repair = %q, want %q", got, wantLimits)
	}
	if got := rules(t, "filter", "FORWARD"); !hookPlaced(got, "FORWARD", testChain+"-FORWARD") {
		t.Errorf("FORWARD after Repair = %q, want the jump to %s-FORWARD once, at the top", got, testChain)
	}
	// A private address, at a test host of the test's own: were the rules
	// not back, the probe would reach it, and nothing else.
	blocked := drivertest.NewTestHost(t, netip.MustParseAddr("10.125.0.9"), 8080).Target()
	got := probeIn(t, a, denied.Target(), blocked)
	if got[denied.Target()] != "refused" || got[blocked] != "refused" {
		t.Errorf("after Repair: %s → %v; want the denied host and a private address refused", a.ID, got)
	}
	if repaired, err := h.Repair(ctx); repaired || err != nil {
		t.Errorf("Repair() again = %v, %v; want false, nil", repaired, err)
	}
}
