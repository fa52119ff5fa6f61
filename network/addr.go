package network

import (
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
)

// ErrNoAddress is returned by Attach when every address pair of the subnet
// is recorded for another sandbox.
var ErrNoAddress = errors.New("network: no free address left in the sandbox subnet")

// maxLinkName is the longest Linux interface name (IFNAMSIZ less the NUL).
const maxLinkName = 15

// checkSubnet refuses a subnet the addressing cannot use: IPv4 only, room
// for at least two sandboxes besides the pairs at both ends (see
// usablePairs), and inside a range every Host blocks (see
// Options.Subnet).
func checkSubnet(p netip.Prefix) error {
	if !p.IsValid() || !p.Addr().Is4() {
		return fmt.Errorf("network: subnet %v: want an IPv4 prefix", p)
	}
	if p.Bits() < 8 || p.Bits() > 29 {
		return fmt.Errorf("network: subnet %v: want a prefix length from 8 to 29", p)
	}
	for _, r := range subnetRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return nil
		}
	}
	return fmt.Errorf("network: subnet %v: want one inside %v, which every Host blocks", p, subnetRanges)
}

// subnetRanges are the always-blocked ranges a Host's subnet must lie in
// (see Options.Subnet).
var subnetRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

// pairCount is the number of /31 pairs in subnet.
func pairCount(subnet netip.Prefix) int { return 1 << (32 - subnet.Bits() - 1) }

// usablePairs is the range of pairs given to sandboxes, [1, pairCount-2]:
// the first pair holds the subnet's network address and the last its
// broadcast address, which some stacks refuse as a host's.
func usablePairs(subnet netip.Prefix) (first, last int) { return 1, pairCount(subnet) - 2 }

// pair returns the addresses of pair k of subnet: the gateway (the host side
// of the veth) at offset 2k and the sandbox at 2k+1.
func pair(subnet netip.Prefix, k int) (gateway, sandbox netip.Addr) {
	b := subnet.Masked().Addr().As4()
	base := binary.BigEndian.Uint32(b[:])
	return addr4(base + uint32(2*k)), addr4(base + uint32(2*k+1))
}

func addr4(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// pairOf returns the pair whose sandbox address is a, or false when a is
// not the sandbox address of a usable pair of subnet (a record made with
// another subnet, or damaged).
func pairOf(subnet netip.Prefix, a netip.Addr) (int, bool) {
	if !a.Is4() || !subnet.Contains(a) {
		return 0, false
	}
	b, m := a.As4(), subnet.Masked().Addr().As4()
	off := binary.BigEndian.Uint32(b[:]) - binary.BigEndian.Uint32(m[:])
	k := int(off / 2)
	first, last := usablePairs(subnet)
	if off%2 != 1 || k < first || k > last {
		return 0, false
	}
	return k, true
}

// allocate picks the pair for sandbox id: the one its id hashes to, or the
// next free one after it (wrapping), so that an id tends to get the same
// address and a freed address is seldom given out again soon (a remote's
// late packets of an old connection then find nobody). used holds the
// pairs recorded for other sandboxes. It returns ErrNoAddress when none is
// free.
func allocate(subnet netip.Prefix, id string, used map[int]bool) (int, error) {
	first, last := usablePairs(subnet)
	n := last - first + 1
	h := fnv.New32a()
	h.Write([]byte(id))
	start := int(h.Sum32() % uint32(n))
	for i := range n {
		k := first + (start+i)%n
		if !used[k] {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w (%v holds %d sandboxes)", ErrNoAddress, subnet, n)
}

// linkName is the host side of sandbox id's veth: prefix and a hash of the
// id, 15 characters in all.
func linkName(prefix, id string) string {
	h := fnv.New128a()
	h.Write([]byte(id))
	enc := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h.Sum(nil)))
	return prefix + enc[:maxLinkName-len(prefix)]
}

// checkID refuses an id that is not a sandbox id (lowercase letters and
// digits, 1 to 64): it names a file and a namespace.
func checkID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("network: sandbox id %q: want 1 to 64 characters", id)
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return fmt.Errorf("network: sandbox id %q: want lowercase letters and digits only", id)
		}
	}
	return nil
}
