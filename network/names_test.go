package network_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/hearth/hearth/network"
)

func TestPermits(t *testing.T) {
	allowOnly := network.Egress{AllowDomains: []string{"*.example.com", "api.example.org"}}
	denyOnly := network.Egress{DenyDomains: []string{"*.bad.example"}}
	both := network.Egress{AllowDomains: []string{"*.example.com"}, DenyDomains: []string{"secret.example.com"}}
	cidrOnly := network.Egress{Allow: prefixes("198.51.100.0/24")}
	for _, tc := range []struct {
		e    network.Egress
		name string
		want bool
	}{
		{network.Egress{}, "anything.example", true},
		{network.Egress{}, "", true},
		{allowOnly, "api.example.com", true},
		{allowOnly, "a.b.example.com", true},
		{allowOnly, "example.com", false},
		{allowOnly, "api.example.org", true},
		{allowOnly, "www.example.org", false},
		{allowOnly, "evilexample.com", false},
		{allowOnly, "", false},
		{denyOnly, "x.bad.example", false},
		{denyOnly, "bad.example", true},
		{denyOnly, "good.example", true},
		{denyOnly, "", true},
		{both, "www.example.com", true},
		{both, "secret.example.com", false},
		{cidrOnly, "anything.example", true},
	} {
		if got := network.Permits(tc.e, tc.name); got != tc.want {
			t.Errorf("%+v permits %q = %v, want %v", tc.e, tc.name, got, tc.want)
		}
	}
}

func TestParseRefusal(t *testing.T) {
	const prefix = "hearth-refused: "
	for _, tc := range []struct {
		record string
		link   string
		want   network.Refusal
		ok     bool
	}{
		{"4,39620,27127670634,-;hearth-refused: IN=hvabc OUT=eth0 MAC=7a:39 SRC=10.89.0.3 DST=198.51.100.9 LEN=60 TOS=0x00 PREC=0x00 TTL=63 ID=57582 DF PROTO=TCP SPT=46322 DPT=443 WINDOW=64240 RES=0x00 SYN URGP=0 \n SUBSYSTEM=x\n",
			"hvabc", network.Refusal{Dst: netip.MustParseAddr("198.51.100.9"), Proto: "TCP", Port: 443}, true},
		{"4,1,2,-;hearth-refused: IN=hvabc OUT= SRC=10.89.0.3 DST=10.89.0.2 LEN=84 PROTO=ICMP TYPE=8 CODE=0 ID=1 SEQ=1",
			"hvabc", network.Refusal{Dst: netip.MustParseAddr("10.89.0.2"), Proto: "ICMP"}, true},
		{"4,1,2,-;other-refused: IN=hvabc OUT= SRC=10.89.0.3 DST=10.89.0.2 PROTO=UDP DPT=53", "", network.Refusal{}, false},
		{"6,1,2,-;eth0: link up", "", network.Refusal{}, false},
		{"garbage", "", network.Refusal{}, false},
		{"4,1,2,-;hearth-refused: IN= OUT=eth0 DST=198.51.100.9 PROTO=TCP DPT=1", "", network.Refusal{}, false},
	} {
		link, got, ok := network.ParseRefusal(tc.record, prefix)
		if ok != tc.ok || link != tc.link || got != tc.want {
			t.Errorf("parseRefusal(%q) = %q, %+v, %v; want %q, %+v, %v", tc.record, link, got, ok, tc.link, tc.want, tc.ok)
		}
	}
}

// TestSetEntry: an entry written by setAddLine reads back as ipset save
// lists it; other lines do not parse.
func TestSetEntry(t *testing.T) {
	addr := netip.MustParseAddr("198.51.100.9")
	line := network.SetAddLine("hearth-allow", addr, "hvabc", "api.example.com", 24*time.Hour)
	if want := `add hearth-allow 198.51.100.9,hvabc timeout 86400 comment "api.example.com"`; line != want {
		t.Errorf("setAddLine = %q, want %q", line, want)
	}
	set, link, name, a, timeout, ok := network.ParseSetEntry(`add hearth-allow 198.51.100.9,hvabc timeout 3599 comment "api.example.com"` + "\n")
	if !ok || set != "hearth-allow" || link != "hvabc" || name != "api.example.com" || a != addr || timeout != 3599*time.Second {
		t.Errorf("parseSetEntry = %q %q %q %v %v %v", set, link, name, a, timeout, ok)
	}
	for _, bad := range []string{
		"create hearth-allow hash:net,iface family inet hashsize 1024 maxelem 262144 timeout 0 comment",
		`add hearth-allow 198.51.100.9,hvabc timeout 3599`,
		`add hearth-allow 198.51.100.9,hvabc timeout 3599 comment "not a name!"`,
		`add hearth-allow nonsense,hvabc timeout 3599 comment "a.example"`,
	} {
		if _, _, _, _, _, ok := network.ParseSetEntry(bad); ok {
			t.Errorf("parseSetEntry(%q) ok, want not", bad)
		}
	}
}
