package network_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/network"
)

func TestNameservers(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       []string
	}{
		{"empty", "", nil},
		{"one", "nameserver 10.255.255.53\n", []string{"10.255.255.53:53"}},
		{"several, in order, with the rest ignored", "# generated\nsearch example.com\nnameserver 1.1.1.1\noptions edns0\nnameserver 8.8.8.8\n", []string{"1.1.1.1:53", "8.8.8.8:53"}},
		{"IPv6 and a loopback stub", "nameserver 127.0.0.53\nnameserver 2001:db8::1\n", []string{"127.0.0.53:53", "[2001:db8::1]:53"}},
		{"comments, tabs, no final newline", "nameserver\t9.9.9.9 # quad9\n; nameserver 1.2.3.4\n#nameserver 5.6.7.8\nnameserver 149.112.112.112", []string{"9.9.9.9:53", "149.112.112.112:53"}},
		{"not an address", "nameserver dns.example.com\nnameserver\nnameservers 1.1.1.1\n", nil},
		{"CRLF", "nameserver 1.0.0.1\r\n", []string{"1.0.0.1:53"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, ap := range network.Nameservers([]byte(tc.conf)) {
				got = append(got, ap.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Nameservers(%q) = %q, want %q", tc.conf, got, tc.want)
			}
		})
	}
}

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"1.1.1.1", "1.1.1.1:53"},
		{"1.1.1.1:5353", "1.1.1.1:5353"},
		{"127.0.0.1:40000", "127.0.0.1:40000"},
		{"2001:db8::1", "[2001:db8::1]:53"},
		{"[2001:db8::1]:54", "[2001:db8::1]:54"},
		{"", ""},
		{"dns.example.com", ""},
		{"1.1.1.1:", ""},
		{"1.1.1.1:0", ""},
		{"1.1.1.1:70000", ""},
	} {
		got, err := network.ParseUpstream(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseUpstream(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("ParseUpstream(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// testAddr is what the tests' upstream answers for testName.
var (
	testDNSName = "testhost.hearth.test"
	testAddr    = netip.MustParseAddr("198.51.100.7")
)

// startForwarder runs a forwarder on loopback (UDP and TCP) for upstreams,
// serving the clients allow allows, with a timeout per upstream of
// timeout; it returns its addresses and stops it in t's cleanup, wanting
// it to return nil.
func startForwarder(t testing.TB, upstreams []netip.AddrPort, allow func(netip.Addr) bool, timeout time.Duration) (udp, tcp string) {
	return startForwarderWith(t, upstreams, allow, timeout, nil)
}

// startForwarderWith is startForwarder with a name policy.
func startForwarderWith(t testing.TB, upstreams []netip.AddrPort, allow func(netip.Addr) bool, timeout time.Duration, names *network.Names) (udp, tcp string) {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- network.ServeDNSOn(ctx, pc, ln, upstreams, allow, timeout, names) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the forwarder returned %v after its context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the forwarder did not return 10 s after its context ended")
		}
	})
	return pc.LocalAddr().String(), ln.Addr().String()
}

// askUDP sends a query for name with id to addr and returns the answer,
// or an error after wait.
func askUDP(t testing.TB, addr string, id uint16, name string, wait time.Duration) (drivertest.DNSReply, error) {
	t.Helper()
	c, err := net.Dial("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write(drivertest.DNSQuery(id, name)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return drivertest.DNSReply{}, err
	}
	return drivertest.ParseDNSReply(buf[:n])
}

// wantAnswer checks that r answers query id with testAddr.
func wantAnswer(t *testing.T, what string, r drivertest.DNSReply, err error, id uint16) {
	t.Helper()
	if err != nil || r.ID != id || r.RCode != 0 || !slices.Equal(r.A, []netip.Addr{testAddr}) {
		t.Errorf("%s: %+v, %v; want ID %d, NOERROR and A %s", what, r, err, id, testAddr)
	}
}

// TestForwarder, on loopback with a test upstream: a query over UDP is
// answered verbatim (an unknown name gets the upstream's NXDOMAIN); an
// upstream that answers nothing is passed over for the next; over TCP,
// two queries on one connection get their two answers.
func TestForwarder(t *testing.T) {
	upstream := drivertest.NewTestDNS(t, map[string]netip.Addr{testDNSName: testAddr})
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	// Nothing listens on TCP at the silent one's port: refused at once.
	silentAddr := netip.MustParseAddrPort(silent.LocalAddr().String())
	udp, tcp := startForwarder(t, []netip.AddrPort{silentAddr, upstream}, netip.Addr.IsLoopback, 500*time.Millisecond)

	began := time.Now()
	r, err := askUDP(t, udp, 4242, testDNSName, 5*time.Second)
	wantAnswer(t, "udp query, first upstream silent", r, err, 4242)
	if took := time.Since(began); took < 400*time.Millisecond {
		t.Errorf("the answer came after %v, want the silent upstream's timeout first", took)
	}
	if r, err := askUDP(t, udp, 7, "nowhere.hearth.test", 5*time.Second); err != nil || r.ID != 7 || r.RCode != 3 {
		t.Errorf("udp query of an unknown name: %+v, %v; want ID 7, NXDOMAIN", r, err)
	}

	c, err := net.Dial("tcp4", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var both []byte
	for _, id := range []uint16{1, 2} {
		q := drivertest.DNSQuery(id, testDNSName)
		both = append(both, binary.BigEndian.AppendUint16(nil, uint16(len(q)))...)
		both = append(both, q...)
	}
	// Both at once: the forwarder reads them one by one.
	if _, err := c.Write(both); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint16{1, 2} {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			t.Fatalf("tcp answer %d: %v", id, err)
		}
		msg := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			t.Fatalf("tcp answer %d: %v", id, err)
		}
		r, err := drivertest.ParseDNSReply(msg)
		wantAnswer(t, "tcp query on a shared connection", r, err, id)
	}
}

// TestForwarderRefuses: a client outside the sandbox subnet (here
// 127.0.0.1) gets no answer over UDP, and its TCP connection is closed
// unanswered.
func TestForwarderRefuses(t *testing.T) {
	upstream := drivertest.NewTestDNS(t, map[string]netip.Addr{testDNSName: testAddr})
	udp, tcp := startForwarder(t, []netip.AddrPort{upstream}, netip.MustParsePrefix("10.89.0.0/16").Contains, time.Second)
	var ne net.Error
	if r, err := askUDP(t, udp, 9, testDNSName, time.Second); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("udp query from 127.0.0.1 = %+v, %v; want no answer (a timeout)", r, err)
	}
	c, err := net.Dial("tcp4", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	q := drivertest.DNSQuery(10, testDNSName)
	c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...))
	if n, err := c.Read(make([]byte, 512)); n != 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("tcp query from 127.0.0.1: read %d bytes, %v; want the connection closed unanswered", n, err)
	}
}

// TestForwarderPolicy: with a name policy, a name it does not permit gets
// REFUSED over UDP and TCP without the upstream being asked; a permitted
// one the upstream's answer, whose addresses the policy has learned
// before the answer arrives; a name the policy answers locally gets that
// address (A) or no record (another type), the upstream not asked.
func TestForwarderPolicy(t *testing.T) {
	upstream := drivertest.NewTestDNS(t, map[string]netip.Addr{testDNSName: testAddr, "denied.hearth.test": testAddr})
	gateway := netip.MustParseAddr("10.89.0.2")
	var mu sync.Mutex
	var asked, learned []string
	names := &network.Names{
		Permit: func(client netip.Addr, name string) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, name)
			return name != "denied.hearth.test"
		},
		Learn: func(client netip.Addr, name string, addrs []netip.Addr) {
			mu.Lock()
			defer mu.Unlock()
			learned = append(learned, fmt.Sprint(client, " ", name, " ", addrs))
		},
		Local: func(client netip.Addr, name string) (netip.Addr, bool) {
			return gateway, name == "gw.hearth.internal"
		},
	}
	udp, tcp := startForwarderWith(t, []netip.AddrPort{upstream}, netip.Addr.IsLoopback, time.Second, names)

	r, err := askUDP(t, udp, 1, "Denied.Hearth.Test.", 5*time.Second)
	if err != nil || r.ID != 1 || r.RCode != 5 || len(r.A) != 0 {
		t.Errorf("udp query of a denied name: %+v, %v; want ID 1, REFUSED (5), no answer", r, err)
	}
	if r, err := askTCP(t, tcp, 2, "denied.hearth.test"); err != nil || r.ID != 2 || r.RCode != 5 {
		t.Errorf("tcp query of a denied name: %+v, %v; want ID 2, REFUSED", r, err)
	}
	mu.Lock()
	if len(learned) != 0 {
		t.Errorf("learned %q after refused queries, want nothing", learned)
	}
	mu.Unlock()

	r, err = askUDP(t, udp, 3, testDNSName, 5*time.Second)
	wantAnswer(t, "udp query of a permitted name", r, err, 3)
	r, err = askTCP(t, tcp, 4, testDNSName)
	wantAnswer(t, "tcp query of a permitted name", r, err, 4)
	mu.Lock()
	wantLearned := []string{"127.0.0.1 " + testDNSName + " [" + testAddr.String() + "]", "127.0.0.1 " + testDNSName + " [" + testAddr.String() + "]"}
	if !slices.Equal(learned, wantLearned) {
		t.Errorf("learned %q, want %q", learned, wantLearned)
	}
	mu.Unlock()

	r, err = askUDP(t, udp, 5, "gw.hearth.internal", 5*time.Second)
	if err != nil || r.ID != 5 || r.RCode != 0 || !slices.Equal(r.A, []netip.Addr{gateway}) {
		t.Errorf("query of a local name: %+v, %v; want ID 5, NOERROR, A %s", r, err, gateway)
	}
	mu.Lock()
	wantAsked := []string{"denied.hearth.test", "denied.hearth.test", testDNSName, testDNSName}
	if !slices.Equal(asked, wantAsked) {
		t.Errorf("the policy was asked about %q, want %q (a local name is not asked)", asked, wantAsked)
	}
	mu.Unlock()
}

// askTCP sends a query for name with id to addr over TCP and returns the
// answer.
func askTCP(t *testing.T, addr string, id uint16, name string) (drivertest.DNSReply, error) {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	q := drivertest.DNSQuery(id, name)
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
		return drivertest.DNSReply{}, err
	}
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return drivertest.DNSReply{}, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(c, msg); err != nil {
		return drivertest.DNSReply{}, err
	}
	return drivertest.ParseDNSReply(msg)
}
