package network_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/network"
)

// TestRules: the whole policy, rule by rule, as iptables -S lists it.
func TestRules(t *testing.T) {
	filter, nat := network.Rules("hearth", "hv", netip.MustParsePrefix("10.89.0.0/16"), []netip.Prefix{netip.MustParsePrefix("192.0.2.7/24")}, 0, 0)
	const reject = " -i hv+ -j HEARTH-REFUSE"
	wantFilter := []string{
		"-A HEARTH-INPUT -i hv+ -j HEARTH-REFUSE",
		"-A HEARTH-FORWARD -o hv+ -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"-A HEARTH-FORWARD -o hv+ -j REJECT --reject-with icmp-port-unreachable",
		"-A HEARTH-FORWARD ! -s 10.89.0.0/16 -i hv+ -j DROP",
		"-A HEARTH-FORWARD -d 0.0.0.0/8" + reject,
		"-A HEARTH-FORWARD -d 10.0.0.0/8" + reject,
		"-A HEARTH-FORWARD -d 100.64.0.0/10" + reject,
		"-A HEARTH-FORWARD -d 127.0.0.0/8" + reject,
		"-A HEARTH-FORWARD -d 169.254.0.0/16" + reject,
		"-A HEARTH-FORWARD -d 172.16.0.0/12" + reject,
		"-A HEARTH-FORWARD -d 192.168.0.0/16" + reject,
		"-A HEARTH-FORWARD -d 224.0.0.0/4" + reject,
		"-A HEARTH-FORWARD -d 240.0.0.0/4" + reject,
		"-A HEARTH-FORWARD -d 10.89.0.0/16" + reject,
		"-A HEARTH-FORWARD -d 192.0.2.0/24" + reject,
		"-A HEARTH-FORWARD -i hv+ -j HEARTH-EGRESS",
		"-A HEARTH-FORWARD -i hv+ -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j HEARTH-LIMITS",
		"-A HEARTH-FORWARD -i hv+ -j ACCEPT",
		`-A HEARTH-REFUSE -m conntrack --ctstate NEW -m hashlimit --hashlimit-upto 10/sec --hashlimit-burst 20 --hashlimit-mode srcip --hashlimit-name hearth-refuse -j LOG --log-prefix "hearth-refused: "`,
		"-A HEARTH-REFUSE -j REJECT --reject-with icmp-port-unreachable",
	}
	if !slices.Equal(filter, wantFilter) {
		t.Errorf("filter rules:\n%s\nwant:\n%s", strings.Join(filter, "\n"), strings.Join(wantFilter, "\n"))
	}
	wantNat := []string{"-A HEARTH-POSTROUTING -s 10.89.0.0/16 ! -o hv+ -j MASQUERADE"}
	if !slices.Equal(nat, wantNat) {
		t.Errorf("nat rules = %q, want %q", nat, wantNat)
	}

	in := network.RestoreInput("hearth", filter, nat)
	for _, want := range []string{
		"*filter\n:HEARTH-INPUT - [0:0]\n:HEARTH-FORWARD - [0:0]\n:HEARTH-REFUSE - [0:0]\n-A HEARTH-INPUT ",
		// The PREROUTING chain is emptied even with no DNS.
		"\n-A HEARTH-REFUSE -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n*nat\n:HEARTH-POSTROUTING - [0:0]\n:HEARTH-PREROUTING - [0:0]\n-A HEARTH-POSTROUTING ",
	} {
		if !strings.Contains(in, want) {
			t.Errorf("restore input:\n%s\nwant it to hold %q", in, want)
		}
	}
	if !strings.HasSuffix(in, "MASQUERADE\nCOMMIT\n") {
		t.Errorf("restore input:\n%s\nwant it to end with the nat COMMIT", in)
	}
	if input, forward, post, pre, egress, limits := network.ChainsFor("hearthoci"); input != "HEARTHOCI-INPUT" || forward != "HEARTHOCI-FORWARD" || post != "HEARTHOCI-POSTROUTING" || pre != "HEARTHOCI-PREROUTING" || egress != "HEARTHOCI-EGRESS" || limits != "HEARTHOCI-LIMITS" {
		t.Errorf("chainsFor(hearthoci) = %s, %s, %s, %s, %s, %s", input, forward, post, pre, egress, limits)
	}
	// The egress and limits chains are not the restore's: it would empty
	// them.
	for _, chain := range []string{":HEARTH-EGRESS", ":HEARTH-LIMITS"} {
		if strings.Contains(in, chain) {
			t.Errorf("restore input:\n%s\nwant no declaration %s", in, chain)
		}
	}
}

// TestRulesDNS: with a DNS port, PREROUTING redirects sandboxes' queries
// to it, and INPUT accepts them there only when redirected, before it
// rejects everything else; the rest of the policy is as without.
func TestRulesDNS(t *testing.T) {
	subnet := netip.MustParsePrefix("10.89.0.0/16")
	plainFilter, plainNat := network.Rules("hearth", "hv", subnet, nil, 0, 0)
	filter, nat := network.Rules("hearth", "hv", subnet, nil, 10053, 0)
	wantFilter := append([]string{
		"-A HEARTH-INPUT -i hv+ -p udp -m udp --dport 10053 -m conntrack --ctstate DNAT -j ACCEPT",
		"-A HEARTH-INPUT -i hv+ -p tcp -m tcp --dport 10053 -m conntrack --ctstate DNAT -j ACCEPT",
	}, plainFilter...)
	if !slices.Equal(filter, wantFilter) {
		t.Errorf("filter rules with DNS:\n%s\nwant:\n%s", strings.Join(filter, "\n"), strings.Join(wantFilter, "\n"))
	}
	wantNat := append(plainNat,
		"-A HEARTH-PREROUTING -i hv+ -p udp -m udp --dport 53 -j REDIRECT --to-ports 10053",
		"-A HEARTH-PREROUTING -i hv+ -p tcp -m tcp --dport 53 -j REDIRECT --to-ports 10053",
	)
	if !slices.Equal(nat, wantNat) {
		t.Errorf("nat rules with DNS:\n%s\nwant:\n%s", strings.Join(nat, "\n"), strings.Join(wantNat, "\n"))
	}
	if in := network.RestoreInput("hearth", filter, nat); !strings.Contains(in, ":HEARTH-PREROUTING - [0:0]\n") || !strings.HasSuffix(in, "--to-ports 10053\nCOMMIT\n") {
		t.Errorf("restore input:\n%s\nwant the PREROUTING chain declared and filled", in)
	}
}

// TestRulesGateway: with a gateway port, PREROUTING redirects sandboxes'
// connections to port 80 of the subnet (their gateway) to it, and INPUT
// accepts them there only when redirected; the rest is as without.
func TestRulesGateway(t *testing.T) {
	subnet := netip.MustParsePrefix("10.89.0.0/16")
	plainFilter, plainNat := network.Rules("hearth", "hv", subnet, nil, 10053, 0)
	filter, nat := network.Rules("hearth", "hv", subnet, nil, 10053, 10080)
	wantFilter := slices.Insert(slices.Clone(plainFilter), 2, "-A HEARTH-INPUT -i hv+ -p tcp -m tcp --dport 10080 -m conntrack --ctstate DNAT -j ACCEPT")
	if !slices.Equal(filter, wantFilter) {
		t.Errorf("filter rules with a gateway:\n%s\nwant:\n%s", strings.Join(filter, "\n"), strings.Join(wantFilter, "\n"))
	}
	wantNat := append(plainNat, "-A HEARTH-PREROUTING -d 10.89.0.0/16 -i hv+ -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 10080")
	if !slices.Equal(nat, wantNat) {
		t.Errorf("nat rules with a gateway:\n%s\nwant:\n%s", strings.Join(nat, "\n"), strings.Join(wantNat, "\n"))
	}
}

// TestHookPlacement: a Host's jump is in place at the top of its
// built-in chain, above every rule but other Hosts' jumps (and the marked
// copy of one being moved up), in any order among them.
func TestHookPlacement(t *testing.T) {
	const hook = "-A INPUT -j HEARTH-INPUT"
	for _, tc := range []struct {
		name    string
		listing []string
		count   int
		placed  bool
	}{
		{"missing", []string{"-P INPUT ACCEPT"}, 0, false},
		{"missing among others", []string{"-P INPUT ACCEPT", "-A INPUT -i lo -j ACCEPT", "-A INPUT -j OTHER"}, 0, false},
		{"first", []string{"-P INPUT ACCEPT", hook, "-A INPUT -i lo -j ACCEPT"}, 1, true},
		{"first and again", []string{"-P INPUT ACCEPT", hook, "-A INPUT -i lo -j ACCEPT", hook, hook}, 3, true},
		{"not first", []string{"-P INPUT ACCEPT", "-A INPUT -j DOCKER", hook}, 1, false},
		{"twice, not first", []string{"-P INPUT ACCEPT", "-A INPUT -j DOCKER", hook, "-A INPUT -i lo -j ACCEPT", hook}, 2, false},
		{"another host's", []string{"-P INPUT ACCEPT", "-A INPUT -j HEARTHOCI-INPUT"}, 0, false},
		{"below other hosts'", []string{"-P INPUT ACCEPT", "-A INPUT -j HEARTH-STAGING-INPUT", "-A INPUT -j HEARTHOCI-INPUT", hook, "-A INPUT -j DOCKER"}, 1, true},
		{"below one being moved", []string{"-P INPUT ACCEPT", `-A INPUT -m comment --comment "hearth: moving this jump up" -j HEARTH-X-INPUT`, hook}, 1, true},
		{"below another host's, below another rule", []string{"-P INPUT ACCEPT", "-A INPUT -j DOCKER", "-A INPUT -j HEARTHOCI-INPUT", hook}, 1, false},
		{"below a host's chain that is not a jump's", []string{"-P INPUT ACCEPT", "-A INPUT -j HEARTH-X-EGRESS", hook}, 1, false},
		{"below a rule that only looks like a host's jump", []string{"-P INPUT ACCEPT", "-A INPUT -i hv+ -j HEARTH-X-INPUT", hook}, 1, false},
		{"a rule that only looks like it", []string{"-P INPUT ACCEPT", "-A INPUT -i hv+ -j HEARTH-INPUT", hook}, 1, false},
		{"another chain's", []string{"-P FORWARD ACCEPT", "-A FORWARD -j HEARTH-INPUT"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count, placed := network.HookPlacement(tc.listing, "INPUT", "HEARTH-INPUT")
			if count != tc.count || placed != tc.placed {
				t.Errorf("hookPlacement(%q) = %d, %v; want %d, %v", tc.listing, count, placed, tc.count, tc.placed)
			}
		})
	}
}

// TestHashlimitName: each host's refusal log rule has a rate table of its
// own, named in at most 15 characters, even where the hosts' names are
// longer and begin alike; the default host's keeps its name.
func TestHashlimitName(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"hearth", "hearthnet", "hearthnettwo", "hearth-staging", "hearth-stagingb", "hearth-abcdefghi", "hearth-abcdefghj"} {
		got := network.HashlimitName(name)
		if len(got) > 15 || got == "" {
			t.Errorf("hashlimitName(%s) = %q, want 1 to 15 characters", name, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("hashlimitName(%s) = %q, as for %s", name, got, other)
		}
		seen[got] = name
	}
	if got := network.HashlimitName("hearth"); got != "hearth-refuse" {
		t.Errorf("hashlimitName(hearth) = %q, want hearth-refuse (as before instances)", got)
	}
}
