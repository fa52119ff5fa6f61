package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/store"
)

// testConcurrentCreates races creates of contested names against creates of
// unique names and against readers. Every call must succeed or fail with a
// meaningful error: a transient "database is locked" is a failure, since
// callers would have to retry it.
func testConcurrentCreates(t *testing.T, open OpenFunc) {
	const (
		contested  = 8 // names, each created by `contenders` goroutines
		contenders = 8
		unique     = 32 // goroutines creating a name nobody else wants
		readers    = 8
	)
	s := openStore(t, open)
	ctx := t.Context()

	type result struct {
		id  string
		err error
	}
	results := make([][]result, contested)
	for i := range results {
		results[i] = make([]result, contenders)
	}
	uniqueErrs := make([]error, unique)

	start := make(chan struct{})
	var writers, readersWG sync.WaitGroup
	for n := range contested {
		for c := range contenders {
			writers.Go(func() {
				<-start
				id := fmt.Sprintf("sb-race-%d-%d", n, c)
				sb := newSandbox(id, fmt.Sprintf("race-%d", n), "acme", fmt.Sprintf("agent-%d", c), at(time.Duration(c)*time.Millisecond))
				results[n][c] = result{id, s.Sandboxes().Create(ctx, sb)}
			})
		}
	}
	for u := range unique {
		writers.Go(func() {
			<-start
			sb := newSandbox(fmt.Sprintf("sb-solo-%d", u), fmt.Sprintf("solo-%d", u), "acme", "solo", at(time.Duration(u)*time.Millisecond))
			uniqueErrs[u] = s.Sandboxes().Create(ctx, sb)
		})
	}
	done := make(chan struct{})
	for r := range readers {
		readersWG.Go(func() {
			<-start
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.Sandboxes().List(ctx, store.Filter{Tenant: "acme"}); err != nil {
					t.Errorf("reader %d: Sandboxes.List = %v, want nil", r, err)
					return
				}
				name := fmt.Sprintf("race-%d", (r+i)%contested)
				if _, err := s.Sandboxes().Get(ctx, "acme", name); err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Errorf("reader %d: Sandboxes.Get(%q) = %v, want nil or ErrNotFound", r, name, err)
					return
				}
			}
		})
	}
	close(start)
	writers.Wait()
	close(done)
	readersWG.Wait()

	for u, err := range uniqueErrs {
		if err != nil {
			t.Errorf("Sandboxes.Create(solo-%d) = %v, want nil", u, err)
		}
	}
	for n, rs := range results {
		name := fmt.Sprintf("race-%d", n)
		var winners []string
		for _, r := range rs {
			switch {
			case r.err == nil:
				winners = append(winners, r.id)
			case !errors.Is(r.err, store.ErrExists):
				t.Errorf("Sandboxes.Create(%q, id %q) = %v, want nil or ErrExists", name, r.id, r.err)
			}
		}
		if len(winners) != 1 {
			t.Errorf("%d concurrent Sandboxes.Create(%q) calls succeeded (%q), want exactly 1", len(winners), name, winners)
			continue
		}
		if got := mustGet(t, s, "acme", name); got.ID != winners[0] {
			t.Errorf("Sandboxes.Get(%q).ID = %q, want the winner %q", name, got.ID, winners[0])
		}
	}
	list, err := s.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		t.Fatalf("Sandboxes.List = %v", err)
	}
	if len(list) != contested+unique {
		t.Errorf("Sandboxes.List after the race = %d sandboxes, want %d", len(list), contested+unique)
	}
}
