package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
)

// Egress is one sandbox's own egress policy, on top of the Host's (the
// always-blocked ranges and Options.Deny, which no Egress can open). The
// zero value adds nothing. See the package doc for how it is enforced.
type Egress struct {
	// Allow, when not empty, are the only destinations the sandbox may
	// reach; every other packet from it is rejected.
	Allow []netip.Prefix
	// Deny are destinations the sandbox may not reach, even when Allow
	// lists them.
	Deny []netip.Prefix
}

// check rejects a prefix that is not a valid IPv4 one: a sandbox has no
// IPv6, so an IPv6 rule would be a policy that does nothing.
func (e Egress) check() error {
	for _, p := range slices.Concat(e.Allow, e.Deny) {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("network: egress rule %v: want an IPv4 prefix", p)
		}
	}
	return nil
}

// isZero reports whether e adds nothing to the Host's policy.
func (e Egress) isZero() bool { return len(e.Allow) == 0 && len(e.Deny) == 0 }

// egressRules returns the rules of chain that enforce e for the sandbox
// whose host-side veth is link, in order and as iptables -S lists them:
// a REJECT per denied destination, then, with an allow list, a RETURN
// per allowed one (back to the forward chain, which goes on to the limits
// and accepts) and a REJECT of the rest. Prefixes are masked and each
// listed once; 0.0.0.0/0 has no -d, as iptables lists it. e must have
// passed check.
func egressRules(chain, link string, e Egress) []string {
	var rules []string
	rule := func(p netip.Prefix, target string) string {
		dst := ""
		if p.Bits() != 0 {
			dst = " -d " + p.String()
		}
		return "-A " + chain + dst + " -i " + link + " " + target
	}
	for _, p := range uniqueMasked(e.Deny) {
		rules = append(rules, rule(p, reject))
	}
	if len(e.Allow) == 0 {
		return rules
	}
	for _, p := range uniqueMasked(e.Allow) {
		rules = append(rules, rule(p, "-j RETURN"))
	}
	return append(rules, "-A "+chain+" -i "+link+" "+reject)
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
	if err := e.check(); err != nil {
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

// egress makes the egress chain hold e's rules for sandbox id, and no
// others of its (see setLinkRules).
func (h *Host) egress(ctx context.Context, id string, e Egress) error {
	link := h.Link(id)
	changed, err := h.setLinkRules(ctx, h.chains.egress, link, egressRules(h.chains.egress, link, e))
	if changed {
		h.log.Debug("sandbox egress set", "sandbox", id, "allow", e.Allow, "deny", e.Deny)
	}
	return err
}
