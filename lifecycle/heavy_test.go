package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// runs records the jobs a test's heavy queue granted, in order, and how
// many held a slot at once.
type runs struct {
	mu            sync.Mutex
	order         []string
	holding, most int
}

// run waits for j's slot in h as label, holds it for hold (synctest's
// clock), and records it; err is what acquire returned.
func (r *runs) run(ctx context.Context, h *heavy, j job, label string, hold time.Duration) (err error) {
	release, err := h.acquire(ctx, j)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.order = append(r.order, label)
	r.holding++
	r.most = max(r.most, r.holding)
	r.mu.Unlock()
	time.Sleep(hold)
	r.mu.Lock()
	r.holding--
	r.mu.Unlock()
	release()
	release() // a second release gives back nothing
	return nil
}

// goRun runs r.run in a goroutine and waits until it is queued or
// running, so that the calls queue in the order the test makes them.
func (r *runs) goRun(wg *sync.WaitGroup, ctx context.Context, h *heavy, j job, label string, hold time.Duration) {
	wg.Go(func() {
		if err := r.run(ctx, h, j, label, hold); err != nil {
			panic(fmt.Sprintf("%s: %v", label, err))
		}
	})
	synctest.Wait()
}

// hold takes a slot of h at once, for the test to release.
func hold(t *testing.T, h *heavy, tenant string) func() {
	t.Helper()
	release, err := h.acquire(t.Context(), job{tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// wantIdle checks that h holds no slot and no waiter.
func wantIdle(t *testing.T, h *heavy) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running != 0 || h.transfers != 0 || h.waiting != 0 || len(h.ring) != 0 || len(h.tenants) != 0 || len(h.background) != 0 {
		t.Errorf("idle queue: running %d, transfers %d, waiting %d, ring %d, tenants %d, background %d; want all 0",
			h.running, h.transfers, h.waiting, len(h.ring), len(h.tenants), len(h.background))
	}
}

func TestHeavyFairAcrossTenantsFIFOWithin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHeavy(1, "heavy work", time.Minute, time.Now)
		var r runs
		var wg sync.WaitGroup
		release := hold(t, h, "x")
		for i := range 5 {
			r.goRun(&wg, t.Context(), h, job{tenant: "a"}, fmt.Sprintf("a%d", i), time.Second)
		}
		r.goRun(&wg, t.Context(), h, job{tenant: "b"}, "b0", time.Second)
		r.goRun(&wg, t.Context(), h, job{tenant: "c"}, "c0", time.Second)
		r.goRun(&wg, t.Context(), h, job{tenant: "b"}, "b1", time.Second)
		release()
		wg.Wait()
		// Each tenant's oldest in turn: b's and c's creates wait for one
		// of a's each, not for all five.
		want := []string{"a0", "b0", "c0", "a1", "b1", "a2", "a3", "a4"}
		if !slices.Equal(r.order, want) {
			t.Errorf("grant order = %v, want %v", r.order, want)
		}
		wantIdle(t, h)
	})
}

func TestHeavyBound(t *testing.T) {
	for _, limit := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHeavy(limit, "heavy work", time.Minute, time.Now)
				var r runs
				var wg sync.WaitGroup
				start := time.Now()
				for i := range 24 {
					tenant := fmt.Sprint("t", i%3)
					wg.Go(func() {
						if err := r.run(t.Context(), h, job{tenant: tenant}, tenant, time.Second); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				if r.most != limit {
					t.Errorf("most slots held at once = %d, want %d", r.most, limit)
				}
				if got, want := time.Since(start), time.Duration(24/limit)*time.Second; got != want {
					t.Errorf("24 one-second jobs took %v, want %v", got, want)
				}
				wantIdle(t, h)
			})
		})
	}
}

func TestHeavyDeadlineLeavesQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHeavy(1, "heavy work", time.Minute, time.Now)
		var r runs
		var wg sync.WaitGroup
		// One three-second run sets the pace retry_after is told from.
		if err := r.run(t.Context(), h, job{tenant: "a"}, "pace", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		release := hold(t, h, "x")
		for i := range 3 {
			r.goRun(&wg, t.Context(), h, job{tenant: "a"}, fmt.Sprint("a", i), time.Second)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := h.acquire(ctx, job{tenant: "b"})
		if waited := time.Since(start); waited != 5*time.Second {
			t.Errorf("acquire returned after %v, want at its 5s deadline", waited)
		}
		se := wantCode(t, err, sandbox.CodeUnavailable)
		// b's create was second in turn (after a's oldest) of four waiting;
		// at 3s a run with one slot, it may get through in 2×3s.
		for key, want := range map[string]any{"position": 2, "queue_length": 4, "limit": 1, "retry_after_seconds": int64(6)} {
			if se.Details[key] != want {
				t.Errorf("details[%s] = %v, want %v (%v)", key, se.Details[key], want, se)
			}
		}
		if se.Hint == "" {
			t.Errorf("refusal %v has no hint", se)
		}
		// Its place is given up: a's jobs run, and the slot is free after.
		release()
		wg.Wait()
		if want := []string{"pace", "a0", "a1", "a2"}; !slices.Equal(r.order, want) {
			t.Errorf("grant order = %v, want %v", r.order, want)
		}
		wantIdle(t, h)
		hold(t, h, "b")()
		wantIdle(t, h)
	})
}

func TestHeavyCancelAndMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHeavy(1, "heavy work", 10*time.Second, time.Now)
		release := hold(t, h, "x")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() {
			_, err := h.acquire(ctx, job{tenant: "a"})
			done <- err
		}()
		synctest.Wait()
		cancel()
		se := wantCode(t, <-done, sandbox.CodeUnavailable)
		if se.Details["position"] != 1 || se.Details["queue_length"] != 1 {
			t.Errorf("cancelled waiter's details = %v, want position 1 of 1", se.Details)
		}
		// A foreground call with no deadline of its own waits maxWait.
		start := time.Now()
		_, err := h.acquire(t.Context(), job{tenant: "a"})
		wantCode(t, err, sandbox.CodeUnavailable)
		if waited := time.Since(start); waited != 10*time.Second {
			t.Errorf("acquire without a deadline gave up after %v, want maxWait 10s", waited)
		}
		release()
		wantIdle(t, h)
	})
}

func TestHeavyBackgroundOnlyFromSpareCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHeavy(1, "heavy work", 10*time.Second, time.Now)
		var r runs
		var wg sync.WaitGroup
		release := hold(t, h, "x")
		// The background job queues first and waits past maxWait (the
		// foreground's bound), then behind foreground jobs queued after it.
		r.goRun(&wg, t.Context(), h, job{tenant: "system", background: true}, "pool", time.Second)
		time.Sleep(15 * time.Second)
		r.goRun(&wg, t.Context(), h, job{tenant: "a"}, "a0", 0)
		r.goRun(&wg, t.Context(), h, job{tenant: "b"}, "b0", 0)
		release()
		synctest.Wait()
		if want := []string{"a0", "b0", "pool"}; !slices.Equal(r.order, want) {
			t.Errorf("grant order = %v, want %v", r.order, want)
		}
		// It holds its slot like any: a foreground call waits for it.
		start := time.Now()
		hold(t, h, "a")()
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("a call behind the running refill waited %v, want 1s", waited)
		}
		wg.Wait()
		// With nothing waiting, a refill runs at once.
		start = time.Now()
		if err := r.run(t.Context(), h, job{tenant: "system", background: true}, "idle", 0); err != nil || time.Since(start) != 0 {
			t.Errorf("refill on an idle queue: %v after %v, want at once", err, time.Since(start))
		}
		wantIdle(t, h)
	})
}

func TestHeavyTransfersLeaveASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHeavy(2, "heavy work", time.Minute, time.Now)
		var r runs
		var wg sync.WaitGroup
		r.goRun(&wg, t.Context(), h, job{tenant: "a", transfer: true}, "pull1", 10*time.Second)
		r.goRun(&wg, t.Context(), h, job{tenant: "b", transfer: true}, "pull2", 10*time.Second)
		r.goRun(&wg, t.Context(), h, job{tenant: "c"}, "start", time.Second)
		synctest.Wait()
		// The second pull waits for the first; the start takes the slot left.
		if want := []string{"pull1", "start"}; !slices.Equal(r.order, want) {
			t.Errorf("running = %v, want %v", r.order, want)
		}
		wg.Wait()
		if want := []string{"pull1", "start", "pull2"}; !slices.Equal(r.order, want) {
			t.Errorf("grant order = %v, want %v", r.order, want)
		}
		wantIdle(t, h)
	})
}

// wantCode checks that err is a sandbox.Error of code and returns it.
func wantCode(t *testing.T, err error, code sandbox.Code) *sandbox.Error {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	return se
}
