package network

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// DefaultDNSPort is where the Host's forwarder listens when
// Options.DNSPort is zero.
const DefaultDNSPort = 10053

// ErrNoDNS is returned by ServeDNS when the Host has no upstream name
// servers (Options.DNSUpstreams): it would have nothing to forward to, and
// a forwarder that answers nothing is worse than none.
var ErrNoDNS = errors.New("network: no upstream name servers configured: sandboxes get no name service")

// Bounds of the forwarder: DNS messages are at most 65535 bytes over UDP
// and TCP alike (RFC 1035's two-byte TCP length), and at least a header.
const (
	dnsHeaderLen  = 12
	maxDNSMessage = 65535
	// dnsMaxQueries caps the UDP queries in flight; one more is dropped,
	// and its client asks again.
	dnsMaxQueries = 256
	// dnsMaxConns caps the TCP connections open at once; one more is
	// closed.
	dnsMaxConns = 64
	// dnsTimeout bounds each exchange with an upstream.
	dnsTimeout = 3 * time.Second
	// dnsIdle closes a TCP connection that sends no query for that long.
	dnsIdle = 10 * time.Second
)

// ServesDNS reports whether the Host gives sandboxes a name service: it
// has upstreams (Options.DNSUpstreams), so Setup installs the rules that
// redirect their queries to the forwarder, and the driver points their
// resolv.conf at their gateway.
func (h *Host) ServesDNS() bool { return len(h.dnsUpstreams) > 0 }

// DNSPort returns the port the forwarder listens on (see ServeDNS).
func (h *Host) DNSPort() int { return h.dnsPort }

// ServeDNS runs the Host's DNS forwarder until ctx ends: on UDP and TCP at
// 0.0.0.0:DNSPort, where Setup's rules redirect every query a sandbox
// sends to port 53 of any address (see the package doc). It answers only
// clients in the sandbox subnet, dropping any other, and forwards each
// query verbatim to the upstreams, in order, sending the first answer back
// verbatim: over UDP with a fresh socket per query, each upstream given 3
// seconds; over TCP (several queries on one connection, closed after 10
// idle seconds) on a TCP connection to the upstream. At most 256 UDP
// queries and 64 TCP connections are served at once; more are dropped.
//
// It returns ErrNoDNS at once when the Host has no upstreams, the error
// of listening when it cannot (the port is taken), and nil once ctx has
// ended and every query in flight is done. The daemon runs it in a
// goroutine of its own: nothing it does blocks anything else.
func (h *Host) ServeDNS(ctx context.Context) error {
	if !h.ServesDNS() {
		return ErrNoDNS
	}
	l, err := ListenDNS(ctx, h.dnsPort)
	if err != nil {
		return err
	}
	return h.ServeDNSOn(ctx, l)
}

// ServeDNSOn is ServeDNS on l, which must listen at the Host's DNS port
// (Options.DNSPort, where the rules redirect sandboxes' queries): a daemon
// that lets ListenDNS pick a free port listens before it makes the Host.
// It closes l when it returns.
func (h *Host) ServeDNSOn(ctx context.Context, l *DNSListener) error {
	if !h.ServesDNS() {
		l.Close()
		return ErrNoDNS
	}
	if l.Port() != h.dnsPort {
		l.Close()
		return fmt.Errorf("network: dns: listening at port %d, not at the Host's DNS port %d", l.Port(), h.dnsPort)
	}
	h.log.Info("dns forwarder listening", "addr", l.tcp.Addr(), "upstreams", h.dnsUpstreams)
	f := &forwarder{upstreams: h.dnsUpstreams, allow: h.subnet.Contains, names: h.nets, timeout: dnsTimeout, log: h.log}
	return f.serve(ctx, l.udp, l.tcp)
}

// DNSListener is where a forwarder listens: a UDP socket and a TCP
// listener at one port of every IPv4 address of the host.
type DNSListener struct {
	udp *net.UDPConn
	tcp net.Listener
}

// ListenDNS listens for a forwarder on UDP and TCP at port of every IPv4
// address, or, with port 0, at a port it picks that is free for both (a
// daemon's instance other than the default one takes one so: see
// Options.DNSPort). The error is that of listening (the port is taken).
func ListenDNS(ctx context.Context, port int) (*DNSListener, error) {
	var lc net.ListenConfig
	for try := 0; ; try++ {
		ln, err := lc.Listen(ctx, "tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("network: dns: %w", err)
		}
		addr := net.JoinHostPort("0.0.0.0", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
		pc, err := lc.ListenPacket(ctx, "udp4", addr)
		if err == nil {
			return &DNSListener{udp: pc.(*net.UDPConn), tcp: ln}, nil
		}
		ln.Close()
		// A port free for TCP may be taken for UDP: pick another.
		if port != 0 || try == 20 {
			return nil, fmt.Errorf("network: dns: %w", err)
		}
	}
}

// Port returns the port l listens at.
func (l *DNSListener) Port() int { return l.tcp.Addr().(*net.TCPAddr).Port }

// Close closes both sockets.
func (l *DNSListener) Close() error { return errors.Join(l.udp.Close(), l.tcp.Close()) }

// forwarder forwards DNS queries of the clients it allows to upstreams.
type forwarder struct {
	upstreams []netip.AddrPort
	// allow says which client addresses are served: the sandbox subnet.
	allow func(netip.Addr) bool
	// names judges each query by its client's policy; nil forwards every
	// query.
	names   namePolicy
	timeout time.Duration
	log     *slog.Logger
}

// namePolicy is what a forwarder asks about the queries of its clients
// (the Host: the sandboxes' egress policies).
type namePolicy interface {
	// permit reports whether client may resolve name (normalized, see
	// sandbox.DomainName; "" for a query whose name is not a domain
	// name).
	permit(client netip.Addr, name string) bool
	// learn records that name resolved to addrs for client; the answer
	// goes back once it returns.
	learn(ctx context.Context, client netip.Addr, name string, addrs []netip.Addr)
	// local returns the address to answer name with for client without
	// asking the upstreams, if there is one.
	local(client netip.Addr, name string) (netip.Addr, bool)
}

// answer returns the reply to query q of client, nil for none: REFUSED
// for a name the client may not resolve, the local answer for one the
// policy answers itself, or else the upstreams' reply (exchange), whose
// addresses the policy learns before it goes back.
func (f *forwarder) answer(ctx context.Context, client netip.Addr, q []byte, exchange func(context.Context, []byte) []byte) []byte {
	if f.names == nil {
		return exchange(ctx, q)
	}
	hdr, question, err := parseQuery(q)
	if err != nil {
		if !f.names.permit(client, "") {
			return refusedHeader(q)
		}
		return exchange(ctx, q)
	}
	name, _ := sandbox.DomainName(question.Name.String())
	if a, ok := f.names.local(client, name); ok {
		return localAnswer(hdr, question, a)
	}
	if !f.names.permit(client, name) {
		return refused(hdr, question)
	}
	reply := exchange(ctx, q)
	if addrs := answerAddrs(reply); len(addrs) > 0 && name != "" {
		f.names.learn(ctx, client, name, addrs)
	}
	return reply
}

// serve serves queries on pc and ln until ctx ends, then closes them and
// waits for the queries in flight.
func (f *forwarder) serve(ctx context.Context, pc *net.UDPConn, ln net.Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() {
		pc.Close()
		ln.Close()
	})
	defer stop()
	errc := make(chan error, 2)
	wg.Go(func() { errc <- f.serveUDP(ctx, pc, &wg) })
	wg.Go(func() { errc <- f.serveTCP(ctx, ln, &wg) })
	err := <-errc
	if ctx.Err() == nil {
		// One listener failed: stop the other too.
		pc.Close()
		ln.Close()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("network: dns: %w", err)
}

// serveUDP reads queries from pc and answers each in a goroutine of its
// own, at most dnsMaxQueries at once.
func (f *forwarder) serveUDP(ctx context.Context, pc *net.UDPConn, wg *sync.WaitGroup) error {
	slots := make(chan struct{}, dnsMaxQueries)
	buf := make([]byte, maxDNSMessage)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if n < dnsHeaderLen || !f.allow(from.Addr().Unmap()) {
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			f.log.Debug("dns: too many queries in flight; dropping one", "client", from)
			continue
		}
		q := bytes.Clone(buf[:n])
		wg.Go(func() {
			defer func() { <-slots }()
			if reply := f.answer(ctx, from.Addr().Unmap(), q, f.exchangeUDP); reply != nil {
				pc.WriteToUDPAddrPort(reply, from)
			}
		})
	}
}

// exchangeUDP sends q to each upstream in turn, on a socket of its own,
// and returns the first reply to it (nil when none answers).
func (f *forwarder) exchangeUDP(ctx context.Context, q []byte) []byte {
	for _, u := range f.upstreams {
		if ctx.Err() != nil {
			return nil
		}
		reply, err := f.askUDP(ctx, u, q)
		if err == nil {
			return reply
		}
		f.log.Debug("dns: upstream did not answer over udp", "upstream", u, "err", err)
	}
	return nil
}

// askUDP sends q to upstream u and reads replies until one answers it (its
// ID is q's) or the timeout.
func (f *forwarder) askUDP(ctx context.Context, u netip.AddrPort, q []byte) ([]byte, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(u))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	c.SetDeadline(time.Now().Add(f.timeout))
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, maxDNSMessage)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= dnsHeaderLen && buf[0] == q[0] && buf[1] == q[1] {
			return bytes.Clone(buf[:n]), nil
		}
	}
}

// serveTCP accepts connections on ln, at most dnsMaxConns at once, and
// serves each in a goroutine of its own.
func (f *forwarder) serveTCP(ctx context.Context, ln net.Listener, wg *sync.WaitGroup) error {
	slots := make(chan struct{}, dnsMaxConns)
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		from, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		if !f.allow(from.Addr().Unmap()) {
			c.Close()
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			f.log.Debug("dns: too many tcp connections; closing one", "client", from)
			c.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			f.serveConn(ctx, c, from.Addr().Unmap())
		})
	}
}

// serveConn answers the queries of one TCP connection, each framed by its
// two-byte length (RFC 1035 4.2.2), one after another, until the client
// closes it, sends nothing for dnsIdle, or no upstream answers.
func (f *forwarder) serveConn(ctx context.Context, c net.Conn, client netip.Addr) {
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	r := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(dnsIdle))
		q, err := readFrame(r)
		if err != nil || len(q) < dnsHeaderLen {
			return
		}
		reply := f.answer(ctx, client, q, f.exchangeTCP)
		if reply == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(f.timeout))
		if _, err := c.Write(frame(reply)); err != nil {
			return
		}
	}
}

// exchangeTCP sends q to each upstream in turn over TCP and returns the
// first answer (nil when none answers).
func (f *forwarder) exchangeTCP(ctx context.Context, q []byte) []byte {
	for _, u := range f.upstreams {
		if ctx.Err() != nil {
			return nil
		}
		reply, err := f.askTCP(ctx, u, q)
		if err == nil && len(reply) >= dnsHeaderLen {
			return reply
		}
		f.log.Debug("dns: upstream did not answer over tcp", "upstream", u, "err", err)
	}
	return nil
}

// askTCP sends q to upstream u on a TCP connection of its own and reads
// the answer.
func (f *forwarder) askTCP(ctx context.Context, u netip.AddrPort, q []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	if _, err := c.Write(frame(q)); err != nil {
		return nil, err
	}
	return readFrame(bufio.NewReader(c))
}

// frame prefixes msg with its two-byte length.
func frame(msg []byte) []byte {
	// len(msg) ≤ 65535: every message was read with a bound that keeps it so.
	return append(binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(msg)), uint16(len(msg))), msg...)
}

// readFrame reads one message framed by its two-byte length.
func readFrame(r io.Reader) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// Nameservers returns the name servers a resolv.conf lists (its
// "nameserver" lines, in order), each at port 53. Lines it does not
// understand, and addresses that do not parse, are skipped, as the C
// library skips them.
func Nameservers(resolvConf []byte) []netip.AddrPort {
	var out []netip.AddrPort
	for line := range strings.Lines(string(resolvConf)) {
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
	}
	return out
}

// ParseUpstream parses a name server given as ADDR or ADDR:PORT (an IPv6
// address with a port in brackets, [ADDR]:PORT); the port defaults to 53.
func ParseUpstream(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a.Unmap(), 53), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("network: name server %q: want ADDR or ADDR:PORT, with an IP address", s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
