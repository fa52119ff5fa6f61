package network

import (
	"slices"
	"testing"
)

func TestDefaultRouteInterfaces(t *testing.T) {
	table := []byte(`Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	010200C0	0003	0	0	0	00000000	0	0	0
eth0	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
wlan0	00000000	0101A8C0	0003	0	0	600	00000000	0	0	0
eth0	00000000	010200C0	0003	0	0	100	00000000	0	0	0
hv1	0100590A	00000000	0005	0	0	0	FFFFFFFF	0	0	0
`)
	if got := defaultRouteInterfaces(table); !slices.Equal(got, []string{"eth0", "wlan0"}) {
		t.Errorf("defaultRouteInterfaces = %q, want eth0 and wlan0 once each", got)
	}
	if got := defaultRouteInterfaces([]byte("Iface\tDestination\n")); len(got) != 0 {
		t.Errorf("no routes: %q", got)
	}
}

// On this host: every network returned is IPv4 and masked.
func TestUplinkNetworks(t *testing.T) {
	nets, err := UplinkNetworks()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range nets {
		if !p.Addr().Is4() || p != p.Masked() {
			t.Errorf("uplink network %v: want a masked IPv4 prefix", p)
		}
	}
	t.Logf("uplink networks: %v", nets)
}
