package network_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/network"
)

// otherHost is a second Host beside the tests' own, as a second daemon's
// instance is beside the first: its name begins with the first's, its
// link prefix, subnet and DNS port are its own.
var otherHost = hostNames{testName + "two", "hm", netip.MustParsePrefix("10.203.0.0/16"), 10254}

// refusalLog collects a Host's refusals.
type refusalLog struct {
	mu  sync.Mutex
	got []network.Refusal
}

func (l *refusalLog) add(r network.Refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, r)
}

func (l *refusalLog) all() []network.Refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// apartHost is one of TestHostsApart's two Hosts, with its sandbox.
type apartHost struct {
	names    hostNames
	h        *network.Host
	dir      string
	sb       network.Attachment
	refusals *refusalLog
	upstream netip.AddrPort
}

// TestHostsApart: two Hosts on one machine (two daemons' instances) keep
// to their own. Everything one does (Setup, Attach with limits and a
// policy, SetEgress, Detach, Repair after its rules were flushed, the
// driver's recovery by a Host of a restarted daemon, which detaches what
// it does not know, and Teardown) leaves the other's chains, rules, jumps,
// sets, namespaces and links exactly as they were, and the other's Repair
// finds nothing to repair (it would have fought the first for the top of
// INPUT); each refusal is reported by the Host of the sandbox refused
// only; and both sandboxes reach a test host and resolve its name through
// their own forwarder throughout.
func TestHostsApart(t *testing.T) {
	public := drivertest.NewTestHost(t, netip.MustParseAddr("203.0.113.61"), 8080)
	private := drivertest.NewTestHost(t, netip.MustParseAddr("10.126.0.1"), 8080)
	upstream := drivertest.NewTestDNS(t, map[string]netip.Addr{testDNSName: testAddr})
	ctx := t.Context()
	var hosts [2]*apartHost
	for i, names := range []hostNames{testHost, otherHost} {
		x := &apartHost{names: names, refusals: &refusalLog{}, upstream: upstream}
		x.h, x.dir = newNamedHost(t, names, x.refusals.add, upstream)
		drivertest.ServeDNS(t, x.h)
		watchRefusals(t, x.h)
		var err error
		if x.sb, err = x.h.Attach(ctx, "apart"+strconv.Itoa(i), network.Limits{Conns: 50}, network.Egress{}); err != nil {
			t.Fatal(err)
		}
		hosts[i] = x
	}
	works := func(when string) {
		t.Helper()
		for _, x := range hosts {
			if got := probeIn(t, x.sb, public.Target())[public.Target()]; got != "ok" {
				t.Errorf("%s: %s → %s = %s, want ok", when, x.sb.ID, public.Target(), got)
			}
			r := queryIn(t, x.sb, 9, testDNSName)
			wantAnswer(t, when+": "+x.sb.ID+" resolves "+testDNSName, r, nil, 9)
		}
	}
	works("at first")
	for i, x := range hosts {
		y := hosts[1-i]
		before := drivertest.NetworkObjects(t, y.names.name, y.names.prefix)
		if len(before) == 0 {
			t.Fatalf("%s has no objects on the host", y.names.name)
		}
		unchanged := func(what string) {
			t.Helper()
			if after := drivertest.NetworkObjects(t, y.names.name, y.names.prefix); !slices.Equal(after, before) {
				t.Errorf("after %s %s, %s's objects changed:\n%s\nwant:\n%s", x.names.name, what, y.names.name, strings.Join(after, "\n"), strings.Join(before, "\n"))
			}
			if repaired, err := y.h.Repair(ctx); repaired || err != nil {
				t.Errorf("after %s %s, %s's Repair() = %v, %v; want nothing to repair", x.names.name, what, y.names.name, repaired, err)
			}
		}
		for _, step := range []struct {
			what string
			do   func() error
		}{
			{"Setup", func() error { return x.h.Setup(ctx) }},
			{"Attach", func() error {
				_, err := x.h.Attach(ctx, "apartextra", network.Limits{BitsPerSec: 8e6, Conns: 5}, network.Egress{Deny: prefixes(public.Addr.String() + "/32")})
				return err
			}},
			{"SetEgress", func() error {
				return x.h.SetEgress(ctx, "apartextra", network.Egress{AllowDomains: []string{testDNSName}})
			}},
			{"Detach", func() error { return x.h.Detach(ctx, "apartextra") }},
			{"Repair after a flush", func() error { return flushAndRepair(t, x) }},
			{"recovery", func() error { return recoverHost(t, x) }},
			{"refusal", func() error {
				if got := probeIn(t, x.sb, private.Target())[private.Target()]; got != "refused" {
					t.Errorf("%s → %s = %s, want refused", x.sb.ID, private.Target(), got)
				}
				return nil
			}},
		} {
			if err := step.do(); err != nil {
				t.Fatalf("%s %s = %v", x.names.name, step.what, err)
			}
			unchanged(step.what)
		}
		works("after " + x.names.name + "'s steps")
	}
	// Each Host heard of its own sandbox's refusal, and of no other.
	for _, x := range hosts {
		deadline := time.Now().Add(5 * time.Second)
		for !slices.ContainsFunc(x.refusals.all(), func(r network.Refusal) bool { return r.Sandbox == x.sb.ID }) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		var ids []string
		for _, r := range x.refusals.all() {
			ids = append(ids, r.Sandbox)
		}
		if slices.Sort(ids); len(slices.Compact(ids)) != 1 || ids[0] != x.sb.ID {
			t.Errorf("%s reported refusals of %q, want of %s only", x.names.name, ids, x.sb.ID)
		}
	}
	// Teardown of one leaves the other as it was, and working.
	before := drivertest.NetworkObjects(t, otherHost.name, otherHost.prefix)
	if err := hosts[0].h.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	if after := drivertest.NetworkObjects(t, otherHost.name, otherHost.prefix); !slices.Equal(after, before) {
		t.Errorf("after %s's Teardown, %s's objects changed:\n%s\nwant:\n%s", testName, otherHost.name, strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	if got := probeIn(t, hosts[1].sb, public.Target())[public.Target()]; got != "ok" {
		t.Errorf("after %s's Teardown: %s → %s = %s, want ok", testName, hosts[1].sb.ID, public.Target(), got)
	}
}

// watchRefusals runs h.WatchRefusals until t ends, and wants it to
// return nil then.
func watchRefusals(t *testing.T, h *network.Host) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.WatchRefusals(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchRefusals() = %v, want nil once its context ended", err)
		}
	})
}

// flushAndRepair deletes x's jumps and empties its forward chain, as a
// firewall reload would, and has x's Repair put them back.
func flushAndRepair(t *testing.T, x *apartHost) error {
	chain := strings.ToUpper(x.names.name)
	for _, hk := range [][3]string{{"filter", "INPUT", "-INPUT"}, {"filter", "FORWARD", "-FORWARD"}, {"nat", "POSTROUTING", "-POSTROUTING"}, {"nat", "PREROUTING", "-PREROUTING"}} {
		run(t, "iptables", "-w", "-t", hk[0], "-D", hk[1], "-j", chain+hk[2])
	}
	run(t, "iptables", "-w", "-F", chain+"-FORWARD")
	repaired, err := x.h.Repair(t.Context())
	if err == nil && !repaired {
		t.Errorf("%s's Repair() after a flush = false, want true", x.names.name)
	}
	return err
}

// recoverHost does what the driver's Recover does with a Host of a
// restarted daemon: it detaches every attachment the Host lists but the
// driver does not know (here, one left by an interrupted start), and sets
// the host up again.
func recoverHost(t *testing.T, x *apartHost) error {
	ctx := t.Context()
	if _, err := x.h.Attach(ctx, "apartorphan", network.Limits{}, network.Egress{}); err != nil {
		return err
	}
	restarted := openNamedHost(t, x.names, x.dir, nil, x.upstream)
	ids, err := restarted.List()
	if err != nil {
		return err
	}
	if !slices.Equal(ids, []string{x.sb.ID, "apartorphan"}) {
		t.Errorf("%s's List() = %q, want its own two attachments", x.names.name, ids)
	}
	for _, id := range ids {
		if id != x.sb.ID {
			if err := restarted.Detach(ctx, id); err != nil {
				return err
			}
		}
	}
	if _, err := net.InterfaceByName(x.h.Link("apartorphan")); err == nil {
		t.Errorf("%s's orphan still has its link after recovery", x.names.name)
	}
	return restarted.Setup(ctx)
}
