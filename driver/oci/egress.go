package oci

import (
	"context"
	"fmt"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/network"
)

var _ driver.EgressSetter = (*Driver)(nil)

// SetEgress replaces the egress rules of egress sandbox id, running or
// stopped, with rules, through the network host (network.Host.SetEgress:
// one iptables transaction, so that no packet passes in between that both
// the old and the new rules refuse). A stopped sandbox's attachment stays
// with Stop, so it gets them too until its next Start, which applies its
// Spec.Egress instead; the driver records nothing. It returns
// driver.ErrNotFound for an unknown id, and an error saying so for a
// sandbox with no egress network (no attachment).
func (d *Driver) SetEgress(ctx context.Context, id string, rules driver.EgressRules) error {
	if validID(id) != nil {
		return driver.ErrNotFound
	}
	if err := egressOf(rules).Validate(); err != nil {
		return fmt.Errorf("oci: set egress %s: %w", id, err)
	}
	defer d.locks.lock(id)()
	ok, err := d.dir.known(id)
	if err != nil {
		return fmt.Errorf("oci: set egress %s: %w", id, err)
	}
	if !ok {
		return driver.ErrNotFound
	}
	if d.net == nil || !d.net.Attached(id) {
		return fmt.Errorf("oci: set egress %s: sandbox has no egress network (network %q)", id, driver.NetworkNone)
	}
	if err := d.net.SetEgress(ctx, id, egressOf(rules)); err != nil {
		return fmt.Errorf("oci: set egress %s: %w", id, err)
	}
	d.log.Info("sandbox egress rules set", "sandbox", id, "allow", len(rules.Allow)+len(rules.AllowDomains), "deny", len(rules.Deny)+len(rules.DenyDomains))
	return nil
}

// egressOf is the network host's form of rules.
func egressOf(rules driver.EgressRules) network.Egress {
	return network.Egress{Allow: rules.Allow, Deny: rules.Deny, AllowDomains: rules.AllowDomains, DenyDomains: rules.DenyDomains}
}
