package network_test

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/hearth/hearth/network"
)

func TestPair(t *testing.T) {
	subnet := netip.MustParsePrefix("10.89.0.0/16")
	for _, tc := range []struct {
		subnet      netip.Prefix
		k           int
		gw, sandbox string
	}{
		{subnet, 1, "10.89.0.2", "10.89.0.3"},
		{subnet, 2, "10.89.0.4", "10.89.0.5"},
		{subnet, 128, "10.89.1.0", "10.89.1.1"},
		{subnet, 32766, "10.89.255.252", "10.89.255.253"},
		{netip.MustParsePrefix("10.89.7.7/16"), 1, "10.89.0.2", "10.89.0.3"}, // masked
		{netip.MustParsePrefix("192.0.2.8/29"), 2, "192.0.2.12", "192.0.2.13"},
	} {
		gw, sb := network.Pair(tc.subnet, tc.k)
		if gw.String() != tc.gw || sb.String() != tc.sandbox {
			t.Errorf("pair(%v, %d) = %v, %v; want %s, %s", tc.subnet, tc.k, gw, sb, tc.gw, tc.sandbox)
		}
		if k, ok := network.PairOf(tc.subnet, sb); !ok || k != tc.k {
			t.Errorf("pairOf(%v, %v) = %d, %v; want %d, true", tc.subnet, sb, k, ok, tc.k)
		}
	}
}

// Only the sandbox (odd) address of a usable pair of the subnet is a
// sandbox's: not a gateway, nor the pairs holding the subnet's network and
// broadcast addresses, nor anything outside.
func TestPairOfRefuses(t *testing.T) {
	subnet := netip.MustParsePrefix("10.89.0.0/16")
	for _, a := range []string{"10.89.0.2", "10.89.0.1", "10.89.0.0", "10.89.255.255", "10.89.255.254", "10.90.0.3", "198.51.100.1", "::ffff:10.89.0.3", "fd00::3"} {
		if k, ok := network.PairOf(subnet, netip.MustParseAddr(a)); ok {
			t.Errorf("pairOf(%v, %s) = %d, true; want false", subnet, a, k)
		}
	}
}

func TestAllocate(t *testing.T) {
	subnet := netip.MustParsePrefix("10.89.0.0/16")
	k, err := network.Allocate(subnet, "abc123", nil)
	if err != nil || k < 1 || k > 32766 {
		t.Fatalf("allocate(abc123) = %d, %v; want a pair in [1, 32766]", k, err)
	}
	if again, _ := network.Allocate(subnet, "abc123", nil); again != k {
		t.Errorf("allocate(abc123) again = %d, want the same %d", again, k)
	}
	// Taken: the next one.
	next, err := network.Allocate(subnet, "abc123", map[int]bool{k: true})
	if err != nil || next == k || next < 1 || next > 32766 {
		t.Errorf("allocate(abc123) with %d taken = %d, %v; want another pair", k, next, err)
	}
	// Ids spread: 200 ids, no pair taken twice when each takes its own.
	used := map[int]bool{}
	for i := range 200 {
		k, err := network.Allocate(subnet, "sb"+strconv.Itoa(i), used)
		if err != nil || used[k] {
			t.Fatalf("allocate(sb%d) = %d, %v; want a free pair", i, k, err)
		}
		used[k] = true
	}
	// A /29 has pairs 0 to 3, of which 1 and 2 are usable.
	small := netip.MustParsePrefix("192.0.2.8/29")
	used = map[int]bool{}
	for _, id := range []string{"a", "b"} {
		k, err := network.Allocate(small, id, used)
		if err != nil || k < 1 || k > 2 || used[k] {
			t.Fatalf("allocate(%v, %s) = %d, %v; want pair 1 or 2, free", small, id, k, err)
		}
		used[k] = true
	}
	if k, err := network.Allocate(small, "c", used); !errors.Is(err, network.ErrNoAddress) {
		t.Errorf("allocate(a full %v) = %d, %v; want ErrNoAddress", small, k, err)
	}
}

func TestLinkName(t *testing.T) {
	seen := map[string]string{}
	for _, prefix := range []string{"hv", "hvx", "abcd"} {
		for _, id := range []string{"a", "abc123", strings.Repeat("z", 64), "dt0123456789abcd"} {
			name := network.LinkName(prefix, id)
			if len(name) != 15 || !strings.HasPrefix(name, prefix) {
				t.Errorf("linkName(%s, %s) = %q, want 15 characters beginning with %s", prefix, id, name, prefix)
			}
			for _, c := range name {
				if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
					t.Errorf("linkName(%s, %s) = %q, want lowercase letters and digits", prefix, id, name)
				}
			}
			if other, ok := seen[name]; ok {
				t.Errorf("linkName(%s, %s) = %q, as for %s", prefix, id, name, other)
			}
			seen[name] = prefix + "/" + id
			if again := network.LinkName(prefix, id); again != name {
				t.Errorf("linkName(%s, %s) = %q then %q", prefix, id, name, again)
			}
		}
	}
}

func TestCheckID(t *testing.T) {
	for _, id := range []string{"a", "abc123", strings.Repeat("z", 64)} {
		if err := network.CheckID(id); err != nil {
			t.Errorf("checkID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "../etc", "Abc", "a-b", "a.tmp", strings.Repeat("z", 65)} {
		if err := network.CheckID(id); err == nil {
			t.Errorf("checkID(%q) = nil, want an error", id)
		}
	}
}

// New refuses options it cannot use, before it looks at the host.
func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts network.Options
	}{
		{"IPv6 subnet", network.Options{Subnet: netip.MustParsePrefix("fd00::/64")}},
		{"subnet too small", network.Options{Subnet: netip.MustParsePrefix("10.0.0.0/30")}},
		{"subnet too large", network.Options{Subnet: netip.MustParsePrefix("10.0.0.0/7")}},
		{"bad name", network.Options{Name: "Hearth"}},
		{"long name", network.Options{Name: "hearth" + strings.Repeat("h", 11)}},
		{"name not of hearth", network.Options{Name: "staging"}},
		{"name ending in a dash", network.Options{Name: "hearth-"}},
		{"name with two dashes", network.Options{Name: "hearth--x"}},
		{"name with an underscore", network.Options{Name: "hearth_x"}},
		{"public subnet", network.Options{Subnet: netip.MustParsePrefix("203.0.113.0/24")}},
		{"subnet across a private range", network.Options{Subnet: netip.MustParsePrefix("172.0.0.0/10")}},
		{"short prefix", network.Options{LinkPrefix: "h"}},
		{"long prefix", network.Options{LinkPrefix: "hearth"}},
		{"prefix with a digit", network.Options{LinkPrefix: "h1"}},
		{"IPv6 deny", network.Options{Deny: []netip.Prefix{netip.MustParsePrefix("fd00::/8")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := network.New(tc.opts); err == nil || errors.Is(err, network.ErrUnavailable) {
				t.Errorf("New(%+v) = %v, want an options error", tc.opts, err)
			}
		})
	}
}

// New takes names and subnets of instances beside the default one.
func TestNewNames(t *testing.T) {
	for _, opts := range []network.Options{
		{Name: "hearth"},
		{Name: "hearthnet"},
		{Name: "hearth-staging", Subnet: netip.MustParsePrefix("10.90.8.0/21")},
		{Name: "hearth-a1b2c3d4e", Subnet: netip.MustParsePrefix("192.168.77.0/24")},
		{Name: "hearth-x", Subnet: netip.MustParsePrefix("100.127.0.0/16"), LinkPrefix: "hxab"},
	} {
		if _, err := network.New(opts); err != nil && !errors.Is(err, network.ErrUnavailable) {
			t.Errorf("New(%+v) = %v, want nil", opts, err)
		}
	}
}
