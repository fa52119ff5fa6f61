package network_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/network"
)

// BenchmarkLookupPolicy measures what a sandbox's domain policy adds to
// one of its lookups, in the forwarder, next to a whole lookup through a
// forwarder without policy to a name server on the loopback (the
// baseline): the verdict on the name (permit), and recording the answer's
// address in the allow set before the answer goes back (learn) for a name
// and address not recorded in the last hour (an ipset process) and for
// one that was (nothing to write).
func BenchmarkLookupPolicy(b *testing.B) {
	upstream := drivertest.NewTestDNS(b, map[string]netip.Addr{testDNSName: testAddr})
	udp, _ := startForwarder(b, []netip.AddrPort{upstream}, netip.Addr.IsLoopback, time.Second)
	b.Run("lookup-baseline", func(b *testing.B) {
		for b.Loop() {
			if r, err := askUDP(b, udp, 1, testDNSName, 5*time.Second); err != nil || len(r.A) != 1 {
				b.Fatalf("lookup: %+v, %v", r, err)
			}
		}
	})
	h, _ := newHost(b)
	a, err := h.Attach(b.Context(), "bench", network.Limits{}, network.Egress{AllowDomains: []string{"*.example.com"}, DenyDomains: []string{"ads.example.com"}})
	if err != nil {
		b.Fatal(err)
	}
	addr := []netip.Addr{netip.MustParseAddr("198.51.100.70")}
	b.Run("permit", func(b *testing.B) {
		for b.Loop() {
			if !network.HostPermits(h, a.Addr, "api.example.com") {
				b.Fatal("api.example.com refused")
			}
		}
	})
	b.Run("learn-new", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			network.HostLearn(h, b.Context(), a.Addr, fmt.Sprintf("n%d.example.com", i), addr)
		}
	})
	b.Run("learn-known", func(b *testing.B) {
		network.HostLearn(h, b.Context(), a.Addr, "api.example.com", addr)
		for b.Loop() {
			network.HostLearn(h, b.Context(), a.Addr, "api.example.com", addr)
		}
	})
}
