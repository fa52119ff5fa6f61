package drivertest

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// chainSuffixes end the names of a network host's iptables chains (see
// the network package doc): <NAME>-INPUT and so on.
var chainSuffixes = []string{"-INPUT", "-FORWARD", "-POSTROUTING", "-PREROUTING", "-EGRESS", "-LIMITS", "-REFUSE"}

// setTimeout is the countdown ipset lists with each entry of a set with
// timeouts, which changes from one listing to the next.
var setTimeout = regexp.MustCompile(` timeout [0-9]+`)

// NetworkObjects lists what the network host named name (network.Options.Name)
// with links beginning with linkPrefix holds on this machine, one line
// each, in an order that depends on nothing else: the rules of its chains
// and the jumps to them (iptables -S of the filter and nat tables, no
// counters), its ipsets and their entries (without their countdowns), its
// network namespaces, and its links with their IPv4 addresses. Another
// host's objects are left out even when its name begins with name, so
// that a test compares one host's objects before and after what another
// did.
func NetworkObjects(t testing.TB, name, linkPrefix string) []string {
	t.Helper()
	chains := map[string]bool{}
	for _, s := range chainSuffixes {
		chains[strings.ToUpper(name)+s] = true
	}
	var out []string
	for _, table := range []string{"filter", "nat"} {
		for line := range strings.Lines(command(t, "iptables", "-w", "-t", table, "-S")) {
			for _, f := range strings.Fields(line) {
				if chains[f] {
					out = append(out, table+": "+strings.TrimSpace(line))
					break
				}
			}
		}
	}
	for _, set := range []string{name + "-allow", name + "-deny"} {
		listing, err := exec.Command("ipset", "list", set).Output()
		if err != nil {
			continue // no such set
		}
		members := false
		for line := range strings.Lines(string(listing)) {
			line = strings.TrimSpace(line)
			if members && line != "" {
				out = append(out, "ipset "+set+": "+setTimeout.ReplaceAllString(line, ""))
			}
			members = members || line == "Members:"
		}
		out = append(out, "ipset "+set)
	}
	for line := range strings.Lines(command(t, "ip", "netns", "list")) {
		ns, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if id, ok := strings.CutPrefix(ns, name+"-"); ok && alnum(id) {
			out = append(out, "netns "+ns)
		}
	}
	for line := range strings.Lines(command(t, "ip", "-o", "-4", "address", "show")) {
		if f := strings.Fields(line); len(f) > 3 && strings.HasPrefix(f[1], linkPrefix) {
			out = append(out, "address "+f[1]+" "+f[3])
		}
	}
	for line := range strings.Lines(command(t, "ip", "-o", "link", "show")) {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], linkPrefix) {
			link, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			out = append(out, "link "+link)
		}
	}
	return out
}

// alnum reports whether s is a sandbox id: lowercase letters and digits.
func alnum(s string) bool {
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

// command runs a command and returns its output; it fails t on error.
func command(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out)
}
