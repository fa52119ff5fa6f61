package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/hearth/hearth/sandbox"
)

// Egress is one sandbox's own egress policy, on top of the Host's (the
// always-blocked ranges and Options.Deny, which no Egress can open). The
// zero value adds nothing. See the package doc for how it is enforced.
type Egress struct {
	// Allow and AllowDomains, when either is not empty, are the only
	// destinations the sandbox may reach: the networks, and the addresses
	// names matching the patterns resolved to for it through the Host's
	// forwarder (no other name resolves). Every other packet from it is
	// rejected.
	Allow        []netip.Prefix
	AllowDomains []string
	// Deny are networks the sandbox may not reach, even when Allow lists
	// them; DenyDomains are names it may not resolve, nor reach at an
	// address they resolved to for it while they were allowed.
	Deny        []netip.Prefix
	DenyDomains []string
}

// Validate rejects a prefix that is not a valid IPv4 one (a sandbox has
// no IPv6, so an IPv6 rule would be a policy that does nothing) and a
// domain pattern that is not one as sandbox.DomainPattern returns it.
func (e Egress) Validate() error {
	for _, p := range slices.Concat(e.Allow, e.Deny) {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("network: egress rule %v: want an IPv4 prefix", p)
		}
	}
	for _, d := range slices.Concat(e.AllowDomains, e.DenyDomains) {
		if n, ok := sandbox.DomainPattern(d); !ok || n != d {
			return fmt.Errorf("network: egress rule %q: want a domain name or *.name, in lower case", d)
		}
	}
	return nil
}

// isZero reports whether e adds nothing to the Host's policy.
func (e Egress) isZero() bool {
	return len(e.Allow) == 0 && len(e.Deny) == 0 && len(e.AllowDomains) == 0 && len(e.DenyDomains) == 0
}

// restricts reports whether e has an allow list: only what it lists is
// reachable.
func (e Egress) restricts() bool { return len(e.Allow) > 0 || len(e.AllowDomains) > 0 }

// permits reports whether a sandbox with policy e may resolve name
// (normalized, see sandbox.DomainName; "" for a query whose name is not
// one): not when a DenyDomains pattern matches it, nor, with
// AllowDomains, when none of those does. A name e cannot judge (not a
// domain name) resolves only when e has no AllowDomains.
func (e Egress) permits(name string) bool {
	if name == "" {
		return len(e.AllowDomains) == 0
	}
	return !e.denies(name) && (len(e.AllowDomains) == 0 || slices.ContainsFunc(e.AllowDomains, func(p string) bool { return sandbox.DomainMatches(p, name) }))
}

// denies reports whether a DenyDomains pattern matches name.
func (e Egress) denies(name string) bool {
	return name != "" && slices.ContainsFunc(e.DenyDomains, func(p string) bool { return sandbox.DomainMatches(p, name) })
}

// egressRules returns the rules of the egress chain that enforce e for
// the sandbox whose host-side veth is link, in order and as iptables -S
// lists them: a refusal (the refuse chain) per denied network, and of the
// addresses in the deny set for link when e denies domains; then, with an
// allow list, a RETURN per allowed network (back to the forward chain,
// which goes on to the limits and accepts), and of the addresses in the
// allow set for link when e allows domains, and a refusal of the rest.
// Prefixes are masked and each listed once; 0.0.0.0/0 has no -d, as
// iptables lists it. e must have passed Validate.
func egressRules(c chains, link string, e Egress) []string {
	var rules []string
	refuse := "-j " + c.refuse
	rule := func(p netip.Prefix, target string) string {
		dst := ""
		if p.Bits() != 0 {
			dst = " -d " + p.String()
		}
		return "-A " + c.egress + dst + " -i " + link + " " + target
	}
	inSet := func(set, target string) string {
		return "-A " + c.egress + " -i " + link + " -m set --match-set " + set + " dst,src " + target
	}
	for _, p := range uniqueMasked(e.Deny) {
		rules = append(rules, rule(p, refuse))
	}
	if len(e.DenyDomains) > 0 {
		rules = append(rules, inSet(c.denySet, refuse))
	}
	if !e.restricts() {
		return rules
	}
	for _, p := range uniqueMasked(e.Allow) {
		rules = append(rules, rule(p, "-j RETURN"))
	}
	if len(e.AllowDomains) > 0 {
		rules = append(rules, inSet(c.allowSet, "-j RETURN"))
	}
	return append(rules, "-A "+c.egress+" -i "+link+" "+refuse)
}

// uniqueMasked returns ps masked, each once, in their first order.
func uniqueMasked(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p = p.Masked(); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// SetEgress replaces sandbox id's egress policy with e, while it runs or
// not: the rules of the egress chain for its veth become e's (none for
// the zero Egress) in one iptables-restore transaction, so that no packet
// is ever let through that both the old and the new policy reject. It is
// idempotent (the same policy again costs a listing and no change), and
// it runs Setup first if this Host has not yet. It fails for an invalid
// id, an e with a prefix that is not IPv4, and an id that is not attached
// (Attach takes the policy too, and Detach removes it).
func (h *Host) SetEgress(ctx context.Context, id string, e Egress) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := e.Validate(); err != nil {
		return err
	}
	if !h.Attached(id) {
		return fmt.Errorf("network: set egress %s: sandbox is not attached", id)
	}
	if err := h.ensureSetup(ctx); err != nil {
		return err
	}
	if err := h.egress(ctx, id, e); err != nil {
		return fmt.Errorf("network: set egress %s: %w", id, err)
	}
	return nil
}

// egress makes sandbox id's egress policy e: the forwarder judges its
// lookups by e from now on (and, through the state dir, after a daemon
// restart), the addresses it learned move between the allow and deny sets
// as e sorts their names (see learnedSets), and the egress chain holds
// e's rules for it, and no others of its (see setLinkRules). The sets
// change before the rules, adds before removals, so that a denied address
// is refused from the first packet the new rules judge.
func (h *Host) egress(ctx context.Context, id string, e Egress) error {
	link := h.Link(id)
	if err := h.nets.remember(id, e); err != nil {
		return err
	}
	if err := h.nets.sortLearned(ctx, link, &e); err != nil {
		return err
	}
	changed, err := h.cmd.setLinkRules(ctx, h.chains.egress, link, egressRules(h.chains, link, e))
	if changed {
		h.log.Debug("sandbox egress set", "sandbox", id, "allow", e.Allow, "deny", e.Deny, "allow_domains", e.AllowDomains, "deny_domains", e.DenyDomains)
	}
	return err
}
