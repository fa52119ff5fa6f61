package oci

import (
	"context"
	"fmt"
	"log/slog"

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
	if !d.net.attached(id) {
		return fmt.Errorf("oci: set egress %s: sandbox has no egress network (network %q)", id, driver.NetworkNone)
	}
	if err := d.net.host.SetEgress(ctx, id, egressOf(rules)); err != nil {
		return fmt.Errorf("oci: set egress %s: %w", id, err)
	}
	d.log.Info("sandbox egress rules set", "sandbox", id, "allow", len(rules.Allow)+len(rules.AllowDomains), "deny", len(rules.Deny)+len(rules.DenyDomains))
	return nil
}

// networks are the sandboxes' attachments to the host's network through
// Options.Network, host; with none (nil), no sandbox has one, and detach,
// attached and recover have nothing to do.
type networks struct {
	host  *network.Host
	locks *idLocks
	dir   stateDir
	log   *slog.Logger
}

// attach gives an egress sandbox its network attachment, under the
// network caps of its Resources and its own egress rules (Spec.Egress; at
// every start: a wake may bring other ones), and returns it. For any other
// it returns the zero Attachment (a new empty namespace) and removes an
// attachment the sandbox kept from an egress run before, so that a
// sandbox's network is only ever what its spec asks for.
func (n *networks) attach(ctx context.Context, spec driver.Spec) (network.Attachment, error) {
	if spec.Network != driver.NetworkEgress {
		return network.Attachment{}, n.detach(ctx, spec.ID)
	}
	a, err := n.host.Attach(ctx, spec.ID, network.Limits{BitsPerSec: spec.Resources.NetBitsPerSec, Conns: spec.Resources.NetConns}, egressOf(spec.Egress))
	if err != nil {
		return network.Attachment{}, err
	}
	n.log.Debug("sandbox attached to the network", "sandbox", spec.ID, "addr", a.Addr, "gateway", a.Gateway, "netns", a.Namespace)
	return a, nil
}

// detach removes sandbox id's attachment, if it has one.
func (n *networks) detach(ctx context.Context, id string) error {
	if n.host == nil {
		return nil
	}
	return n.host.Detach(ctx, id)
}

// attached reports whether sandbox id has an attachment.
func (n *networks) attached(id string) bool { return n.host != nil && n.host.Attached(id) }

// servesDNS reports whether the network host answers its sandboxes' DNS
// queries (network.Host.ServesDNS).
func (n *networks) servesDNS() bool { return n.host != nil && n.host.ServesDNS() }

// recover detaches every network attachment whose sandbox has no
// directory (known holds those that do): what a Start or Delete cut short
// left, which nothing else would ever remove. Then, if any sandbox is
// still attached, it sets the host's rules up again (network.Host.Setup),
// so that a daemon restart refreshes them under running sandboxes; a
// failure there is logged, and the next egress Start tries again and fails
// if it must.
func (n *networks) recover(ctx context.Context, known map[string]bool) error {
	if n.host == nil {
		return nil
	}
	ids, err := n.host.List()
	if err != nil {
		return err
	}
	attached := 0
	for _, id := range ids {
		if known[id] {
			attached++
			continue
		}
		unlock := n.locks.lock(id)
		if ok, err := n.dir.known(id); err == nil && !ok {
			n.log.Warn("removing a network attachment with no sandbox directory", "sandbox", id)
			if err := n.host.Detach(ctx, id); err != nil {
				n.log.Error("remove orphan network attachment", "sandbox", id, "err", err)
			}
		}
		unlock()
	}
	if attached > 0 {
		if err := n.host.Setup(ctx); err != nil {
			n.log.Error("set up the sandbox network again", "err", err)
		}
	}
	return nil
}

// egressOf is the network host's form of rules.
func egressOf(rules driver.EgressRules) network.Egress {
	return network.Egress{Allow: rules.Allow, Deny: rules.Deny, AllowDomains: rules.AllowDomains, DenyDomains: rules.DenyDomains}
}
