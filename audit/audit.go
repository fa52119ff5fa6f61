// Package audit writes the audit log: one sandbox.AuditEvent per call
// through a door. A Recorder takes events without ever making the call wait
// on the database, and one background goroutine appends them to the store
// in batches: every FlushInterval, or as soon as BatchSize events wait.
//
// The price is durability: an event is in the store at most FlushInterval
// after Record, so a daemon that is killed (SIGKILL, a crash, a power cut)
// loses at most the last 200 ms of events; Close, on an orderly shutdown,
// loses none. When the store falls so far behind that BufferSize events
// wait, further events are dropped, counted and logged, rather than slowing
// every call down.
package audit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Tuning of every Recorder.
const (
	// FlushInterval is the longest an event waits before it is appended.
	FlushInterval = 200 * time.Millisecond
	// BatchSize is the most events appended at once; a full batch is
	// appended without waiting for the interval.
	BatchSize = 256
	// BufferSize is how many events may wait; past it Record drops.
	BufferSize = 10000
	// appendTimeout bounds one append, so that a stuck store costs a batch,
	// not the goroutine.
	appendTimeout = 10 * time.Second
)

// Appender is where a Recorder puts events: store.AuditLog.
type Appender interface {
	Append(ctx context.Context, events []sandbox.AuditEvent) error
}

// Recorder batches audit events in memory and appends them to the store
// from one goroutine. It is safe for concurrent use.
type Recorder struct {
	store Appender
	log   *slog.Logger

	// mu guards closed against Record: once Close has taken it, no event
	// enters events unseen by the final drain.
	mu     sync.RWMutex
	closed bool

	events  chan sandbox.AuditEvent
	flushes chan chan struct{}   // Flush's requests; closed when served
	stop    chan context.Context // Close's request, with its deadline
	done    chan struct{}        // closed when the goroutine has ended
	dropped atomic.Int64         // events dropped since the last report
}

// New returns a Recorder over store and starts its goroutine; Close stops
// it. log receives failed appends and dropped events; nil discards.
func New(store Appender, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{
		store:   store,
		log:     log,
		events:  make(chan sandbox.AuditEvent, BufferSize),
		flushes: make(chan chan struct{}),
		stop:    make(chan context.Context, 1),
		done:    make(chan struct{}),
	}
	go r.run()
	return r
}

// Record queues e for the store and returns at once: it never blocks on
// the store. An event that finds the buffer full, or the Recorder closed,
// is dropped and counted, and the drops are logged.
func (r *Recorder) Record(e sandbox.AuditEvent) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		r.log.Warn("audit event dropped: the recorder is closed", "verb", e.Verb)
		return
	}
	select {
	case r.events <- e:
	default:
		r.dropped.Add(1)
	}
}

// Flush returns once every event recorded before it was called has been
// appended (or its append has failed and been logged), or with ctx's error.
// After Close it returns nil at once.
func (r *Recorder) Flush(ctx context.Context) error {
	served := make(chan struct{})
	select {
	case r.flushes <- served:
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-served:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close appends every event still waiting and stops the goroutine. It
// returns ctx's error if ctx ends first (the last append is then
// abandoned). Events recorded after Close are dropped. Closing twice waits
// for the first Close's drain.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	r.mu.Unlock()
	if first {
		r.stop <- ctx
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the goroutine: it gathers events into a batch and appends the
// batch when it is full, at every tick, on Flush, and on Close.
func (r *Recorder) run() {
	defer close(r.done)
	tick := time.NewTicker(FlushInterval)
	defer tick.Stop()
	batch := make([]sandbox.AuditEvent, 0, BatchSize)
	flush := func(ctx context.Context) {
		r.append(ctx, batch)
		batch = batch[:0]
		r.reportDrops()
	}
	// drain takes every event waiting now into batches.
	drain := func(ctx context.Context) {
		for {
			select {
			case e := <-r.events:
				batch = append(batch, e)
				if len(batch) == BatchSize {
					flush(ctx)
				}
			default:
				flush(ctx)
				return
			}
		}
	}
	for {
		select {
		case e := <-r.events:
			batch = append(batch, e)
			if len(batch) == BatchSize {
				flush(context.Background())
			}
		case <-tick.C:
			flush(context.Background())
		case served := <-r.flushes:
			drain(context.Background())
			close(served)
		case ctx := <-r.stop:
			drain(ctx)
			return
		}
	}
}

// append appends batch, logging a failure: the events are lost.
func (r *Recorder) append(ctx context.Context, batch []sandbox.AuditEvent) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	if err := r.store.Append(ctx, batch); err != nil {
		r.log.Error("audit events lost: append failed", "events", len(batch), "err", err)
	}
}

// reportDrops logs the events dropped since the last report, if any.
func (r *Recorder) reportDrops() {
	if n := r.dropped.Swap(0); n > 0 {
		r.log.Warn("audit events dropped: the buffer was full", "dropped", n, "buffer", BufferSize)
	}
}
