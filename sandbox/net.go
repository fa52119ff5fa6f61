package sandbox

import (
	"net/netip"
	"slices"
	"strconv"
)

// ListeningPort is a TCP port a process in a sandbox listens on: Address
// is the local address it is bound to ("0.0.0.0", "127.0.0.1", "::").
type ListeningPort struct {
	Port    int    `json:"port"`
	Address string `json:"address"`
}

// MaxPublicPorts is how many ports of a sandbox may be public.
const MaxPublicPorts = 16

// ValidatePort checks a TCP port number: 1 to 65535.
func ValidatePort(port int) error {
	if port < 1 || port > 65535 {
		return Errorf(CodeInvalidArgument, "port %d is not a TCP port", port).WithHint("use a port from 1 to 65535")
	}
	return nil
}

// ValidatePorts checks a sandbox's public ports: at most MaxPublicPorts
// TCP ports, none repeated.
func ValidatePorts(ports []int) error {
	if len(ports) > MaxPublicPorts {
		return Errorf(CodeInvalidArgument, "%d public ports, over the limit of %d", len(ports), MaxPublicPorts).
			WithHint("make at most %d ports public", MaxPublicPorts).With("limit", MaxPublicPorts).With("used", len(ports))
	}
	seen := make(map[int]bool, len(ports))
	for _, p := range ports {
		if err := ValidatePort(p); err != nil {
			return err
		}
		if seen[p] {
			return Errorf(CodeInvalidArgument, "port %d is given twice", p).WithHint("give each port once")
		}
		seen[p] = true
	}
	return nil
}

// PortInfo is a port of a sandbox as the API shows it: whether a process
// listens on it (Address is then where), its URL, and whether that URL
// needs no token.
type PortInfo struct {
	Port      int    `json:"port"`
	Address   string `json:"address,omitempty"`
	Listening bool   `json:"listening"`
	URL       string `json:"url"`
	Public    bool   `json:"public"`
}

// ProxyURL is the URL of port of the sandbox called name (its stored name)
// for a client that reaches the daemon at scheme://host: with a base
// domain the host {port}-{name}.{domain}, else the daemon's proxy path
// /v1/sandboxes/{name}/proxy/{port}/.
func ProxyURL(scheme, host, domain, name string, port int) string {
	if domain != "" {
		return scheme + "://" + strconv.Itoa(port) + "-" + name + "." + domain + "/"
	}
	return scheme + "://" + host + "/v1/sandboxes/" + name + "/proxy/" + strconv.Itoa(port) + "/"
}

// Network modes of a sandbox. None has loopback only; egress adds
// outbound connections through NAT, never to the host, other sandboxes or
// private and link-local networks. Nothing reaches a sandbox from outside
// but through its URL (see ProxyURL).
const (
	NetworkNone   = "none"
	NetworkEgress = "egress"
)

// ValidateNetwork checks a network mode; "" is valid (the default).
func ValidateNetwork(mode string) error {
	switch mode {
	case "", NetworkNone, NetworkEgress:
		return nil
	}
	return Errorf(CodeInvalidArgument, "unknown network mode %q", mode).
		WithHint("use %q (loopback only) or %q (outbound connections)", NetworkNone, NetworkEgress)
}

// MaxEgressRules is how many entries each list of an EgressPolicy holds at
// most.
const MaxEgressRules = 256

// EgressPolicy narrows where an egress sandbox may connect, on top of what
// is always blocked (the host, other sandboxes, private and reserved
// networks): no destination in Deny, and, when Allow is not empty, only
// destinations in Allow. Entries are IPv4 networks ("203.0.113.0/24") or
// addresses ("203.0.113.7"). A tenant's policy applies to all its
// sandboxes; a sandbox's own adds to the tenant's Deny, and its Allow, when
// the tenant has one, must lie within it.
type EgressPolicy struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Prefixes parses the policy: its lists as networks, each entry checked.
func (e EgressPolicy) Prefixes() (allow, deny []netip.Prefix, err error) {
	if allow, err = parseNetworks("allow", e.Allow); err != nil {
		return nil, nil, err
	}
	if deny, err = parseNetworks("deny", e.Deny); err != nil {
		return nil, nil, err
	}
	return allow, deny, nil
}

// parseNetworks parses one list of an EgressPolicy.
func parseNetworks(list string, entries []string) ([]netip.Prefix, error) {
	if len(entries) > MaxEgressRules {
		return nil, Errorf(CodeInvalidArgument, "egress %s has %d entries, over the limit of %d", list, len(entries), MaxEgressRules).
			With("limit", MaxEgressRules).With("used", len(entries))
	}
	out := make([]netip.Prefix, 0, len(entries))
	for _, s := range entries {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, Errorf(CodeInvalidArgument, "egress %s entry %q is not an IPv4 network or address", list, s).
					WithHint("write e.g. 203.0.113.0/24 or 203.0.113.7")
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return nil, Errorf(CodeInvalidArgument, "egress %s entry %q is not IPv4: sandboxes have no IPv6", list, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Effective returns the networks a sandbox with policy own, in a tenant
// with policy tenant, may reach (allow, empty for anywhere not blocked)
// and may not (deny). Its own Allow must lie within the tenant's, when the
// tenant has one (invalid_argument otherwise); an empty own Allow takes the
// tenant's.
func (own EgressPolicy) Effective(tenant EgressPolicy) (allow, deny []netip.Prefix, err error) {
	tAllow, tDeny, err := tenant.Prefixes()
	if err != nil {
		return nil, nil, err
	}
	allow, deny, err = own.Prefixes()
	if err != nil {
		return nil, nil, err
	}
	if len(tAllow) > 0 {
		for _, p := range allow {
			if !slices.ContainsFunc(tAllow, func(t netip.Prefix) bool { return t.Bits() <= p.Bits() && t.Contains(p.Addr()) }) {
				return nil, nil, Errorf(CodeInvalidArgument, "egress allow entry %s is outside the tenant's allow list", p).
					WithHint("allow only networks within %v, or ask a tenant admin to widen the tenant's", tenant.Allow)
			}
		}
		if len(allow) == 0 {
			allow = tAllow
		}
	}
	return allow, append(tDeny, deny...), nil
}
