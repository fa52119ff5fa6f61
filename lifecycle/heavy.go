package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Admission of heavy work: the node calls that load the machine's cores and
// disk for a while (a sandbox's start, for a create, a fork, a wake or a
// restore; a memory checkpoint; an image pull or import) each hold one of
// Options.MaxConcurrentStarts slots while they run. Run all at once, a
// burst of starts thrashes the cores and every start takes the time of
// all of them; queued, each runs at the machine's pace.
//
// Waiters are served FIFO within a tenant and round-robin across tenants,
// so one tenant's hundred queued creates delay another tenant's single
// create by at most one turn of each tenant waiting. The warm pool's
// refills wait in a background lane served only from spare capacity: when
// a slot is free and no foreground call waits.
//
// A call whose context ends while it waits leaves the queue at once with
// unavailable, saying where it stood and when a retry may get through (see
// refusal). A foreground call waits at most maxWait.
//
// Lock order: a slot is the last thing a call takes. A call takes its
// sandbox's name lock (and, for an image call, the image store's
// collection lock) before it queues, and no code that holds a slot waits
// for a lock or a second slot, so the queue cannot deadlock with them.
// Calls on the same sandbox wait behind a queued start as they waited
// behind the start itself; no other sandbox's calls do.

// job is a call that asks heavy for a slot.
type job struct {
	// tenant is whose turn the job takes (the round-robin's key).
	tenant string
	// background marks the warm pool's work: served only from spare
	// capacity.
	background bool
	// transfer marks an image pull or import, which holds its slot for
	// its download or upload too (the node does both in one call): such
	// jobs hold at most limit-1 slots (one when limit is 1), so that a
	// slow registry or client never holds every slot.
	transfer bool
}

// defaultRun is the run time assumed before any job has run, for
// retry_after.
const defaultRun = time.Second

// heavy is the queue of heavy work (see above); the command queue is one
// too (see Processes.commandSlot). It is safe for concurrent use; the zero
// value is not: use newHeavy.
type heavy struct {
	limit int
	// what names the work its slots are for, in its refusals.
	what string
	// maxWait bounds a foreground job's wait (0: only its context does).
	maxWait time.Duration
	now     func() time.Time

	mu                 sync.Mutex
	running, transfers int
	waiting            int // foreground waiters
	ring               []*tenantQueue
	next               int // index in ring of the tenant served next
	tenants            map[string]*tenantQueue
	background         []*waiter
	mean               time.Duration // moving average of slot holding times
}

// tenantQueue is one tenant's foreground waiters, oldest first.
type tenantQueue struct {
	tenant  string
	waiters []*waiter
}

// waiter is a job waiting for its slot; ready is closed once granted is
// set (under heavy.mu), at when.
type waiter struct {
	job     job
	granted bool
	at      time.Time
	ready   chan struct{}
}

// newHeavy returns a queue of limit slots (at least one) for what, whose
// foreground jobs wait at most maxWait, with the clock now.
func newHeavy(limit int, what string, maxWait time.Duration, now func() time.Time) *heavy {
	limit = max(limit, 1)
	return &heavy{limit: limit, what: what, maxWait: maxWait, now: now, tenants: map[string]*tenantQueue{}}
}

// acquire waits for j's slot and returns its release, which the caller
// must call once the work is done (calling it again does nothing). When
// ctx ends first (or a foreground job has waited maxWait), the job leaves
// the queue and acquire returns unavailable (see refusal); a job granted
// meanwhile keeps its slot.
func (h *heavy) acquire(ctx context.Context, j job) (release func(), err error) {
	if !j.background && h.maxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.maxWait)
		defer cancel()
	}
	w := &waiter{job: j, ready: make(chan struct{})}
	h.mu.Lock()
	h.enqueue(w)
	h.dispatch()
	h.mu.Unlock()
	select {
	case <-w.ready:
		return h.releaser(w), nil
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.granted {
		return h.releaser(w), nil
	}
	pos, n := h.position(w)
	h.remove(w)
	h.dispatch() // the background lane may run now
	return nil, h.refusal(ctx.Err(), pos, n)
}

// releaser is the release of w's slot: it records how long w held it and
// hands it on.
func (h *heavy) releaser(w *waiter) func() {
	return sync.OnceFunc(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.running--
		if w.job.transfer {
			h.transfers--
		}
		d := max(h.now().Sub(w.at), 0)
		if h.mean == 0 {
			h.mean = d
		} else {
			h.mean += (d - h.mean) / 8
		}
		h.dispatch()
	})
}

// enqueue puts w at the end of its lane and, in the foreground, of its
// tenant's queue; a tenant with no waiter yet joins the ring last.
func (h *heavy) enqueue(w *waiter) {
	if w.job.background {
		h.background = append(h.background, w)
		return
	}
	q := h.tenants[w.job.tenant]
	if q == nil {
		q = &tenantQueue{tenant: w.job.tenant}
		h.tenants[q.tenant] = q
		h.ring = append(h.ring, q)
	}
	q.waiters = append(q.waiters, w)
	h.waiting++
}

// dispatch grants free slots: to the foreground's next waiters in turn,
// then, when no foreground job waits, to the background lane's oldest.
func (h *heavy) dispatch() {
	for h.running < h.limit {
		w := h.nextForeground()
		if w == nil && h.waiting == 0 && len(h.background) > 0 {
			w, h.background = h.background[0], h.background[1:]
		}
		if w == nil {
			return
		}
		h.running++
		if w.job.transfer {
			h.transfers++
		}
		w.granted, w.at = true, h.now()
		close(w.ready)
	}
}

// nextForeground takes the oldest waiter of the next tenant in turn whose
// oldest may run (a transfer may not while transfers hold their share),
// or returns nil.
func (h *heavy) nextForeground() *waiter {
	for i := range len(h.ring) {
		at := (h.next + i) % len(h.ring)
		q := h.ring[at]
		if q.waiters[0].job.transfer && h.transfers >= max(h.limit-1, 1) {
			continue
		}
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		h.waiting--
		h.next = at + 1
		if len(q.waiters) == 0 {
			h.drop(at)
		}
		if len(h.ring) > 0 {
			h.next %= len(h.ring)
		}
		return w
	}
	return nil
}

// drop removes the ring's tenant at index at, whose queue is empty,
// keeping next on the same tenant.
func (h *heavy) drop(at int) {
	delete(h.tenants, h.ring[at].tenant)
	h.ring = slices.Delete(h.ring, at, at+1)
	if at < h.next {
		h.next--
	}
	if h.next >= len(h.ring) {
		h.next = 0
	}
}

// remove takes w, not granted, out of its queue.
func (h *heavy) remove(w *waiter) {
	if w.job.background {
		h.background = slices.DeleteFunc(h.background, func(o *waiter) bool { return o == w })
		return
	}
	q := h.tenants[w.job.tenant]
	q.waiters = slices.DeleteFunc(q.waiters, func(o *waiter) bool { return o == w })
	h.waiting--
	if len(q.waiters) == 0 {
		h.drop(slices.Index(h.ring, q))
	}
}

// position returns w's place in the order the waiters would be served in
// (from 1) and how many wait. A foreground waiter that is k-th in its
// tenant's queue goes in the ring's k-th turn, after every tenant's first
// k waiters and, in that turn, after the tenants before its own.
func (h *heavy) position(w *waiter) (pos, n int) {
	n = h.waiting + len(h.background)
	if w.job.background {
		return h.waiting + slices.Index(h.background, w) + 1, n
	}
	q := h.tenants[w.job.tenant]
	k := slices.Index(q.waiters, w)
	turn := func(i int) int { return (i - h.next + len(h.ring)) % len(h.ring) }
	mine := turn(slices.Index(h.ring, q))
	pos = 1
	for i, o := range h.ring {
		pos += min(len(o.waiters), k)
		if o != q && len(o.waiters) > k && turn(i) < mine {
			pos++
		}
	}
	return pos, n
}

// refusal is the unavailable of a job that left the queue at position pos
// of n because its context ended with cause: retry_after_seconds is when
// the jobs ahead of it should be done at the recent pace, rounded up, at
// least 1.
func (h *heavy) refusal(cause error, pos, n int) error {
	mean := h.mean
	if mean == 0 {
		mean = defaultRun
	}
	retry := int64((time.Duration(pos)*mean/time.Duration(h.limit) + time.Second - 1) / time.Second)
	retry = max(retry, 1)
	why := "its deadline passed"
	if errors.Is(cause, context.Canceled) {
		why = "it was cancelled"
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "the daemon is busy: this call waited for one of its %d slots for %s, and %s at position %d of %d in the queue",
		h.limit, h.what, why, pos, n).
		WithHint("retry in about %d s, or give the call a longer deadline", retry).
		With("position", pos).With("queue_length", n).With("limit", h.limit).With("retry_after_seconds", retry)
}
