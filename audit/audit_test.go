package audit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/sandbox"
)

// fakeStore records the batches appended to it. While gate is set, every
// append waits for it to close; fail, when set, fails every append.
type fakeStore struct {
	mu      sync.Mutex
	batches [][]sandbox.AuditEvent
	gate    chan struct{}
	fail    error
}

func (f *fakeStore) Append(ctx context.Context, events []sandbox.AuditEvent) error {
	f.mu.Lock()
	gate, fail := f.gate, f.fail
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		return fail
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, append([]sandbox.AuditEvent(nil), events...))
	return nil
}

// verbs returns the verbs of every event appended, in order.
func (f *fakeStore) verbs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.batches {
		for _, e := range b {
			out = append(out, e.Verb)
		}
	}
	return out
}

func (f *fakeStore) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, b := range f.batches {
		out = append(out, len(b))
	}
	return out
}

// logRecords is a slog.Handler that keeps every record, for tests of
// what the Recorder logs.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// sum adds up the int attribute key of the records whose message is msg,
// and counts them.
func (h *logRecords) sum(msg, key string) (total int64, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		n++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				total += a.Value.Int64()
			}
			return true
		})
	}
	return total, n
}

func event(i int) sandbox.AuditEvent {
	return sandbox.AuditEvent{At: time.Now(), Door: sandbox.DoorAPI, Verb: fmt.Sprint(i), Status: 200}
}

// closeRecorder closes r when the test ends.
func closeRecorder(t *testing.T, r *audit.Recorder) {
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
}

// waitFor polls cond until it holds or a few seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRecorderAppendsWithinTheInterval(t *testing.T) {
	st := &fakeStore{}
	r := audit.New(st, nil)
	closeRecorder(t, r)
	start := time.Now()
	for i := range 3 {
		r.Record(event(i))
	}
	waitFor(t, "3 events appended", func() bool { return len(st.verbs()) == 3 })
	if d := time.Since(start); d > audit.FlushInterval+time.Second {
		t.Errorf("events reached the store after %v, want within about %v", d, audit.FlushInterval)
	}
	if got := fmt.Sprint(st.verbs()); got != "[0 1 2]" {
		t.Errorf("appended %s, want [0 1 2] in order", got)
	}
}

func TestRecorderBatches(t *testing.T) {
	st := &fakeStore{}
	r := audit.New(st, nil)
	const n = 2*audit.BatchSize + 7
	for i := range n {
		r.Record(event(i))
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	verbs := st.verbs()
	if len(verbs) != n {
		t.Fatalf("appended %d events, want %d", len(verbs), n)
	}
	for i, v := range verbs {
		if v != fmt.Sprint(i) {
			t.Fatalf("event %d appended as %s: order lost", i, v)
		}
	}
	sizes := st.batchSizes()
	for _, size := range sizes {
		if size > audit.BatchSize {
			t.Errorf("a batch of %d events, over BatchSize %d (batches %v)", size, audit.BatchSize, sizes)
		}
	}
	if len(sizes) >= n {
		t.Errorf("%d batches for %d events: not batched", len(sizes), n)
	}
}

// TestRecorderNeverBlocks fills the buffer while the store is stuck: Record
// returns at once, the overflow is dropped and logged, and what was
// buffered is appended once the store recovers.
func TestRecorderNeverBlocks(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{})}
	logs := &logRecords{}
	r := audit.New(st, slog.New(logs))
	const n = audit.BufferSize + audit.BatchSize + 500
	start := time.Now()
	for i := range n {
		r.Record(event(i))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d Records took %v with the store stuck; Record must not wait on it", n, d)
	}
	close(st.gate)
	if err := r.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	dropped, reports := logs.sum("audit events dropped: the buffer was full", "dropped")
	stored := len(st.verbs())
	if dropped == 0 || reports == 0 {
		t.Errorf("no drop logged with %d events over a buffer of %d", n, audit.BufferSize)
	}
	if int64(stored)+dropped != n {
		t.Errorf("stored %d + dropped %d = %d, want every one of %d events accounted for", stored, dropped, int64(stored)+dropped, n)
	}
	if stored < audit.BufferSize {
		t.Errorf("stored %d events, want at least the %d the buffer holds", stored, audit.BufferSize)
	}
}

func TestRecorderFlush(t *testing.T) {
	st := &fakeStore{}
	r := audit.New(st, nil)
	closeRecorder(t, r)
	r.Record(event(1))
	r.Record(event(2))
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if got := fmt.Sprint(st.verbs()); got != "[1 2]" {
		t.Errorf("after Flush the store holds %s, want [1 2]", got)
	}
}

func TestRecorderCloseFlushes(t *testing.T) {
	st := &fakeStore{}
	logs := &logRecords{}
	r := audit.New(st, slog.New(logs))
	for i := range 5 {
		r.Record(event(i))
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if got := fmt.Sprint(st.verbs()); got != "[0 1 2 3 4]" {
		t.Errorf("after Close the store holds %s, want [0 1 2 3 4]", got)
	}
	r.Record(event(5))
	if _, n := logs.sum("audit event dropped: the recorder is closed", ""); n != 1 {
		t.Errorf("a Record after Close logged %d drops, want 1", n)
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Errorf("Flush after Close = %v, want nil", err)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if got := len(st.verbs()); got != 5 {
		t.Errorf("the store holds %d events after a Record past Close, want 5", got)
	}
}

func TestRecorderCloseDeadline(t *testing.T) {
	st := &fakeStore{gate: make(chan struct{})} // never opens
	r := audit.New(st, nil)
	r.Record(event(1))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with the store stuck = %v, want context.DeadlineExceeded", err)
	}
}

func TestRecorderAppendFailure(t *testing.T) {
	st := &fakeStore{fail: errors.New("disk on fire")}
	logs := &logRecords{}
	r := audit.New(st, slog.New(logs))
	r.Record(event(1))
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if lost, n := logs.sum("audit events lost: append failed", "events"); n != 1 || lost != 1 {
		t.Errorf("a failed append logged %d reports of %d events, want 1 of 1", n, lost)
	}
	// The Recorder carries on once the store does.
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	r.Record(event(2))
	if err := r.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if got := fmt.Sprint(st.verbs()); got != "[2]" {
		t.Errorf("after the store recovered it holds %s, want [2]", got)
	}
}
