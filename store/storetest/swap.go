package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// testSandboxSwap: Sandboxes.Swap replaces a row only while it has the
// tenant, name, status and node it was read with; a row that changed in
// any of them, or is gone, is left as it is (false, no error); a move onto
// a taken name is ErrExists; rows read as another's are an error.
func testSandboxSwap(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	member := newSandbox("sb-p", "pool-1", "system", "pool", t0)
	member.Status, member.Node = sandbox.StatusRunning, "n1"
	mustCreate(t, s, member)
	taken := newSandbox("sb-t", "taken", "acme", "alice", at(time.Second))
	mustCreate(t, s, taken)

	claim := member
	claim.Name, claim.Tenant, claim.Owner, claim.UpdatedAt = "taken", "acme", "bob", at(time.Minute)
	if ok, err := s.Sandboxes().Swap(ctx, member, claim); !errors.Is(err, store.ErrExists) || ok {
		t.Errorf("Sandboxes.Swap(onto acme's taken) = %v, %v; want false, ErrExists", ok, err)
	}
	for _, stale := range []func(*sandbox.Sandbox){
		func(sb *sandbox.Sandbox) { sb.Tenant = "other" },
		func(sb *sandbox.Sandbox) { sb.Name = "pool-2" },
		func(sb *sandbox.Sandbox) { sb.Status = sandbox.StatusStopped },
		func(sb *sandbox.Sandbox) { sb.Node = "n2" },
	} {
		was := member
		stale(&was)
		claim.Name = "web"
		if ok, err := s.Sandboxes().Swap(ctx, was, claim); ok || err != nil {
			t.Errorf("Sandboxes.Swap(read as %s/%s, %s on %q) = %v, %v; want false, nil", was.Tenant, was.Name, was.Status, was.Node, ok, err)
		}
	}
	checkSandbox(t, "the member after refused swaps", mustGet(t, s, "system", "pool-1"), member)
	if ok, err := s.Sandboxes().Swap(ctx, taken, claim); ok || err == nil {
		t.Errorf("Sandboxes.Swap(a row read as another's) = %v, %v; want an error", ok, err)
	}

	if ok, err := s.Sandboxes().Swap(ctx, member, claim); !ok || err != nil {
		t.Fatalf("Sandboxes.Swap(the member as read) = %v, %v; want true, nil", ok, err)
	}
	checkSandbox(t, "acme's web", mustGet(t, s, "acme", "web"), claim)
	again := member
	again.Name, again.Tenant = "web", "globex"
	if ok, err := s.Sandboxes().Swap(ctx, member, again); ok || err != nil {
		t.Errorf("Sandboxes.Swap(the member, claimed since) = %v, %v; want false, nil", ok, err)
	}
	checkSandbox(t, "acme's web after a second claim", mustGet(t, s, "acme", "web"), claim)
	if err := s.Sandboxes().Delete(ctx, claim.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Sandboxes().Swap(ctx, claim, claim); ok || err != nil {
		t.Errorf("Sandboxes.Swap(a deleted row) = %v, %v; want false, nil", ok, err)
	}
}

// testConcurrentSwaps: of goroutines that swap one row, read once, at the
// same moment, exactly one wins, and the row is the winner's.
func testConcurrentSwaps(t *testing.T, open OpenFunc) {
	const claimants = 8
	s := openStore(t, open)
	ctx := t.Context()
	member := newSandbox("sb-p", "pool-1", "system", "pool", t0)
	member.Status = sandbox.StatusRunning
	mustCreate(t, s, member)
	won := make([]bool, claimants)
	errs := make([]error, claimants)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range claimants {
		wg.Go(func() {
			claim := member
			claim.Name, claim.Tenant = fmt.Sprintf("claim-%d", i), fmt.Sprintf("tenant-%d", i)
			<-start
			won[i], errs[i] = s.Sandboxes().Swap(ctx, member, claim)
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range claimants {
		if errs[i] != nil {
			t.Errorf("claimant %d: Sandboxes.Swap = %v", i, errs[i])
		}
		if won[i] {
			winners++
			got, err := s.Sandboxes().ByID(ctx, member.ID)
			if err != nil || got.Name != fmt.Sprintf("claim-%d", i) || got.Tenant != fmt.Sprintf("tenant-%d", i) {
				t.Errorf("the row after claimant %d won = %+v, %v; want its claim", i, got, err)
			}
		}
	}
	if winners != 1 {
		t.Errorf("%d of %d claimants' swaps won, want exactly 1", winners, claimants)
	}
}

// testSandboxDeleteIf: Sandboxes.DeleteIf removes a row only while it has
// the tenant, name, status and node it was read with, its checkpoints'
// rows with it; a row that changed in any of them, or is gone, is left as
// it is (false, no error).
func testSandboxDeleteIf(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	sb := newSandbox("sb-1", "web", "acme", "alice", t0)
	sb.Status, sb.Node = sandbox.StatusCreating, "cp1"
	mustCreate(t, s, sb)
	bystander := newSandbox("sb-2", "db", "acme", "alice", at(time.Second))
	mustCreate(t, s, bystander)
	if err := s.Checkpoints().Create(ctx, newCheckpoint("cp-1", sb, "", at(time.Minute))); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []func(*sandbox.Sandbox){
		func(sb *sandbox.Sandbox) { sb.Tenant = "other" },
		func(sb *sandbox.Sandbox) { sb.Name = "web-2" },
		func(sb *sandbox.Sandbox) { sb.Status = sandbox.StatusRunning },
		func(sb *sandbox.Sandbox) { sb.Node = "n1" },
		func(sb *sandbox.Sandbox) { sb.ID = bystander.ID },
	} {
		was := sb
		stale(&was)
		if ok, err := s.Sandboxes().DeleteIf(ctx, was); ok || err != nil {
			t.Errorf("Sandboxes.DeleteIf(read as %s %s/%s, %s on %q) = %v, %v; want false, nil", was.ID, was.Tenant, was.Name, was.Status, was.Node, ok, err)
		}
	}
	checkSandbox(t, "the row after refused deletes", mustGet(t, s, "acme", "web"), sb)
	checkSandbox(t, "the bystander after refused deletes", mustGet(t, s, "acme", "db"), bystander)

	if ok, err := s.Sandboxes().DeleteIf(ctx, sb); !ok || err != nil {
		t.Fatalf("Sandboxes.DeleteIf(the row as read) = %v, %v; want true, nil", ok, err)
	}
	if _, err := s.Sandboxes().ByID(ctx, sb.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.ByID(deleted) = %v, want ErrNotFound", err)
	}
	if cps, err := s.Checkpoints().List(ctx, sb.ID); err != nil || len(cps) != 0 {
		t.Errorf("Checkpoints.List(deleted sandbox) = %d rows, %v; want none", len(cps), err)
	}
	if ok, err := s.Sandboxes().DeleteIf(ctx, sb); ok || err != nil {
		t.Errorf("Sandboxes.DeleteIf(deleted) again = %v, %v; want false, nil", ok, err)
	}
	checkSandbox(t, "the bystander", mustGet(t, s, "acme", "db"), bystander)
}

// testSwapOrDelete: a node's swap taking over a creating row and a
// control plane's conditional delete of it, both read once and made at
// the same moment, over many rounds: exactly one wins each time, and the
// row is there exactly when the swap won.
func testSwapOrDelete(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	for round := range 20 {
		sb := newSandbox(fmt.Sprintf("sb-%d", round), fmt.Sprintf("web-%d", round), "acme", "alice", at(time.Duration(round)*time.Second))
		sb.Status, sb.Node = sandbox.StatusCreating, "cp1"
		mustCreate(t, s, sb)
		taken := sb
		taken.Node = "n1"
		var swapped, deleted bool
		var serr, derr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; swapped, serr = s.Sandboxes().Swap(ctx, sb, taken) })
		wg.Go(func() { <-start; deleted, derr = s.Sandboxes().DeleteIf(ctx, sb) })
		close(start)
		wg.Wait()
		if serr != nil || derr != nil || swapped == deleted {
			t.Fatalf("round %d: Swap = %v, %v; DeleteIf = %v, %v; want exactly one true", round, swapped, serr, deleted, derr)
		}
		got, err := s.Sandboxes().ByID(ctx, sb.ID)
		if swapped && (err != nil || got.Node != "n1") || deleted && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("round %d (swap won: %v): the row = %q on %q, %v", round, swapped, got.ID, got.Node, err)
		}
	}
}
