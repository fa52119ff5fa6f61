package network

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// blocked are the destinations a sandbox's packets are never forwarded to,
// whatever the host routes (see the package doc for why each).
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// reject is the target of every refusal: an ICMP port unreachable, which a
// connect reports at once as refused (a DROP would make it wait for its
// timeout).
const reject = "-j REJECT --reject-with icmp-port-unreachable"

// chains are the names of a Host's own iptables chains: the policy's;
// egress, which holds the sandboxes' own egress rules (see egressRules);
// and limits, which holds their connection caps (see connRule).
type chains struct {
	input, forward, postrouting, prerouting, egress, limits string
	// refuse logs a sandbox's refused connection and rejects it: every
	// refusal of a sandbox's packet jumps to it.
	refuse string
	// allowSet and denySet are the ipsets of the addresses names
	// resolved to for each sandbox (see the package doc).
	allowSet, denySet string
	// logPrefix begins the kernel's log line of each refusal (see
	// WatchRefusals).
	logPrefix string
}

// chainsFor returns the chains of the host named name: <NAME>-INPUT,
// <NAME>-FORWARD, <NAME>-EGRESS, <NAME>-LIMITS, <NAME>-REFUSE (filter),
// <NAME>-POSTROUTING and <NAME>-PREROUTING (nat); its sets, <name>-allow
// and <name>-deny; and its log prefix, "<name>-refused: ".
func chainsFor(name string) chains {
	up := strings.ToUpper(name)
	return chains{
		input: up + "-INPUT", forward: up + "-FORWARD", postrouting: up + "-POSTROUTING", prerouting: up + "-PREROUTING",
		egress: up + "-EGRESS", limits: up + "-LIMITS", refuse: up + "-REFUSE",
		allowSet: name + "-allow", denySet: name + "-deny",
		logPrefix: name + "-refused: ",
	}
}

// hook is a jump from a built-in chain to one of ours.
type hook struct {
	table, from, to string
}

// rule is the hook as iptables -S prints it.
func (h hook) rule() string { return "-A " + h.from + " -j " + h.to }

// hooks are where the chains are jumped to from: each near the top of its
// built-in chain (see hookPlacement). The PREROUTING chain is hooked (and
// emptied) by every Setup, even with no DNS to redirect to, so that a
// daemon restarted without DNS leaves no redirect of an earlier run
// behind.
func (c chains) hooks() []hook {
	return []hook{
		{"filter", "INPUT", c.input},
		{"filter", "FORWARD", c.forward},
		{"nat", "POSTROUTING", c.postrouting},
		{"nat", "PREROUTING", c.prerouting},
	}
}

// filterRules returns the rules of the filter table's chains, each as
// iptables -S prints it, so that a listing can be compared with them.
// links is the link prefix followed by "+" (iptables' wildcard). dnsPort
// is the DNS forwarder's port and gatewayPort the egress gateway's, 0 for
// none.
func filterRules(c chains, linkPrefix string, subnet netip.Prefix, deny []netip.Prefix, dnsPort, gatewayPort int) []string {
	links := linkPrefix + "+"
	refuse := "-j " + c.refuse
	var rules []string
	// The forwarder and the gateway, but only for what PREROUTING
	// redirected there (conntrack's DNAT): a sandbox reaches the forwarder
	// at port 53 of any address and the gateway at port 80 of its gateway
	// address, and neither at its own port.
	accept := func(proto string, port int) string {
		return "-A " + c.input + " -i " + links + " -p " + proto + " -m " + proto + " --dport " + strconv.Itoa(port) + " -m conntrack --ctstate DNAT -j ACCEPT"
	}
	if dnsPort != 0 {
		rules = append(rules, accept("udp", dnsPort), accept("tcp", dnsPort))
	}
	if gatewayPort != 0 {
		rules = append(rules, accept("tcp", gatewayPort))
	}
	rules = append(rules,
		// The host, at any of its addresses.
		"-A "+c.input+" -i "+links+" "+refuse,
		// Into a sandbox: only what belongs to its own connections.
		"-A "+c.forward+" -o "+links+" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"-A "+c.forward+" -o "+links+" "+reject,
		// Out of one: never with a source that is not a sandbox's.
		"-A "+c.forward+" ! -s "+subnet.Masked().String()+" -i "+links+" -j DROP",
	)
	dsts := append(slices.Clone(blocked), subnet.Masked())
	for _, p := range deny {
		dsts = append(dsts, p.Masked())
	}
	for _, p := range dsts {
		rules = append(rules, "-A "+c.forward+" -d "+p.String()+" -i "+links+" "+refuse)
	}
	return append(rules,
		// Every packet out of a sandbox, past the sandbox's own egress
		// rules (none for most): a live change of them applies to the
		// connections it has open too.
		"-A "+c.forward+" -i "+links+" -j "+c.egress,
		// A new TCP connection to where it may go: past its sandbox's
		// cap, if it has one. Only SYNs walk the limits chain, one rule
		// per capped sandbox.
		"-A "+c.forward+" -i "+links+" -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j "+c.limits,
		"-A "+c.forward+" -i "+links+" -j ACCEPT",
		// A refusal: the first packet of each refused connection logged
		// (at most 10 a second per sandbox address, 20 at once), for
		// WatchRefusals; every packet rejected.
		"-A "+c.refuse+" -m conntrack --ctstate NEW -m hashlimit --hashlimit-upto 10/sec --hashlimit-burst 20 --hashlimit-mode srcip --hashlimit-name "+hashlimitName(c)+" -j LOG --log-prefix \""+c.logPrefix+"\"",
		"-A "+c.refuse+" "+reject,
	)
}

// hashlimitName names the rate table of the refuse chain's log rule: at
// most 15 characters, as the kernel wants, and one of this Host's own (a
// table of that name is shared by every rule that names it): the chain's
// name in lower case when it fits, else its first 6 characters, a dash
// and a hash of the whole.
func hashlimitName(c chains) string {
	n := strings.ToLower(c.refuse)
	if len(n) <= 15 {
		return n
	}
	h := fnv.New32a()
	h.Write([]byte(n))
	return fmt.Sprintf("%s-%08x", n[:6], h.Sum32())
}

// natRules returns the rules of the nat table's chains, as iptables -S
// prints them: masquerade what leaves the subnet for anywhere but another
// sandbox; when dnsPort is not 0, redirect every DNS query of a sandbox
// (port 53, whatever the address) to the forwarder at dnsPort; and when
// gatewayPort is not 0, redirect a sandbox's connections to port 80 of an
// address of the subnet (its gateway: every other one is another
// sandbox's, refused anyway) to the egress gateway at gatewayPort.
func natRules(c chains, linkPrefix string, subnet netip.Prefix, dnsPort, gatewayPort int) []string {
	links := linkPrefix + "+"
	rules := []string{"-A " + c.postrouting + " -s " + subnet.Masked().String() + " ! -o " + links + " -j MASQUERADE"}
	if dnsPort != 0 {
		for _, proto := range []string{"udp", "tcp"} {
			rules = append(rules, "-A "+c.prerouting+" -i "+links+" -p "+proto+" -m "+proto+" --dport 53 -j REDIRECT --to-ports "+strconv.Itoa(dnsPort))
		}
	}
	if gatewayPort != 0 {
		rules = append(rules, "-A "+c.prerouting+" -d "+subnet.Masked().String()+" -i "+links+" -p tcp -m tcp --dport 80 -j REDIRECT --to-ports "+strconv.Itoa(gatewayPort))
	}
	return rules
}

// restoreInput is the input of `iptables-restore --noflush` that creates
// (or empties) the chains and fills them, in one transaction per table.
func restoreInput(c chains, filter, nat []string) string {
	var b strings.Builder
	b.WriteString("*filter\n:" + c.input + " - [0:0]\n:" + c.forward + " - [0:0]\n:" + c.refuse + " - [0:0]\n")
	for _, r := range filter {
		b.WriteString(r + "\n")
	}
	b.WriteString("COMMIT\n*nat\n:" + c.postrouting + " - [0:0]\n:" + c.prerouting + " - [0:0]\n")
	for _, r := range nat {
		b.WriteString(r + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// hookPlacement reads the listing of h's built-in chain (iptables -S
// <chain>): how many jumps h it holds, and whether the first one is
// placed: above every rule but other Hosts' jumps (see isHook), so that
// no rule of another program judges a sandbox's packet before this
// Host's chain does. Every Host of every daemon on the machine keeps its
// jump in that block at the top, in any order: each Host's chains match
// only its own sandboxes' links and subnet, so the order among them
// decides nothing, and no two of them fight for the first place.
func hookPlacement(listing []string, h hook) (count int, placed bool) {
	above := true // only Hosts' jumps so far
	for _, line := range listing {
		if !strings.HasPrefix(line, "-A "+h.from+" ") {
			continue
		}
		if line == h.rule() {
			count++
			placed = placed || above
			continue
		}
		above = above && isHook(line, h.from)
	}
	return count, placed
}

// movingComment marks the copy of a jump that hookFirst puts above while
// it moves the jump up.
const movingComment = "hearth: moving this jump up"

// isHook reports whether rule, a rule of the built-in chain from as
// iptables -S lists it, is a Host's jump to its chain for from, or the
// marked copy of one that hookFirst is moving: a jump to a chain named
// HEARTH…-<from> (every Host's name begins with "hearth", see
// Options.Name) that matches every packet.
func isHook(rule, from string) bool {
	rest, ok := strings.CutPrefix(rule, "-A "+from+" ")
	rest = strings.TrimPrefix(rest, `-m comment --comment "`+movingComment+`" `)
	to, jump := strings.CutPrefix(rest, "-j ")
	return ok && jump && strings.HasPrefix(to, "HEARTH") && strings.HasSuffix(to, "-"+from) && !strings.Contains(to, " ")
}

// ofLink reports whether rule, as iptables -S lists it, matches packets
// in from link (-i link), and no longer name that begins with it.
func ofLink(rule, link string) bool {
	f := strings.Fields(rule)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-i" && f[i+1] == link {
			return true
		}
	}
	return false
}

// linkRulesRestore compares listing, one of the Host's per-sandbox chains
// (egress, limits) as iptables -S lists it, with want, the rules link
// should have there, and returns the input of `iptables-restore --noflush` that makes the chain
// hold them, or "" when it does already. The transaction appends every
// wanted rule, then deletes every rule link had, each by its spec: a -D
// deletes the first rule that matches, which is the old one, listed
// before the ones just appended. The kernel takes the table whole at the
// COMMIT, so no packet ever meets half a change. Other links' rules are
// left alone.
func linkRulesRestore(listing []string, chain, link string, want []string) string {
	var have []string
	for _, r := range listing {
		if strings.HasPrefix(r, "-A "+chain+" ") && ofLink(r, link) {
			have = append(have, r)
		}
	}
	if slices.Equal(have, want) {
		return ""
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, r := range want {
		b.WriteString(r + "\n")
	}
	for _, r := range have {
		b.WriteString("-D" + strings.TrimPrefix(r, "-A") + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
