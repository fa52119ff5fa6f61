package drivertest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/network"
)

// NewTestDNS starts a name server of the test's own on 127.0.0.1, on UDP
// and TCP at one port, and returns where: the upstream a test gives a
// network host's DNS forwarder, so that no query ever leaves this machine.
// It answers an A query for a name of records ("testhost.hearth.test",
// any case, with or without the final dot) with its address, any other
// query of a known name with no record, and one of another name with
// NXDOMAIN. It looks nothing up and sends nothing but its answers. It stops
// in t's cleanup.
func NewTestDNS(t testing.TB, records map[string]netip.Addr) netip.AddrPort {
	t.Helper()
	known := map[string]netip.Addr{}
	for name, a := range records {
		known[canonicalName(name)] = a
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	pc, err := net.ListenPacket("udp4", addr.String())
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		pc.Close()
		wg.Wait()
	})
	wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := dnsAnswer(buf[:n], known); reply != nil {
				pc.WriteTo(reply, from)
			}
		}
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				r := bufio.NewReader(c)
				for {
					var n [2]byte
					if _, err := io.ReadFull(r, n[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(n[:]))
					if _, err := io.ReadFull(r, q); err != nil {
						return
					}
					reply := dnsAnswer(q, known)
					if reply == nil {
						return
					}
					c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...))
				}
			})
		}
	})
	t.Logf("test name server on %s (udp and tcp): %v", addr, records)
	return addr
}

// canonicalName is name in lower case with its final dot.
func canonicalName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, ".")) + "."
}

// DNS types and codes the test name server and its clients use.
const (
	dnsTypeA    = 1
	dnsClassIN  = 1
	dnsNXDomain = 3
)

// dnsAnswer is the test name server's answer to query q, or nil when q is
// not a query of one question.
func dnsAnswer(q []byte, known map[string]netip.Addr) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	name, end, err := readName(q, 12)
	if err != nil || end+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[end : end+2])
	question := q[12 : end+4]
	a, ok := known[canonicalName(name)]
	// QR, the query's opcode and RD, RA; NXDOMAIN for an unknown name.
	flags := uint16(0x8080) | uint16(q[2]&0x79)<<8
	if !ok {
		flags |= dnsNXDomain
	}
	var ancount uint16
	if ok && qtype == dnsTypeA {
		ancount = 1
	}
	reply := binary.BigEndian.AppendUint16(nil, binary.BigEndian.Uint16(q[0:2]))
	reply = binary.BigEndian.AppendUint16(reply, flags)
	reply = binary.BigEndian.AppendUint16(reply, 1)
	reply = binary.BigEndian.AppendUint16(reply, ancount)
	reply = append(reply, 0, 0, 0, 0)
	reply = append(reply, question...)
	if ancount == 1 {
		// The question's name (a pointer to offset 12), A, IN, a TTL of
		// 60 seconds, and the address.
		reply = append(reply, 0xc0, 12, 0, dnsTypeA, 0, dnsClassIN, 0, 0, 0, 60, 0, 4)
		b := a.As4()
		reply = append(reply, b[:]...)
	}
	return reply
}

// readName reads the domain name at off of msg, following compression
// pointers, and returns it dotted and the offset after it.
func readName(msg []byte, off int) (string, int, error) {
	var labels []string
	end := -1
	for hops := 0; ; hops++ {
		if off >= len(msg) || hops > 64 {
			return "", 0, errors.New("dns: bad name")
		}
		n := int(msg[off])
		switch {
		case n == 0:
			if end < 0 {
				end = off + 1
			}
			return strings.Join(labels, "."), end, nil
		case n&0xc0 == 0xc0:
			if off+1 >= len(msg) {
				return "", 0, errors.New("dns: bad pointer")
			}
			if end < 0 {
				end = off + 2
			}
			off = int(binary.BigEndian.Uint16(msg[off:off+2]) & 0x3fff)
		default:
			if off+1+n > len(msg) {
				return "", 0, errors.New("dns: bad label")
			}
			labels = append(labels, string(msg[off+1:off+1+n]))
			off += 1 + n
		}
	}
}

// DNSQuery returns a DNS query with id for the A records of name, with
// recursion desired.
func DNSQuery(id uint16, name string) []byte {
	q := binary.BigEndian.AppendUint16(nil, id)
	q = append(q, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0)
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	return append(q, 0, 0, dnsTypeA, 0, dnsClassIN)
}

// DNSReply is what ParseDNSReply reads of an answer.
type DNSReply struct {
	ID    uint16
	RCode int
	// A are the addresses of its A records.
	A []netip.Addr
}

// ParseDNSReply reads the ID, the response code and the A records of
// reply, a DNS answer.
func ParseDNSReply(reply []byte) (DNSReply, error) {
	if len(reply) < 12 || reply[2]&0x80 == 0 {
		return DNSReply{}, errors.New("dns: not an answer")
	}
	r := DNSReply{ID: binary.BigEndian.Uint16(reply[0:2]), RCode: int(reply[3] & 0x0f)}
	off := 12
	for range binary.BigEndian.Uint16(reply[4:6]) {
		_, end, err := readName(reply, off)
		if err != nil {
			return r, err
		}
		off = end + 4
	}
	for range binary.BigEndian.Uint16(reply[6:8]) {
		_, end, err := readName(reply, off)
		if err != nil || end+10 > len(reply) {
			return r, errors.New("dns: bad answer record")
		}
		typ, class := binary.BigEndian.Uint16(reply[end:end+2]), binary.BigEndian.Uint16(reply[end+2:end+4])
		rdlen := int(binary.BigEndian.Uint16(reply[end+8 : end+10]))
		data := end + 10
		if data+rdlen > len(reply) {
			return r, errors.New("dns: bad answer record")
		}
		if typ == dnsTypeA && class == dnsClassIN && rdlen == 4 {
			r.A = append(r.A, netip.AddrFrom4([4]byte(reply[data:data+4])))
		}
		off = data + rdlen
	}
	return r, nil
}

// ServeDNS runs h's DNS forwarder until t's cleanup, which wants it to
// return nil; it returns once the forwarder listens (a TCP connection from
// loopback tells: it is closed unanswered, loopback not being a sandbox).
func ServeDNS(t testing.TB, h *network.Host) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.ServeDNS(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeDNS() = %v", err)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(h.DNSPort()))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp4", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DNS forwarder does not listen on %s", addr)
		}
	}
}
