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
// the filter table and <NAME>-POSTROUTING in the nat table, jumped to from
// the first rule of INPUT, FORWARD and POSTROUTING. Setup rewrites them
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
// reloading) takes the rules with it until Setup runs again: the driver
// runs it at the first egress start and at every Recover that finds
// sandboxes attached.
//
// No name service is given yet: a sandbox reaches addresses, not names
// (its resolv.conf is its image's, and a resolver at a private address is
// blocked like any other).
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
// The package drives iproute2's ip and iptables (-w, with iptables-restore)
// as root; it needs no library.
package network
