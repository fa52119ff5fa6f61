package network

import "net/netip"

// Internals the external tests reach.
var (
	Pair      = pair
	PairOf    = pairOf
	Allocate  = allocate
	LinkName  = linkName
	CheckID   = checkID
	ChainsFor = func(name string) (input, forward, postrouting, limits string) {
		c := chainsFor(name)
		return c.input, c.forward, c.postrouting, c.limits
	}
	IFBName         = ifbName
	BurstBytes      = burstBytes
	ShapeLines      = shapeLines
	UnshapeLines    = unshapeLines
	ConnRule        = connRule
	ConnRuleChanges = connRuleChanges
	// Rules returns the rules of a host named name, as iptables -S lists
	// them.
	Rules = func(name, linkPrefix string, subnet netip.Prefix, deny []netip.Prefix) (filter, nat []string) {
		c := chainsFor(name)
		return filterRules(c, linkPrefix, subnet, deny), natRules(c, linkPrefix, subnet)
	}
	RestoreInput = func(name string, filter, nat []string) string {
		return restoreInput(chainsFor(name), filter, nat)
	}
	// HookPlacement is hookPlacement for the jump from chain from to
	// chain to.
	HookPlacement = func(listing []string, from, to string) (count int, first bool) {
		return hookPlacement(listing, hook{from: from, to: to})
	}
)
