package drivertest

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/hearth/hearth/driver"
)

// The test hosts of testEgressRules, at public addresses of their own
// (TEST-NET-2 addresses no other check uses; a test host's peer takes the
// next address, so they are two apart).
var (
	rulesFirst  = netip.MustParseAddr("198.51.100.40")
	rulesSecond = netip.MustParseAddr("198.51.100.42")
)

// requireEgress skips t for a driver whose Capabilities do not say
// Egress.
func requireEgress(t *testing.T, d driver.Driver) {
	t.Helper()
	if !d.Capabilities().Egress {
		t.Skip("the driver does not support egress networking (Capabilities().Egress is false)")
	}
}

// egressSetter returns d as a driver.EgressSetter, which a driver whose
// Capabilities say Egress must be; it skips t for a driver without
// egress.
func egressSetter(t *testing.T, d driver.Driver) driver.EgressSetter {
	t.Helper()
	requireEgress(t, d)
	es, ok := d.(driver.EgressSetter)
	if !ok {
		t.Fatalf("the driver's Capabilities say Egress, but it is not a driver.EgressSetter")
	}
	return es
}

// testEgressRules, for a driver whose Capabilities say Egress (which must
// then be a driver.EgressSetter): an egress sandbox started with
// Spec.Egress denying a test host is refused there and reaches a second
// one; SetEgress, while it runs, to allow only the second makes the first
// refused and the second reachable; SetEgress to no rules makes both
// reachable. SetEgress of an unknown id is ErrNotFound, and of a sandbox
// with no network an error.
func (s *suite) testEgressRules(t *testing.T) {
	d := s.cfg.New(t).Driver
	es := egressSetter(t, d)
	first := NewTestHost(t, rulesFirst, egressPort)
	second := NewTestHost(t, rulesSecond, egressPort)
	ctx := t.Context()

	if err := es.SetEgress(ctx, newID(), driver.EgressRules{}); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("SetEgress(an unknown id) = %v, want ErrNotFound", err)
	}

	a, none := s.spec(t), s.spec(t)
	a.Network, none.Network = driver.NetworkEgress, driver.NetworkNone
	a.Egress = driver.EgressRules{Deny: []netip.Prefix{netip.PrefixFrom(first.Addr, 32)}}
	for _, spec := range []driver.Spec{a, none} {
		s.start(t, d, spec)
	}
	if err := es.SetEgress(ctx, none.ID, driver.EgressRules{}); err == nil || errors.Is(err, driver.ErrNotFound) {
		t.Errorf("SetEgress(%s, network %q) = %v, want an error saying it has no egress network", none.ID, none.Network, err)
	}

	want := func(when, firstWant, secondWant string) {
		t.Helper()
		got := probe(t, d, a.ID, first.Target(), second.Target())
		if got[first.Target()] != firstWant || got[second.Target()] != secondWant {
			t.Errorf("%s: egress sandbox %s → %s, %s = %s, %s; want %s, %s", when, a.ID, first.Target(), second.Target(), got[first.Target()], got[second.Target()], firstWant, secondWant)
		}
	}
	want("started denying "+first.Addr.String(), "refused", "ok")

	allow := driver.EgressRules{Allow: []netip.Prefix{netip.PrefixFrom(second.Addr, 32)}}
	for i := range 2 { // the second changes nothing
		if err := es.SetEgress(ctx, a.ID, allow); err != nil {
			t.Fatalf("SetEgress(%s, allow %s) #%d = %v", a.ID, second.Addr, i+1, err)
		}
	}
	want("set to allow only "+second.Addr.String(), "refused", "ok")

	if err := es.SetEgress(ctx, a.ID, driver.EgressRules{}); err != nil {
		t.Fatalf("SetEgress(%s, no rules) = %v", a.ID, err)
	}
	want("set to no rules", "ok", "ok")
}
