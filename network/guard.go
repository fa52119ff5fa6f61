package network

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// DefaultGuardInterval is how often the daemon has Guard check the rules.
const DefaultGuardInterval = 10 * time.Second

// Guard checks, every interval until ctx ends, that the Host's rules are
// in place (see Repair), and puts them back when they are not. It returns
// nil once ctx has ended; a failed check or repair is logged and tried
// again at the next tick.
func (h *Host) Guard(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := h.Repair(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("cannot check or repair the sandbox network's rules", "err", err)
		}
	}
}

// Repair checks that the Host's rules are in place, once Setup has run:
// each hook at the top of its built-in chain (above every rule but other
// Hosts' jumps, see hookPlacement), the forward chain whole, and the sets
// there. Something that rewrote the host's firewall (a
// firewall service reloading, an `iptables -F`) would otherwise leave
// sandboxes unfiltered, routed wherever the host routes. When one is
// missing, Repair runs Setup again and puts back every attached
// sandbox's own rules (its egress rules and connection cap, from the
// state dir), and says it did. A Host that has not set up yet has
// nothing to repair. It checks and repairs this Host's objects only:
// another Host's (another daemon's instance) missing rules are that
// Host's Guard's to repair, and a jump of another Host above this one's
// is in its place.
func (h *Host) Repair(ctx context.Context) (repaired bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.setUp {
		return false, nil
	}
	why, err := h.missing(ctx)
	if err != nil || why == "" {
		return false, err
	}
	h.log.Warn("the sandbox network's rules are gone from the host's firewall; putting them back", "missing", why)
	if err := h.setupLocked(ctx); err != nil {
		return false, fmt.Errorf("network: repair: %w", err)
	}
	ids, err := h.List()
	if err != nil {
		return false, fmt.Errorf("network: repair: %w", err)
	}
	for _, id := range ids {
		if !h.Attached(id) {
			continue
		}
		link, r := h.Link(id), h.nets.readPolicy(id)
		if _, err := h.cmd.setLinkRules(ctx, h.chains.egress, link, egressRules(h.chains, link, r.Egress)); err != nil {
			return false, fmt.Errorf("network: repair %s: %w", id, err)
		}
		if _, err := h.cmd.setLinkRules(ctx, h.chains.limits, link, h.limits.connRules(id, r.Conns)); err != nil {
			return false, fmt.Errorf("network: repair %s: %w", id, err)
		}
	}
	return true, nil
}

// missing returns what of the Host's rules is not in place ("" when all
// is): a hook not at the top of its chain, a forward chain without all its
// rules, a set that is gone.
func (h *Host) missing(ctx context.Context) (string, error) {
	for _, hk := range h.chains.hooks() {
		listing, err := h.cmd.listChain(ctx, hk.table, hk.from)
		if err != nil {
			return "", err
		}
		if count, placed := hookPlacement(listing, hk); count != 1 || !placed {
			return "the jump from " + hk.from + " to " + hk.to, nil
		}
	}
	listing, err := h.cmd.listChain(ctx, "filter", h.chains.forward)
	if err != nil {
		if exists, lerr := h.cmd.chainExists(ctx, "filter", h.chains.forward); lerr == nil && !exists {
			return "the chain " + h.chains.forward, nil
		}
		return "", err
	}
	have := map[string]bool{}
	for _, r := range listing {
		have[r] = true
	}
	filter, _ := h.Rules()
	for _, r := range filter {
		if strings.HasPrefix(r, "-A "+h.chains.forward+" ") && !have[r] {
			return "the rule " + r, nil
		}
	}
	sets, err := h.cmd.ipset(ctx, "list", "-n")
	if err != nil {
		return "", err
	}
	for _, set := range []string{h.chains.allowSet, h.chains.denySet} {
		if !strings.Contains("\n"+string(sets), "\n"+set+"\n") {
			return "the set " + set, nil
		}
	}
	return "", nil
}
