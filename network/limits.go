package network

import (
	"context"
	"fmt"
	"strings"
)

// Limits cap what one sandbox takes of the host's network, so that it
// cannot saturate the uplink nor fill the host's connection tracking; a
// zero field is no cap. See the package doc for how they are enforced.
type Limits struct {
	// BitsPerSec caps the sandbox's traffic each way, in bits per second
	// of what its veth carries (IP packets with their Ethernet headers).
	BitsPerSec int64
	// Conns caps the TCP connections the sandbox may have open at once;
	// one more is refused with a TCP reset.
	Conns int64
}

func (l Limits) check() error {
	if l.BitsPerSec < 0 || l.Conns < 0 {
		return fmt.Errorf("network: limits %+v: want no negative cap", l)
	}
	return nil
}

// shapeLatency bounds how long a packet waits in a shaper's queue before
// it is dropped: long enough for TCP to keep the link busy, short enough
// that the queue never holds seconds of traffic (bufferbloat).
const shapeLatency = "50ms"

// minBurst is the smallest bucket of a shaper, in bytes: one full GSO
// packet (64 KiB), which the kernel would otherwise have to cut up.
const minBurst = 64 << 10

// burstBytes is the bucket of a shaper at bitsPerSec: 10 ms of traffic at
// that rate, at least minBurst. A bucket much smaller than what the rate
// moves between two timer ticks would keep the shaper below its rate.
func burstBytes(bitsPerSec int64) int64 { return max(bitsPerSec/8/100, minBurst) }

// tbfLine is the tc batch line that makes a token bucket of bitsPerSec
// the root qdisc of dev, in place of whatever was there.
func tbfLine(dev string, bitsPerSec int64) string {
	return fmt.Sprintf("qdisc replace dev %s root tbf rate %dbit burst %d latency %s", dev, bitsPerSec, burstBytes(bitsPerSec), shapeLatency)
}

// ifbHandle is the handle of the filter that sends link's ingress to its
// ifb: a fixed one, so that a second Attach replaces it instead of adding
// another.
const ifbHandle = "800::800"

// shapeLines returns the tc batch that caps the traffic of the sandbox
// whose host-side veth is link at bitsPerSec each way. Toward the sandbox
// the packets leave link: a token bucket as its root qdisc. From the
// sandbox they enter link, where a qdisc can only police (drop, which TCP
// takes badly, and only with act_police), so its ingress redirects every
// packet to ifb, an ifb device, whose root is a token bucket too; the ifb
// hands them back to link's ingress path as they leave the bucket. Every
// line replaces what it finds, so that the batch is idempotent.
func shapeLines(link, ifb string, bitsPerSec int64) []string {
	return []string{
		tbfLine(link, bitsPerSec),
		tbfLine(ifb, bitsPerSec),
		"qdisc replace dev " + link + " ingress",
		"filter replace dev " + link + " parent ffff: protocol all prio 1 handle " + ifbHandle + " u32 match u32 0 0 action mirred egress redirect dev " + ifb,
	}
}

// unshapeLines reads qdiscs, the output of `tc qdisc show dev <link>`, and
// returns the tc batch that removes what shapeLines put on link: its token
// bucket root (link then gets its default qdisc back) and its ingress
// qdisc, with the filter in it. The ifb goes with its device.
func unshapeLines(link, qdiscs string) []string {
	var out []string
	for line := range strings.Lines(qdiscs) {
		// "qdisc tbf 8001: root refcnt 2 rate ...", "qdisc ingress ffff: parent ffff:fff1 ..."
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[0] == "qdisc" && f[1] == "tbf" && f[3] == "root":
			out = append(out, "qdisc del dev "+link+" root")
		case len(f) >= 2 && f[0] == "qdisc" && f[1] == "ingress":
			out = append(out, "qdisc del dev "+link+" ingress")
		}
	}
	return out
}

// connRule is the rule of the limits chain that refuses a new TCP
// connection out of link once its sandbox has conns open, as iptables -S
// prints it. connlimit counts the connections conntrack holds for the
// packet's source address (a /32: the sandbox's own, the only one its
// veth lets through), whatever their destination, and leaves out those
// that are closing (TIME_WAIT, CLOSE). The limits chain is only jumped to
// for a SYN, so the rule needs no flags of its own; -p tcp is there for
// the TCP reset, which a connect then reports at once as refused.
func connRule(chain, link string, conns int64) string {
	return fmt.Sprintf("-A %s -i %s -p tcp -m connlimit --connlimit-above %d --connlimit-mask 32 --connlimit-saddr -j REJECT --reject-with tcp-reset", chain, link, conns)
}

// ifbName is the ifb device that shapes sandbox id's traffic from it: the
// link prefix, a 0 and the hash of linkName, 15 characters in all. The
// base32 of the hash has no 0, so it is never a veth's name; it begins
// with the prefix all the same, like everything of the Host's on the
// host (its packets never pass the firewall as its own: the ifb hands
// them back to the veth, whose name they carry).
func ifbName(prefix, id string) string {
	return prefix + "0" + linkName(prefix, id)[len(prefix):maxLinkName-1]
}

// IFB returns the name of the ifb device that shapes sandbox id's traffic
// from it, while it has a BitsPerSec cap.
func (h *Host) IFB(id string) string { return ifbName(h.linkPrefix, id) }

// limiter applies Limits to attached sandboxes: a shaper on each one's
// veth and ifb, and its rule in the limits chain (recorded with its
// policy, for Repair).
type limiter struct {
	linkPrefix string
	chains     chains
	cmd        *commands
	nets       *sandboxNets
}

// limit applies lim to sandbox id, replacing the limits it had: its
// shapers and its connection rule.
func (l *limiter) limit(ctx context.Context, id string, lim Limits) error {
	if err := l.shape(ctx, id, lim.BitsPerSec); err != nil {
		return err
	}
	return l.capConns(ctx, id, lim.Conns)
}

// shape caps sandbox id's traffic at bitsPerSec each way (see shapeLines),
// or removes the cap when it is 0.
func (l *limiter) shape(ctx context.Context, id string, bitsPerSec int64) error {
	link, ifb := linkName(l.linkPrefix, id), ifbName(l.linkPrefix, id)
	hasIFB, err := linkExists(ifb)
	if err != nil {
		return err
	}
	if bitsPerSec > 0 {
		if !hasIFB {
			if _, err := l.cmd.ip(ctx, "link", "add", ifb, "type", "ifb"); err != nil {
				return err
			}
		}
		// Nothing but the sandbox's IPv4 passes it: no address of its own.
		if err := disableIPv6(ifb); err != nil {
			return err
		}
		if _, err := l.cmd.ip(ctx, "link", "set", ifb, "up"); err != nil {
			return err
		}
		return l.cmd.tcBatch(ctx, shapeLines(link, ifb, bitsPerSec))
	}
	qdiscs, err := l.cmd.tc(ctx, "qdisc", "show", "dev", link)
	if err != nil {
		return err
	}
	if lines := unshapeLines(link, string(qdiscs)); len(lines) > 0 {
		if err := l.cmd.tcBatch(ctx, lines); err != nil {
			return err
		}
	}
	if hasIFB {
		if _, err := l.cmd.ip(ctx, "link", "del", ifb); err != nil {
			return err
		}
	}
	return nil
}

// capConns makes the limits chain hold one rule for sandbox id that caps
// its TCP connections at conns, or none when conns is 0. A changed rule
// goes in before the old one comes out, in one transaction (see
// setLinkRules), so that the sandbox is never without a cap it had.
func (l *limiter) capConns(ctx context.Context, id string, conns int64) error {
	if r := l.nets.readPolicy(id); conns > 0 || r.Conns != 0 {
		r.Conns = conns
		if err := l.nets.writePolicy(id, r); err != nil {
			return err
		}
	}
	_, err := l.cmd.setLinkRules(ctx, l.chains.limits, linkName(l.linkPrefix, id), l.connRules(id, conns))
	return err
}

// connRules are the rules of the limits chain for sandbox id with a cap
// of conns (none for 0).
func (l *limiter) connRules(id string, conns int64) []string {
	if conns <= 0 {
		return nil
	}
	return []string{connRule(l.chains.limits, linkName(l.linkPrefix, id), conns)}
}
