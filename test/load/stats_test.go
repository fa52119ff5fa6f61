package load_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/testutil/benchstat"
)

// recorder collects the latency and outcome of one kind of call of a
// scenario. It is safe for concurrent use.
type recorder struct {
	name string

	mu    sync.Mutex
	lat   []time.Duration // of the calls that succeeded
	ended []time.Time     // when each of lat's calls ended
	calls int
	errs  map[string]int    // by codeOf
	first map[string]string // the first error of each code
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, errs: map[string]int{}, first: map[string]string{}}
}

// time runs f, records its latency and outcome, and returns its error.
func (r *recorder) time(f func() error) error {
	start := time.Now()
	err := f()
	r.add(time.Since(start), err)
	return err
}

// add records one call that took d and ended with err.
func (r *recorder) add(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if err == nil {
		r.lat = append(r.lat, d)
		r.ended = append(r.ended, time.Now())
		return
	}
	code := codeOf(err)
	r.errs[code]++
	if _, ok := r.first[code]; !ok {
		r.first[code] = err.Error()
	}
}

// p returns the p-th percentile of the successful calls' latencies, in ms.
func (r *recorder) p(p float64) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return benchstat.Percentile(r.lat, p)
}

// failed is how many calls ended in an error.
func (r *recorder) failed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls - len(r.lat)
}

// summary is one line: calls, p50/p99/max in ms, the rate of successful
// calls over elapsed (when not zero), and the errors by code.
func (r *recorder) summary(elapsed time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf("%s: %d calls, %d ok, p50 %.1f ms, p99 %.1f ms, max %.1f ms", r.name, r.calls, len(r.lat),
		benchstat.Percentile(r.lat, 0.5), benchstat.Percentile(r.lat, 0.99), benchstat.Percentile(r.lat, 1))
	if elapsed > 0 {
		s += fmt.Sprintf(", %.2f/s over %.1f s", float64(len(r.lat))/elapsed.Seconds(), elapsed.Seconds())
	}
	if len(r.errs) == 0 {
		return s + ", no errors"
	}
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(r.errs)) {
		parts = append(parts, fmt.Sprintf("%s=%d", code, r.errs[code]))
	}
	return s + ", errors " + strings.Join(parts, " ")
}

// report logs the summary, the slowest calls when the tail is long, and
// the first error of each code.
func (r *recorder) report(t *testing.T, elapsed time.Duration) {
	t.Helper()
	t.Log(r.summary(elapsed))
	if s := r.slowest(5); s != "" {
		t.Logf("  slowest of %s: %s", r.name, s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, code := range slices.Sorted(maps.Keys(r.first)) {
		t.Logf("  first %s error of %s: %s", code, r.name, r.first[code])
	}
}

// slowest describes the n slowest successful calls (latency, and when each
// began, in seconds from the first call's start) when the p99 is more than
// twice the p50, or "": whether slow calls come together (a stall of the
// whole host or daemon) or spread out is the first question a long tail
// asks.
func (r *recorder) slowest(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lat) < 2 || benchstat.Percentile(r.lat, 0.99) <= 2*benchstat.Percentile(r.lat, 0.5) {
		return ""
	}
	idx := make([]int, len(r.lat))
	first := r.ended[0].Add(-r.lat[0])
	for i := range idx {
		idx[i] = i
		if b := r.ended[i].Add(-r.lat[i]); b.Before(first) {
			first = b
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return int(r.lat[b] - r.lat[a]) })
	var parts []string
	for _, i := range idx[:min(n, len(idx))] {
		began := r.ended[i].Add(-r.lat[i]).Sub(first)
		parts = append(parts, fmt.Sprintf("%.0f ms at %.1f s", float64(r.lat[i])/float64(time.Millisecond), began.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// wantNoErrors fails t for every error r recorded: the calls of the
// scenarios other than the soak have no reason to fail.
func (r *recorder) wantNoErrors(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, code := range slices.Sorted(maps.Keys(r.errs)) {
		t.Errorf("%s: %d calls failed with %s, the first: %s", r.name, r.errs[code], code, r.first[code])
	}
}

// wantCoded fails t for the errors without a code and the calls that got
// no answer within their bound.
func (r *recorder) wantCoded(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, code := range []string{"uncoded", "no_answer"} {
		if n := r.errs[code]; n > 0 {
			t.Errorf("%s: %d calls failed with %s, the first: %s", r.name, n, code, r.first[code])
		}
	}
}
