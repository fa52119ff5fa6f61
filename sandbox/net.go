package sandbox

import (
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
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

// ProxyURL is the URL of port of tenant's sandbox called name (its stored
// name) for a client that reaches the daemon at scheme://host: with a base
// domain the host {port}-{name}.{domain} for an operators' sandbox (tenant
// system) and {port}-{name}.{tenant}.{domain} for a tenant's, else the
// daemon's proxy path /v1/sandboxes/{ref}/proxy/{port}/ with the
// sandbox's PublicRef (its '/' escaped). A URL names the tenant because
// names are unique per tenant: no tenant's sandbox can take another's URL.
func ProxyURL(scheme, host, domain, tenant, name string, port int) string {
	if domain != "" {
		label := strconv.Itoa(port) + "-" + name
		if tenant != SystemTenant {
			label += "." + tenant
		}
		return scheme + "://" + label + "." + domain + "/"
	}
	return scheme + "://" + host + "/v1/sandboxes/" + url.PathEscape(PublicRef(tenant, name)) + "/proxy/" + strconv.Itoa(port) + "/"
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
// destinations in Allow. Entries are IPv4 networks ("203.0.113.0/24"),
// addresses ("203.0.113.7") or domain names: "example.com" is that name
// only, "*.example.com" every name below it (not example.com itself). A
// denied name does not resolve; with names in Allow only those resolve,
// and connections go only to the addresses they resolved to (and to the
// allowed networks). A tenant's policy applies to all its sandboxes; a
// sandbox's own adds to the tenant's Deny, and its Allow, when the tenant
// has one, must lie within it.
type EgressPolicy struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// EgressList is one list of an EgressPolicy, parsed: its networks
// (masked) and its domain patterns (lower case, no trailing dot).
type EgressList struct {
	Networks []netip.Prefix
	Domains  []string
}

// Empty reports whether l lists nothing.
func (l EgressList) Empty() bool { return len(l.Networks) == 0 && len(l.Domains) == 0 }

// Parse parses the policy's lists, each entry checked.
func (e EgressPolicy) Parse() (allow, deny EgressList, err error) {
	if allow, err = parseEgressList("allow", e.Allow); err != nil {
		return EgressList{}, EgressList{}, err
	}
	if deny, err = parseEgressList("deny", e.Deny); err != nil {
		return EgressList{}, EgressList{}, err
	}
	return allow, deny, nil
}

// parseEgressList parses one list of an EgressPolicy.
func parseEgressList(list string, entries []string) (EgressList, error) {
	if len(entries) > MaxEgressRules {
		return EgressList{}, Errorf(CodeInvalidArgument, "egress %s has %d entries, over the limit of %d", list, len(entries), MaxEgressRules).
			With("limit", MaxEgressRules).With("used", len(entries))
	}
	var out EgressList
	for _, s := range entries {
		if d, ok := DomainPattern(s); ok {
			out.Domains = append(out.Domains, d)
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return EgressList{}, Errorf(CodeInvalidArgument, "egress %s entry %q is not an IPv4 network or address, nor a domain name", list, s).
					WithHint("write e.g. 203.0.113.0/24, 203.0.113.7, example.com or *.example.com")
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return EgressList{}, Errorf(CodeInvalidArgument, "egress %s entry %q is not IPv4: sandboxes have no IPv6", list, s)
		}
		out.Networks = append(out.Networks, p.Masked())
	}
	return out, nil
}

// Effective returns where a sandbox with policy own, in a tenant with
// policy tenant, may connect (allow, empty for anywhere not blocked) and
// may not (deny). Its own Allow must lie within the tenant's, when the
// tenant has one (invalid_argument otherwise): each network within one of
// the tenant's networks, each domain pattern within one of its patterns
// (see DomainWithin). An empty own Allow takes the tenant's.
func (own EgressPolicy) Effective(tenant EgressPolicy) (allow, deny EgressList, err error) {
	tAllow, tDeny, err := tenant.Parse()
	if err != nil {
		return EgressList{}, EgressList{}, err
	}
	allow, deny, err = own.Parse()
	if err != nil {
		return EgressList{}, EgressList{}, err
	}
	if !tAllow.Empty() {
		outside := func(entry string) error {
			return Errorf(CodeInvalidArgument, "egress allow entry %s is outside the tenant's allow list", entry).
				WithHint("allow only destinations within %v, or ask a tenant admin to widen the tenant's", tenant.Allow)
		}
		for _, p := range allow.Networks {
			if !slices.ContainsFunc(tAllow.Networks, func(t netip.Prefix) bool { return t.Bits() <= p.Bits() && t.Contains(p.Addr()) }) {
				return EgressList{}, EgressList{}, outside(p.String())
			}
		}
		for _, d := range allow.Domains {
			if !slices.ContainsFunc(tAllow.Domains, func(t string) bool { return DomainWithin(d, t) }) {
				return EgressList{}, EgressList{}, outside(d)
			}
		}
		if allow.Empty() {
			allow = tAllow
		}
	}
	deny = EgressList{
		Networks: slices.Concat(tDeny.Networks, deny.Networks),
		Domains:  slices.Concat(tDeny.Domains, deny.Domains),
	}
	return allow, deny, nil
}

// DomainPattern checks and normalizes a domain pattern of an egress
// list: a name ("example.com") or a wildcard over the names below one
// ("*.example.com"), in any case, with or without a final dot. A name
// has two labels or more, of 1 to 63 letters, digits, hyphens and
// underscores, not beginning or ending with a hyphen, at most 253
// characters in all, and a last label that is not all digits (so that no mistyped address reads
// as a name). It returns the pattern in lower case without the final
// dot.
func DomainPattern(s string) (string, bool) {
	name, wild := strings.CutPrefix(s, "*.")
	name, ok := DomainName(name)
	if !ok {
		return "", false
	}
	if wild {
		return "*." + name, true
	}
	return name, true
}

// DomainName checks and normalizes a domain name, by DomainPattern's
// rules for a name (no wildcard): the name in lower case without its
// final dot, or false.
func DomainName(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" || len(s) > 253 {
		return "", false
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
		return "", false
	}
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for _, c := range []byte(l) {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return "", false
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", false
	}
	return s, true
}

// DomainMatches reports whether the name (normalized, see DomainName)
// matches the pattern (normalized, see DomainPattern): the same name, or,
// for "*.example.com", a name below example.com.
func DomainMatches(pattern, name string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
	}
	return name == pattern
}

// DomainWithin reports whether every name that pattern inner matches,
// outer matches too (both normalized, see DomainPattern).
func DomainWithin(inner, outer string) bool {
	if base, ok := strings.CutPrefix(inner, "*."); ok {
		return inner == outer || strings.HasPrefix(outer, "*.") && DomainMatches(outer, base)
	}
	return DomainMatches(outer, inner)
}
