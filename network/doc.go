// Package network is the host side of sandbox networking: a network
// namespace per sandbox, wired to the host by a veth pair, and the host's
// firewall rules that decide where a sandbox's packets may go.
//
// A sandbox in the egress mode may open connections to the internet and
// nowhere else. Sandboxes run untrusted code, so everything that would let
// that code reach past the internet into what the host can reach is
// blocked:
//
//   - The host itself, at every one of its addresses (the sandbox's gateway
//     included): every packet from a sandbox to the host is rejected in
//     INPUT, so that no service of the host (the daemon's API, a database
//     bound to 0.0.0.0, sshd) answers a sandbox.
//   - Private, shared, loopback, link-local, multicast and reserved
//     destinations: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (the host's
//     LAN and the cloud's VPC), 100.64.0.0/10 (carrier-grade NAT, and some
//     clouds' internal services), 169.254.0.0/16 (link-local: the cloud
//     metadata service at 169.254.169.254, which hands out credentials),
//     127.0.0.0/8, 0.0.0.0/8, 224.0.0.0/4 and 240.0.0.0/4, and the
//     sandboxes' own subnet (another sandbox), plus Options.Deny. Those
//     packets are rejected in FORWARD.
//   - Anything that connects in: only packets of connections a sandbox
//     opened (conntrack's RELATED and ESTABLISHED) are forwarded to a
//     sandbox, so nothing outside, not even another sandbox, reaches a
//     server in one. Nor does the host itself: its packets to a sandbox
//     leave (OUTPUT is not filtered) but the answers are INPUT from a
//     sandbox, rejected like any other. The daemon reaches a sandbox
//     through its agent's unix socket, never over this network.
//   - Forged sources: a packet from a sandbox whose source is not in the
//     subnet is dropped (and strict reverse-path filtering on the host side
//     of each veth drops one that is in the subnet but not the sandbox's).
//   - IPv6: a sandbox gets none. It is disabled in the sandbox's namespace
//     and on the host side of its veth, so there is nothing to route and
//     no link-local path to the host.
//
// What is left, a public destination, is forwarded and masqueraded behind
// the host's address on its way out of any interface that is not a
// sandbox's.
//
// The rules live in chains of their own, <NAME>-INPUT and <NAME>-FORWARD in
// the filter table and <NAME>-POSTROUTING and <NAME>-PREROUTING in the nat
// table, jumped to from the top of INPUT, FORWARD, POSTROUTING and
// PREROUTING (above every rule but other Hosts' jumps, see Instances
// below; and <NAME>-EGRESS and <NAME>-LIMITS, for the per-sandbox
// rules and the limits below; <NAME>-PREROUTING, for the name service
// below, is empty without one). Setup rewrites them
// whole in one iptables-restore transaction, so that a daemon restart
// neither duplicates them nor leaves a moment without them. They match
// sandboxes by the name of the host side of their veth, which begins with
// Options.LinkPrefix ("hv"), so no other interface of the host may begin
// with it. Refusals are REJECTs (ICMP port unreachable), so that a
// sandbox's connection fails at once as refused instead of hanging until
// its timeout. Setup also turns IPv4 forwarding on for the whole host (the
// kernel has no per-interface switch that lets replies in): on a host whose
// FORWARD policy is ACCEPT, that also forwards between the host's other
// interfaces, so a host that must not route sets that policy to DROP, as
// Docker does. Whatever flushes the host's firewall (a firewall service
// reloading) takes the rules with it, and would leave sandboxes routed
// wherever the host routes: Repair (which the daemon's Guard runs every 10
// seconds) finds a hook missing or moved down, or the forward chain or a
// set incomplete, and runs Setup again and puts back every attached
// sandbox's own rules, which the Host records in Options.StateDir.
//
// Instances: several Hosts share one machine (two daemons, each an
// instance of its own: production and staging, or a test run beside
// either) without touching each other's objects, because every object a
// Host makes carries its name, its link prefix or its subnet, and
// everything it lists, checks or removes is found by them: its chains
// (<NAME>-…), sets (<name>-allow, <name>-deny), namespaces
// (/run/netns/<name>-<id>), links (the prefix), the log prefix of its
// refusals ("<name>-refused: ") and their rate table, its address records
// (Options.StateDir) and the DNS port its rules redirect to. Each Host's
// rules match only packets of its own links (and, for masquerading, of its
// subnet), so the order of the Hosts' jumps decides nothing: each Host
// keeps its jump in the block of Hosts' jumps at the top of each built-in
// chain, whatever the order there (Hosts know each other's jumps by their
// targets, HEARTH…-<chain>), and none moves another's. The subnets lie in
// the ranges every Host refuses (Options.Subnet), so a sandbox of one Host
// never reaches one of another's, whichever Host's chains judge the packet
// first; the forwarders answer only their own subnets, and the gateway,
// redirected to at each Host's own port, knows only its own sandboxes.
//
// Per-sandbox egress rules: Attach takes a sandbox's own policy (Egress),
// and SetEgress replaces it while the sandbox runs. It narrows, never
// widens, the policy above: Deny lists networks the sandbox may not reach
// and DenyDomains names, and a non-empty Allow or AllowDomains the only
// destinations it may. <NAME>-FORWARD jumps to <NAME>-EGRESS for every
// packet out of a sandbox (not only new connections: a change cuts the
// connections it forbids), after the rejects of the always-blocked and
// denied destinations, so that no Allow ever opens one, and before the
// limits. There, matched by the name of its veth, each sandbox with a
// policy has a refusal per denied network and, with denied names, of the
// addresses in <name>-deny for its veth; then, with an allow list, a
// RETURN per allowed network and, with allowed names, of the addresses in
// <name>-allow for its veth, and a refusal of the rest; a sandbox with no
// policy has no rule and falls through. SetEgress (and Attach, and
// Detach, which removes them) changes one sandbox's rules in one
// iptables-restore --noflush transaction that appends the new rules and
// deletes the old ones by their spec, so that no packet ever meets half a
// change, and other sandboxes' rules are never touched. Like the limits
// chain, Setup creates it when missing but never empties it, so the rules
// survive a daemon restart; after a firewall flush Repair puts them back.
// IPv4 prefixes only: a sandbox has no IPv6.
//
// Names: domain rules are enforced twice. The forwarder (below) judges
// each query by the asking sandbox's policy, found by its address: a name
// a DenyDomains pattern matches, or, with AllowDomains, one none of them
// matches, gets REFUSED at once, and is not sent upstream (so, with an
// allow list of names, names are no side channel out of the sandbox). A
// query of a name it answers goes upstream, and the IPv4 addresses of the
// answer are written to <name>-allow, an ipset of (address, veth) pairs,
// with the name as the entry's comment, before the answer goes back, so
// that the connection the sandbox opens at once meets them there. An
// entry lasts 24 hours after the last lookup that gave it, not the DNS
// TTL: a connection outlives the TTL of the name it was opened to, and the
// rules judge every packet of it. A change of policy moves the sandbox's
// entries by their names: to <name>-deny (refused, connections already
// open included) for a name it now denies, out of both for one its allow
// list now leaves out. Every egress sandbox's lookups are recorded, so a
// name denied later is refused at the addresses the sandbox resolved
// before, whatever its own cache holds. Two sets serve all sandboxes (the
// kernel allows few), at most 4096 entries per sandbox. The Host records
// each sandbox's policy in Options.StateDir too, so that the forwarder of
// a restarted daemon judges by it before any Attach; the sets are the
// kernel's and survive the restart. An address is judged, not a name: an
// address several names share (a CDN) is reachable once an allowed name
// resolved to it, unless a denied one did.
//
// Refusals: every refusal of a sandbox's packet (to the host, to an
// always-blocked or denied destination, past an allow list) jumps to
// <NAME>-REFUSE, which logs the first packet of each refused connection
// (conntrack NEW) to the kernel's log with the prefix "<name>-refused: ",
// at most 10 a second per sandbox address (20 at once), and rejects every
// packet. WatchRefusals reads the kernel's log (/dev/kmsg) and reports
// each to Options.OnRefusal with the sandbox's id (found by the veth the
// packet came in on), destination, protocol and port; the forwarder
// reports each refused lookup there too, with the name.
//
// Gateway: with Options.GatewayPort, <NAME>-PREROUTING redirects a
// sandbox's TCP connections to port 80 of any address of the subnet (its
// gateway: every other is another sandbox's, refused anyway) to that port
// of the host, where the daemon's egress gateway listens, and
// <NAME>-INPUT accepts them there only when so redirected; the forwarder
// answers Options.GatewayDomain ("hearth.internal"), and every name below
// it, with the asking sandbox's gateway address itself (an A record, TTL
// 60 s). SandboxAt tells the gateway which sandbox an address is.
//
// Limits: Attach takes a sandbox's caps (Limits), so that one sandbox
// cannot take the host's uplink, nor its connection tracking, for itself;
// a zero cap is none. Both are enforced in the host's namespace, out of
// reach of whatever runs in the sandbox's (even code that gained
// CAP_NET_ADMIN there), and whatever drives its eth0 (gVisor's netstack
// does); both apply to all its traffic, whatever the destination:
//
//   - Bandwidth, BitsPerSec each way, with tc on the host side of its veth.
//     Toward the sandbox, packets leave that side: its root qdisc is a
//     token bucket (tbf) at the rate. From the sandbox, they enter it,
//     where a qdisc could only police (drop above the rate, which TCP
//     takes badly, and kernels built without act_police cannot): its
//     ingress qdisc redirects every packet (mirred) to an ifb device of
//     the sandbox's (the link prefix, a 0 and the veth's hash), whose root
//     is a token bucket at the rate too, and which hands them back to the
//     veth's ingress as they leave it. Each bucket holds 10 ms of traffic
//     (at least 64 KiB) and queues at most 50 ms more before it drops, so
//     that TCP finds the rate without seconds of queue.
//   - Connections, Conns TCP connections open at once: a rule per capped
//     sandbox in <NAME>-LIMITS, matched by the name of its veth, rejects a
//     SYN with a TCP reset (the connect fails at once, as refused) when
//     conntrack already holds Conns connections from the sandbox's address
//     (connlimit, mask /32); connections that are closing (TIME_WAIT) do
//     not count. <NAME>-FORWARD jumps to it for every SYN out of a sandbox
//     that the policy lets through, just before it accepts it.
//
// Attach applies the caps at every call, replacing the previous ones (a
// wake may bring other caps); Detach removes them with the veth and its
// ifb. Setup creates <NAME>-LIMITS when it is missing but never empties
// it, unlike the policy's chains: the caps of attached sandboxes survive a
// daemon restart, and Repair puts them back after a firewall flush; the
// shapers are not the firewall's and stay.
//
// The name service: a Host with upstream name servers
// (Options.DNSUpstreams; the daemon's default is the host's own, from its
// /etc/resolv.conf) gives egress sandboxes a name service, judged by
// their domain rules (above). The
// daemon runs a DNS forwarder (ServeDNS) on the host, on UDP and TCP at
// Options.DNSPort (10053) of every address, and the driver mounts on an
// egress sandbox's /etc/resolv.conf a file naming its gateway as its only
// name server. A query a sandbox sends to port 53, of its gateway or of
// any other address (a program with a resolver of its own), never leaves
// the host: <NAME>-PREROUTING redirects it (REDIRECT, UDP and TCP, from
// the sandboxes' veths) to the forwarder's port at the gateway, and
// <NAME>-INPUT accepts it there, before it rejects everything else, only
// when conntrack says it was so redirected (--ctstate DNAT): the
// forwarder's port asked directly is refused like every other port of the
// host. The forwarder answers only sources in the subnet, and sends each
// query verbatim to the upstreams in order (UDP: a fresh socket per query,
// 3 s each; TCP: a connection per query), and the first answer back
// verbatim. Its queries to the upstreams are the host's own, so they are
// not filtered as a sandbox's are: a loopback resolver works, and a
// sandbox can resolve (not reach) whatever names the host's resolver
// knows and its policy allows, and, without an allow list of names, can
// send data out in the names it asks. At most 256 UDP
// queries and 64 TCP connections are in flight; more are dropped. With no
// upstreams there are no such rules, and a sandbox's resolv.conf is its
// image's (whose resolver, at a private address, is blocked like any
// other). If the forwarder cannot listen (its port is taken), the rules
// stay and lookups fail at once, refused.
//
// Addressing: each sandbox gets a /31 of Options.Subnet (10.89.0.0/16 by
// default), the host side of its veth the even address (the sandbox's
// gateway) and the sandbox the odd one, as eth0 with a default route via
// the gateway. The pair is chosen from a hash of the sandbox's id (the next
// free one on a collision) and recorded in Options.StateDir, so that it
// stays the sandbox's across daemon restarts and host reboots and is never
// given to another sandbox while it is recorded.
//
// Every name derives from the sandbox's id: the namespace is
// /run/netns/<name>-<id> (as `ip netns add` makes it), and the host side of
// the veth is the link prefix followed by a hash of the id, since a Linux
// interface name has at most 15 characters.
//
// The package drives iproute2's ip and tc, iptables (-w, with
// iptables-restore) and ipset as root; it needs no library. The kernel
// needs veth, ifb, the tbf and ingress qdiscs, the u32 classifier with the
// mirred action, hash:net,iface ipsets with comments and timeouts, and
// the conntrack, connlimit, hashlimit, set, LOG, REJECT and REDIRECT
// matches and targets.
package network
