package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/store"
)

// testRates: no state is the zero Rate; SetRate round-trips every field
// and replaces; identities are apart by tenant and agent.
func testRates(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	a := s.Admissions()
	if r, err := a.Rate(ctx, "acme", "bot"); err != nil || !reflect.DeepEqual(r, policy.Rate{}) {
		t.Fatalf("Rate of an identity with none = %+v, %v; want the zero Rate", r, err)
	}
	want := policy.Rate{Recent: []time.Time{t0, at(time.Second)}, OpenUntil: at(time.Minute), HalfOpenSince: at(2 * time.Minute), AlarmedAt: at(3 * time.Second)}
	if err := a.SetRate(ctx, "acme", "bot", want); err != nil {
		t.Fatal(err)
	}
	if err := a.SetRate(ctx, "globex", "bot", policy.Rate{AlarmedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetRate(ctx, "acme", "", policy.Rate{Recent: []time.Time{t0}}); err != nil {
		t.Fatalf("SetRate for a tenant admin (no agent) = %v", err)
	}
	checkRate(t, s, "acme", "bot", want)
	checkRate(t, s, "globex", "bot", policy.Rate{AlarmedAt: t0})
	checkRate(t, s, "acme", "", policy.Rate{Recent: []time.Time{t0}})
	if err := a.SetRate(ctx, "acme", "bot", policy.Rate{}); err != nil {
		t.Fatal(err)
	}
	checkRate(t, s, "acme", "bot", policy.Rate{})
	if err := a.SetRate(ctx, "", "bot", want); err == nil {
		t.Error("SetRate with an empty tenant = nil, want an error")
	}
}

// checkRate fails t unless tenant's agent's stored rate is want, time by
// time.
func checkRate(t *testing.T, s store.Store, tenant, agent string, want policy.Rate) {
	t.Helper()
	got, err := s.Admissions().Rate(t.Context(), tenant, agent)
	if err != nil {
		t.Fatalf("Rate(%s/%s) = %v", tenant, agent, err)
	}
	same := len(got.Recent) == len(want.Recent) && got.OpenUntil.Equal(want.OpenUntil) &&
		got.HalfOpenSince.Equal(want.HalfOpenSince) && got.AlarmedAt.Equal(want.AlarmedAt)
	for i := 0; same && i < len(want.Recent); i++ {
		same = got.Recent[i].Equal(want.Recent[i]) && got.Recent[i].Location() == time.UTC
	}
	if !same || (!got.OpenUntil.IsZero() && got.OpenUntil.Location() != time.UTC) {
		t.Errorf("Rate(%s/%s) = %+v, want %+v (in UTC)", tenant, agent, got, want)
	}
}

// testLock: a tenant's lock excludes a second Lock of that tenant until
// unlocked (a waiter gets it then), not another tenant's; a wait ends
// with ctx; unlock twice is harmless.
func testLock(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	a := s.Admissions()
	if _, err := a.Lock(ctx, ""); err == nil {
		t.Error("Lock of an empty tenant = nil, want an error")
	}
	unlock, err := a.Lock(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if u, err := a.Lock(short, "acme"); !errors.Is(err, context.DeadlineExceeded) {
		if u != nil {
			u()
		}
		t.Fatalf("Lock of a locked tenant until a deadline = %v, want context.DeadlineExceeded", err)
	}
	cancel()
	other, err := a.Lock(ctx, "globex")
	if err != nil {
		t.Fatalf("Lock of another tenant while acme is locked = %v", err)
	}
	other()
	got := make(chan error, 1)
	var second func()
	go func() {
		var err error
		second, err = a.Lock(ctx, "acme")
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second Lock of acme returned (%v) while the first held it", err)
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting Lock = %v after unlock", err)
		}
		second()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Lock did not get acme within 10s of unlock")
	}
}

// testLockExcludes: many goroutines taking one tenant's lock never hold
// it two at once.
func testLockExcludes(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	var inside, most, mu = 0, 0, sync.Mutex{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				unlock, err := s.Admissions().Lock(t.Context(), "acme")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
				unlock()
			}
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Fatalf("%d goroutines held acme's lock at once, want 1", most)
	}
}

// testNodes: heartbeats create and update a node by the store's clock,
// List orders by name, Delete removes.
func testNodes(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	n := s.Nodes()
	if _, err := n.Heartbeat(ctx, store.Node{}); err == nil {
		t.Error("Heartbeat of a node without a name = nil, want an error")
	}
	before, err := n.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := store.Node{Name: "b", Address: "127.0.0.1:7001", Version: "v1", Instance: "i1", StartedAt: t0, NodeTime: at(time.Second), Credential: "c1"}
	got, err := n.Heartbeat(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := n.Now(ctx)
	if got.Name != "b" || got.Address != b.Address || got.Version != "v1" || got.Instance != "i1" || !got.StartedAt.Equal(t0) || !got.NodeTime.Equal(b.NodeTime) || got.Credential != "c1" ||
		got.HeartbeatAt.Before(before.Truncate(time.Microsecond)) || got.HeartbeatAt.After(after) || got.HeartbeatAt.Location() != time.UTC {
		t.Errorf("Heartbeat = %+v; want %+v with HeartbeatAt in [%s, %s] UTC", got, b, before, after)
	}
	if _, err := n.Heartbeat(ctx, store.Node{Name: "a", StartedAt: t0, NodeTime: t0}); err != nil {
		t.Fatal(err)
	}
	b.Address, b.Version, b.Credential, b.PreviousCredential = "127.0.0.1:7002", "v2", "c2", "c1"
	again, err := n.Heartbeat(ctx, b)
	if err != nil || again.Address != b.Address || again.Version != "v2" || again.HeartbeatAt.Before(got.HeartbeatAt) ||
		again.Credential != "c2" || again.PreviousCredential != "c1" {
		t.Errorf("second Heartbeat = %+v, %v; want the new address and version, not an older beat than %s", again, err, got.HeartbeatAt)
	}
	if one, err := n.Get(ctx, "b"); err != nil || !one.HeartbeatAt.Equal(again.HeartbeatAt) || one.Address != b.Address {
		t.Errorf("Get(b) = %+v, %v; want %+v", one, err, again)
	}
	all, err := n.List(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "a" || all[1].Name != "b" {
		t.Errorf("List = %+v, %v; want a, b", all, err)
	}
	if err := n.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Get(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of a deleted node = %v, want ErrNotFound", err)
	}
	if err := n.Delete(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of a missing node = %v, want ErrNotFound", err)
	}
}

// testLeases: one holder at a time; the holder renews; a lapsed or
// released lease goes to another; a non-holder's release changes nothing.
func testLeases(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	l := s.Leases()
	for _, bad := range []struct {
		name, holder string
		ttl          time.Duration
	}{{"", "a", time.Second}, {"loops", "", time.Second}, {"loops", "a", 0}} {
		if _, _, err := l.Acquire(ctx, bad.name, bad.holder, bad.ttl); err == nil {
			t.Errorf("Acquire(%q, %q, %s) = nil error, want one", bad.name, bad.holder, bad.ttl)
		}
	}
	if _, err := l.Get(ctx, "loops"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of a lease never taken = %v, want ErrNotFound", err)
	}
	now, _ := s.Nodes().Now(ctx)
	got, ok, err := l.Acquire(ctx, "loops", "a", time.Hour)
	if err != nil || !ok || got.Holder != "a" || got.Until.Before(now.Add(time.Hour-time.Second)) {
		t.Fatalf("Acquire of a free lease = %+v, %v, %v; want a's for an hour", got, ok, err)
	}
	cur, ok, err := l.Acquire(ctx, "loops", "b", time.Hour)
	if err != nil || ok || cur.Holder != "a" || !cur.Until.Equal(got.Until) {
		t.Errorf("Acquire of a's lease by b = %+v, %v, %v; want a's lease unchanged and false", cur, ok, err)
	}
	if renewed, ok, err := l.Acquire(ctx, "loops", "a", 2*time.Hour); err != nil || !ok || !renewed.Until.After(got.Until) {
		t.Errorf("renewal by a = %+v, %v, %v; want a later Until than %s", renewed, ok, err, got.Until)
	}
	if err := l.Release(ctx, "loops", "b"); err != nil {
		t.Fatal(err)
	}
	if cur, err := l.Get(ctx, "loops"); err != nil || cur.Holder != "a" {
		t.Errorf("after b's Release of a's lease, Get = %+v, %v; want a's", cur, err)
	}
	if err := l.Release(ctx, "loops", "a"); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := l.Acquire(ctx, "loops", "b", 50*time.Millisecond); err != nil || !ok || got.Holder != "b" {
		t.Fatalf("Acquire by b of a released lease = %+v, %v, %v", got, ok, err)
	}
	time.Sleep(100 * time.Millisecond)
	if got, ok, err := l.Acquire(ctx, "loops", "c", time.Hour); err != nil || !ok || got.Holder != "c" {
		t.Errorf("Acquire by c of b's lapsed lease = %+v, %v, %v; want c's", got, ok, err)
	}
}

// testLeaseRace: of many holders racing for one free lease, exactly one
// wins.
func testLeaseRace(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	const n = 8
	wins := make(chan string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := string(rune('a' + i))
			if _, ok, err := s.Leases().Acquire(t.Context(), "race", holder, time.Hour); err != nil {
				t.Error(err)
			} else if ok {
				wins <- holder
			}
		}()
	}
	wg.Wait()
	close(wins)
	var won []string
	for h := range wins {
		won = append(won, h)
	}
	if len(won) != 1 {
		t.Fatalf("holders %v all acquired one lease, want exactly one", won)
	}
	if cur, err := s.Leases().Get(t.Context(), "race"); err != nil || cur.Holder != won[0] {
		t.Fatalf("Get = %+v, %v; want the winner %s", cur, err, won[0])
	}
}

// testNotices: a listener receives its topic's notices in order and
// not another topic's; bad topics and payloads are refused; the channel
// closes when its ctx ends and when the store closes.
func testNotices(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	c := s.Changes()
	tokens, err := c.Listen(ctx, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	policies, err := c.Listen(lctx, "policy")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"tok-1", "", "tok-2"} {
		if err := c.Notify(ctx, "tokens", p); err != nil {
			t.Fatal(err)
		}
	}
	if got := []string{Receive(t, tokens), Receive(t, tokens), Receive(t, tokens)}; !reflect.DeepEqual(got, []string{"tok-1", "", "tok-2"}) {
		t.Errorf("tokens listener got %q, want tok-1, \"\", tok-2 in order", got)
	}
	select {
	case v := <-policies:
		t.Errorf("the policy listener got %q, sent on tokens", v)
	case <-time.After(100 * time.Millisecond):
	}
	big := strings.Repeat("x", store.MaxNoticePayload)
	if err := c.Notify(ctx, "policy", big); err != nil {
		t.Fatalf("Notify of a %d-byte payload = %v", len(big), err)
	}
	if got := Receive(t, policies); got != big {
		t.Errorf("policy listener got %d bytes, want %d", len(got), len(big))
	}
	for _, bad := range [][2]string{{"", "x"}, {"Tokens", "x"}, {"to ken", "x"}, {strings.Repeat("t", 33), "x"}, {"tokens", big + "x"}, {"tokens", "a\x00b"}} {
		if err := c.Notify(ctx, bad[0], bad[1]); err == nil {
			t.Errorf("Notify(%q, %d bytes) = nil, want an error", bad[0], len(bad[1]))
		}
	}
	cancel()
	waitClosed(t, policies, "after its ctx ended")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, tokens, "after Close")
}

// Receive returns the next value of ch, failing t if none comes within
// 10 seconds or ch closes.
func Receive(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatal("the listener's channel closed")
		}
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no notice within 10s")
	}
	return ""
}

// waitClosed fails t unless ch is closed (after draining what is
// queued) within 10 seconds.
func waitClosed(t *testing.T, ch <-chan string, when string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("a listener's channel is open %s", when)
		}
	}
}

// testReopenRates: create-rate state and nodes survive a reopen.
func testReopenRates(t *testing.T, open ReopenFunc) {
	s, reopen := open(t)
	ctx := t.Context()
	want := policy.Rate{Recent: []time.Time{t0}, OpenUntil: at(time.Minute)}
	if err := s.Admissions().SetRate(ctx, "acme", "bot", want); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Nodes().Heartbeat(ctx, store.Node{Name: "n1", StartedAt: t0, NodeTime: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	closeAtEnd(t, s)
	checkRate(t, s, "acme", "bot", want)
	if _, err := s.Nodes().Get(ctx, "n1"); err != nil {
		t.Errorf("node after reopen: %v", err)
	}
}

// testSchema: a fresh store records the latest schema it knows.
func testSchema(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	applied, known, err := s.Schema(t.Context())
	if err != nil || known < 1 || applied != known {
		t.Fatalf("Schema() = %d, %d, %v; want the latest version twice", applied, known, err)
	}
}
