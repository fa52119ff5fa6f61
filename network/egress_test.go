package network_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/network"
)

func prefixes(ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func TestCheckEgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    network.Egress
		ok   bool
	}{
		{"zero", network.Egress{}, true},
		{"IPv4", network.Egress{Allow: prefixes("198.51.100.0/24", "0.0.0.0/0"), Deny: prefixes("198.51.100.7/32")}, true},
		{"IPv6 allow", network.Egress{Allow: prefixes("2001:db8::/32")}, false},
		{"IPv6 deny", network.Egress{Deny: prefixes("198.51.100.0/24", "::/0")}, false},
		{"IPv4 in IPv6", network.Egress{Deny: prefixes("::ffff:198.51.100.1/128")}, false},
		{"invalid", network.Egress{Deny: []netip.Prefix{{}}}, false},
		{"domains", network.Egress{AllowDomains: []string{"example.com", "*.example.org"}, DenyDomains: []string{"x.example.org"}}, true},
		{"domain not normalized", network.Egress{AllowDomains: []string{"Example.com."}}, false},
		{"not a domain", network.Egress{DenyDomains: []string{"exa mple.com"}}, false},
		{"address as a domain", network.Egress{DenyDomains: []string{"198.51.100.1"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.e.Validate(); (err == nil) != tc.ok {
				t.Errorf("check(%+v) = %v, want ok %v", tc.e, err, tc.ok)
			}
		})
	}
}

func TestEgressRules(t *testing.T) {
	const (
		chain  = "HEARTH-EGRESS"
		link   = "hvabcdefghijklm"
		reject = " -i " + link + " -j HEARTH-REFUSE"
		ret    = " -i " + link + " -j RETURN"
	)
	for _, tc := range []struct {
		name string
		e    network.Egress
		want []string
	}{
		{"none", network.Egress{}, nil},
		{"deny", network.Egress{Deny: prefixes("198.51.100.40/32", "203.0.113.0/24")}, []string{
			"-A HEARTH-EGRESS -d 198.51.100.40/32" + reject,
			"-A HEARTH-EGRESS -d 203.0.113.0/24" + reject,
		}},
		{"allow", network.Egress{Allow: prefixes("198.51.100.41/32")}, []string{
			"-A HEARTH-EGRESS -d 198.51.100.41/32" + ret,
			"-A HEARTH-EGRESS" + reject,
		}},
		{"deny before allow", network.Egress{Allow: prefixes("203.0.113.0/24", "198.51.100.41/32"), Deny: prefixes("203.0.113.9/32")}, []string{
			"-A HEARTH-EGRESS -d 203.0.113.9/32" + reject,
			"-A HEARTH-EGRESS -d 203.0.113.0/24" + ret,
			"-A HEARTH-EGRESS -d 198.51.100.41/32" + ret,
			"-A HEARTH-EGRESS" + reject,
		}},
		{"masked and once", network.Egress{Deny: prefixes("203.0.113.9/24", "203.0.113.0/24", "198.51.100.40/32")}, []string{
			"-A HEARTH-EGRESS -d 203.0.113.0/24" + reject,
			"-A HEARTH-EGRESS -d 198.51.100.40/32" + reject,
		}},
		{"everywhere, as iptables lists it", network.Egress{Allow: prefixes("0.0.0.0/0")}, []string{
			"-A HEARTH-EGRESS" + ret,
			"-A HEARTH-EGRESS" + reject,
		}},
		{"denied domains", network.Egress{Deny: prefixes("198.51.100.40/32"), DenyDomains: []string{"example.com"}}, []string{
			"-A HEARTH-EGRESS -d 198.51.100.40/32" + reject,
			"-A HEARTH-EGRESS -i " + link + " -m set --match-set hearth-deny dst,src -j HEARTH-REFUSE",
		}},
		{"allowed domains", network.Egress{Allow: prefixes("198.51.100.41/32"), AllowDomains: []string{"*.example.com"}}, []string{
			"-A HEARTH-EGRESS -d 198.51.100.41/32" + ret,
			"-A HEARTH-EGRESS -i " + link + " -m set --match-set hearth-allow dst,src -j RETURN",
			"-A HEARTH-EGRESS" + reject,
		}},
		{"allowed domains only", network.Egress{AllowDomains: []string{"example.com"}, DenyDomains: []string{"x.example.com"}}, []string{
			"-A HEARTH-EGRESS -i " + link + " -m set --match-set hearth-deny dst,src -j HEARTH-REFUSE",
			"-A HEARTH-EGRESS -i " + link + " -m set --match-set hearth-allow dst,src -j RETURN",
			"-A HEARTH-EGRESS" + reject,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := network.EgressRules("hearth", link, tc.e); !slices.Equal(got, tc.want) {
				t.Errorf("egressRules(%+v):\n%s\nwant:\n%s", tc.e, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestEgressRestore(t *testing.T) {
	const chain, link, other = "HEARTH-EGRESS", "hvaaaaaaaaaaaaa", "hvbbbbbbbbbbbbb"
	rules := func(l string, e network.Egress) []string { return network.EgressRules("hearth", l, e) }
	denyA := network.Egress{Deny: prefixes("198.51.100.40/32")}
	allowB := network.Egress{Allow: prefixes("198.51.100.41/32")}
	del := func(r string) string { return "-D" + strings.TrimPrefix(r, "-A") }
	for _, tc := range []struct {
		name    string
		listing []string
		e       network.Egress
		want    []string // the transaction's lines between *filter and COMMIT; nil for none
	}{
		{"none, none there", []string{"-N " + chain}, network.Egress{}, nil},
		{"no chain listed", nil, network.Egress{}, nil},
		{"new", []string{"-N " + chain}, denyA, rules(link, denyA)},
		{"there already, among another's", slices.Concat([]string{"-N " + chain}, rules(other, allowB), rules(link, denyA), rules(other, denyA)), denyA, nil},
		{"changed", slices.Concat([]string{"-N " + chain}, rules(link, denyA), rules(other, allowB)), allowB,
			append(rules(link, allowB), del(rules(link, denyA)[0]))},
		{"removed", slices.Concat([]string{"-N " + chain}, rules(other, denyA), rules(link, allowB)), network.Egress{},
			[]string{del(rules(link, allowB)[0]), del(rules(link, allowB)[1])}},
		{"copies", slices.Concat([]string{"-N " + chain}, rules(link, denyA), rules(link, denyA)), denyA,
			append(rules(link, denyA), del(rules(link, denyA)[0]), del(rules(link, denyA)[0]))},
		{"out of order", []string{"-N " + chain, rules(link, allowB)[1], rules(link, allowB)[0]}, allowB,
			append(rules(link, allowB), del(rules(link, allowB)[1]), del(rules(link, allowB)[0]))},
		{"another host's chain", []string{"-N " + chain, "-A HEARTHOCI-EGRESS -i " + link + " -j RETURN"}, network.Egress{}, nil},
		{"a longer name", []string{"-N " + chain, "-A " + chain + " -i " + link + "x -j RETURN"}, network.Egress{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := network.LinkRulesRestore(tc.listing, chain, link, rules(link, tc.e))
			want := ""
			if tc.want != nil {
				want = "*filter\n" + strings.Join(tc.want, "\n") + "\nCOMMIT\n"
			}
			if got != want {
				t.Errorf("linkRulesRestore(%q, %+v):\n%s\nwant:\n%s", tc.listing, tc.e, got, want)
			}
		})
	}
}

// egressRulesOf returns the rules of the egress chain for link.
func egressRulesOf(t *testing.T, link string) []string {
	t.Helper()
	return linkRulesOf(t, testChain+"-EGRESS", link)
}

// linkRulesOf returns the rules of the filter chain for link.
func linkRulesOf(t *testing.T, chain, link string) []string {
	t.Helper()
	var out []string
	for _, r := range rules(t, "filter", chain) {
		if strings.Contains(r, " -i "+link+" ") {
			out = append(out, r)
		}
	}
	return out
}

// TestEgress, with the kernel's own stack in the namespaces (no runtime):
// Attach applies a sandbox's egress policy and SetEgress replaces it live,
// each time leaving exactly that sandbox's rules in the egress chain, and
// the sandbox then reaches what the policy allows and is refused the rest;
// Setup again (a daemon restart) keeps them; the same policy again changes
// nothing; Detach removes them; another sandbox's rules stay throughout.
func TestEgress(t *testing.T) {
	h, dir := newHost(t)
	ctx := t.Context()
	one := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.40"), 8080)
	two := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.42"), 8080)
	denyOne := network.Egress{Deny: prefixes(one.Addr.String() + "/32")}
	allowTwo := network.Egress{Allow: prefixes(two.Addr.String() + "/32")}

	if _, err := h.Attach(ctx, "egv6", network.Limits{}, network.Egress{Deny: prefixes("2001:db8::/32")}); err == nil {
		t.Errorf("Attach(egv6, an IPv6 deny) = nil, want an error")
	}
	if h.Attached("egv6") {
		t.Errorf("Attach(egv6, an IPv6 deny) attached it")
	}
	if err := h.SetEgress(ctx, "egnone", denyOne); err == nil {
		t.Errorf("SetEgress(egnone) of a sandbox not attached = nil, want an error")
	}

	a, err := h.Attach(ctx, "ega", network.Limits{}, denyOne)
	if err != nil {
		t.Fatalf("Attach(ega, %+v) = %v", denyOne, err)
	}
	b, err := h.Attach(ctx, "egb", network.Limits{}, allowTwo)
	if err != nil {
		t.Fatalf("Attach(egb, %+v) = %v", allowTwo, err)
	}
	bRules := network.EgressRules(testName, b.Link, allowTwo)
	check := func(when string, e network.Egress, oneWant, twoWant string) {
		t.Helper()
		want := network.EgressRules(testName, a.Link, e)
		if got := egressRulesOf(t, a.Link); !slices.Equal(got, want) {
			t.Errorf("%s: egress rules of %s:\n%s\nwant:\n%s", when, a.ID, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if got := egressRulesOf(t, b.Link); !slices.Equal(got, bRules) {
			t.Errorf("%s: egress rules of the other sandbox %s = %q, want %q", when, b.ID, got, bRules)
		}
		got := probeIn(t, a, one.Target(), two.Target())
		if got[one.Target()] != oneWant || got[two.Target()] != twoWant {
			t.Errorf("%s: %s → %s, %s = %s, %s; want %s, %s", when, a.ID, one.Target(), two.Target(), got[one.Target()], got[two.Target()], oneWant, twoWant)
		}
	}
	check("after Attach", denyOne, "refused", "ok")
	if got := probeIn(t, b, one.Target(), two.Target()); got[one.Target()] != "refused" || got[two.Target()] != "ok" {
		t.Errorf("%s (allow %s) → %v, want only %s ok", b.ID, two.Addr, got, two.Target())
	}

	for i := range 2 {
		if err := h.Setup(ctx); err != nil {
			t.Fatalf("Setup() #%d = %v", i+1, err)
		}
	}
	if err := openHost(t, dir).Setup(ctx); err != nil {
		t.Fatalf("Setup() by another Host = %v", err)
	}
	check("after Setup again", denyOne, "refused", "ok")

	for _, e := range []network.Egress{allowTwo, allowTwo, {}, {Allow: allowTwo.Allow, Deny: allowTwo.Allow}, denyOne} {
		if err := h.SetEgress(ctx, "ega", e); err != nil {
			t.Fatalf("SetEgress(ega, %+v) = %v", e, err)
		}
		oneWant, twoWant := "ok", "ok"
		if len(e.Allow) > 0 || slices.Contains(e.Deny, netip.PrefixFrom(one.Addr, 32)) {
			oneWant = "refused"
		}
		if slices.Contains(e.Deny, netip.PrefixFrom(two.Addr, 32)) {
			twoWant = "refused"
		}
		check(fmt.Sprintf("after SetEgress(%+v)", e), e, oneWant, twoWant)
	}

	if err := h.Detach(ctx, "ega"); err != nil {
		t.Fatalf("Detach(ega) = %v", err)
	}
	if got := egressRulesOf(t, a.Link); len(got) != 0 {
		t.Errorf("egress rules of %s after Detach = %q, want none", a.ID, got)
	}
	if got := egressRulesOf(t, b.Link); !slices.Equal(got, bRules) {
		t.Errorf("egress rules of the other sandbox %s after Detach(ega) = %q, want %q", b.ID, got, bRules)
	}
}
