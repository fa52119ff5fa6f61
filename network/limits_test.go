package network_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/network"
)

func TestBurstBytes(t *testing.T) {
	for _, tc := range []struct {
		bitsPerSec, want int64
	}{
		{1, 64 << 10},
		{8e6, 64 << 10},                         // 10 ms is 10 KB: the floor
		{100e6, 125_000},                        // small
		{250e6, 312_500},                        // medium
		{1000e6, 1_250_000},                     // large
		{40e9, 50_000_000},                      // no ceiling
		{52_428_800, 65_536},                    // 10 ms is exactly the floor
		{52_428_808, 65_536},                    // rounds down
		{52_436_800, 65_546},                    // just above
		{100e6 + 7, 125_000},                    // rounds down
		{math.MaxInt64, 11_529_215_046_068_469}, // no overflow
	} {
		if got := network.BurstBytes(tc.bitsPerSec); got != tc.want {
			t.Errorf("burstBytes(%d) = %d, want %d", tc.bitsPerSec, got, tc.want)
		}
	}
}

func TestShapeLines(t *testing.T) {
	got := network.ShapeLines("hvabcdefghijklm", "hv0abcdefghijkl", 8e6)
	want := []string{
		"qdisc replace dev hvabcdefghijklm root tbf rate 8000000bit burst 65536 latency 50ms",
		"qdisc replace dev hv0abcdefghijkl root tbf rate 8000000bit burst 65536 latency 50ms",
		"qdisc replace dev hvabcdefghijklm ingress",
		"filter replace dev hvabcdefghijklm parent ffff: protocol all prio 1 handle 800::800 u32 match u32 0 0 action mirred egress redirect dev hv0abcdefghijkl",
	}
	if !slices.Equal(got, want) {
		t.Errorf("shapeLines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := network.ShapeLines("hva", "hv0a", 1000e6)[0]; got != "qdisc replace dev hva root tbf rate 1000000000bit burst 1250000 latency 50ms" {
		t.Errorf("shapeLines(1 Gbit/s)[0] = %q", got)
	}
}

func TestUnshapeLines(t *testing.T) {
	const (
		delRoot    = "qdisc del dev hva root"
		delIngress = "qdisc del dev hva ingress"
	)
	for _, tc := range []struct {
		name, shown string
		want        []string
	}{
		{"nothing listed", "", nil},
		{"a veth's default", "qdisc noqueue 0: root refcnt 2 \n", nil},
		{"another default", "qdisc pfifo_fast 0: root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n", nil},
		{"shaped", "qdisc tbf 8001: root refcnt 3 rate 8Mbit burst 64Kb lat 50ms \nqdisc ingress ffff: parent ffff:fff1 ---------------- \n", []string{delRoot, delIngress}},
		{"root only", "qdisc tbf 8001: root refcnt 2 rate 8Mbit burst 64Kb lat 50ms \n", []string{delRoot}},
		{"ingress only", "qdisc noqueue 0: root refcnt 2 \nqdisc ingress ffff: parent ffff:fff1 ---------------- \n", []string{delIngress}},
		{"a tbf that is not the root", "qdisc htb 1: root refcnt 2 r2q 10 default 0\nqdisc tbf 10: parent 1:1 rate 8Mbit burst 64Kb lat 50ms \n", nil},
		{"clsact is not ours", "qdisc noqueue 0: root refcnt 2 \nqdisc clsact ffff: parent ffff:fff1 \n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := network.UnshapeLines("hva", tc.shown); !slices.Equal(got, tc.want) {
				t.Errorf("unshapeLines(%q) = %q, want %q", tc.shown, got, tc.want)
			}
		})
	}
}

func TestConnRule(t *testing.T) {
	const want = "-A HEARTH-LIMITS -i hvabcdefghijklm -p tcp -m connlimit --connlimit-above 256 --connlimit-mask 32 --connlimit-saddr -j REJECT --reject-with tcp-reset"
	if got := network.ConnRule("HEARTH-LIMITS", "hvabcdefghijklm", 256); got != want {
		t.Errorf("connRule = %q, want %q", got, want)
	}
}

// A sandbox's connection cap goes through the same per-link replacement
// as its egress rules: a changed cap in before the old one out, copies
// and other links' rules handled alike.
func TestConnRuleChanges(t *testing.T) {
	const chain, link, other = "HEARTH-LIMITS", "hvaaaaaaaaaaaaa", "hvbbbbbbbbbbbbb"
	rule := func(l string, n int64) string { return network.ConnRule(chain, l, n) }
	del := func(r string) string { return "-D" + strings.TrimPrefix(r, "-A") }
	for _, tc := range []struct {
		name    string
		listing []string
		conns   int64
		lines   []string // the transaction's lines between *filter and COMMIT; nil for none
	}{
		{"new", []string{"-N " + chain}, 5, []string{rule(link, 5)}},
		{"no chain listed", nil, 5, []string{rule(link, 5)}},
		{"there already", []string{"-N " + chain, rule(other, 9), rule(link, 5)}, 5, nil},
		{"changed", []string{"-N " + chain, rule(link, 3), rule(other, 9)}, 5, []string{rule(link, 5), del(rule(link, 3))}},
		{"removed", []string{"-N " + chain, rule(other, 9), rule(link, 3)}, 0, []string{del(rule(link, 3))}},
		{"none to remove", []string{"-N " + chain, rule(other, 9)}, 0, nil},
		// The new rule is appended after the copies, and each -D takes the
		// first match: one copy of rule(link, 5) stays, the last.
		{"copies", []string{"-N " + chain, rule(link, 5), rule(link, 5), rule(link, 3)}, 5,
			[]string{rule(link, 5), del(rule(link, 5)), del(rule(link, 5)), del(rule(link, 3))}},
		{"another host's chain", []string{"-N " + chain, "-A HEARTHOCI-LIMITS -i " + link + " -p tcp"}, 5, []string{rule(link, 5)}},
		{"a longer name", []string{"-N " + chain, "-A " + chain + " -i " + link + "x -p tcp"}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			if tc.conns > 0 {
				want = []string{rule(link, tc.conns)}
			}
			got := network.LinkRulesRestore(tc.listing, chain, link, want)
			wantIn := ""
			if tc.lines != nil {
				wantIn = "*filter\n" + strings.Join(tc.lines, "\n") + "\nCOMMIT\n"
			}
			if got != wantIn {
				t.Errorf("linkRulesRestore(%q, conns %d):\n%s\nwant:\n%s", tc.listing, tc.conns, got, wantIn)
			}
		})
	}
}

// The ifb of a sandbox is named like everything of its Host's, never as
// any sandbox's veth.
func TestIFBName(t *testing.T) {
	for _, prefix := range []string{"hv", "hvx", "abcd"} {
		for _, id := range []string{"a", "abc123", strings.Repeat("z", 64)} {
			name := network.IFBName(prefix, id)
			if len(name) != 15 || !strings.HasPrefix(name, prefix+"0") {
				t.Errorf("ifbName(%s, %s) = %q, want 15 characters beginning with %s0", prefix, id, name, prefix)
			}
			if link := network.LinkName(prefix, id); name == link || strings.Contains(link[len(prefix):], "0") {
				t.Errorf("ifbName(%s, %s) = %q and linkName = %q: a veth's name may have no 0", prefix, id, name, link)
			}
			if again := network.IFBName(prefix, id); again != name {
				t.Errorf("ifbName(%s, %s) = %q then %q", prefix, id, name, again)
			}
		}
	}
	if a, b := network.IFBName("hv", "a"), network.IFBName("hv", "b"); a == b {
		t.Errorf("ifbName(hv, a) = ifbName(hv, b) = %q", a)
	}
}
