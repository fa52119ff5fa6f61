package load_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// burn is what each loaded neighbour runs: four CPU-bound processes.
const burn = `for i in 1 2 3 4; do (while :; do :; done) & done; wait`

// neighbourOnset is how long TestNeighbour probes apart after starting
// the neighbours' loads; probeGap is the pause between two probes, which
// sample the exec round trip without being a CPU load themselves.
const (
	neighbourOnset = 5 * time.Second
	probeGap       = 20 * time.Millisecond
)

// probe measures an exec of `true` in one sandbox, n times probeGap
// apart: through the Go client, or through the CLI (`hearth exec NAME --
// true`, a process of the host per call), which only the test's own
// daemon's binary can do.
type probe struct {
	ctx  context.Context
	tg   *target
	c    *client.Client
	name string
	n    int
}

// measure records n probes through the Go client in rec.
func (p probe) measure(rec *recorder) { p.measureFor(rec, 0) }

// measureFor records probes through the Go client in rec for d, or n of
// them when d is 0.
func (p probe) measureFor(rec *recorder, d time.Duration) {
	p.each(rec, d, func() error {
		return bounded(p.ctx, func(ctx context.Context) error { return execTrue(ctx, p.c, p.name) })
	})
}

// measureCLI records n probes through the CLI in rec (none when the
// daemon is not the test's own).
func (p probe) measureCLI(rec *recorder) {
	if p.tg.d != nil {
		p.each(rec, 0, func() error { return cliTrue(p.tg.d, p.name) })
	}
}

// each times call in rec, probeGap apart, for d, or n times when d is 0.
func (p probe) each(rec *recorder, d time.Duration, call func() error) {
	end := time.Now().Add(d)
	for i := 0; d > 0 && time.Now().Before(end) || d == 0 && i < p.n; i++ {
		rec.time(call)
		time.Sleep(probeGap)
	}
}

// TestNeighbour is scenario c: a probe exec of `true` in one sandbox,
// measured quiet, then while K other sandboxes each run four CPU-bound
// processes, through the Go client and through the CLI. The neighbours
// must keep running through the loaded measurement and must load the
// host's CPUs. Its baselines (see neighbourBaselines) are the same probe
// beside as much CPU-bound work of the lowest precedence without hearth:
// host processes, and sandboxes of the runtime alone.
func TestNeighbour(t *testing.T) {
	sz := loadSizes(t)
	tg := newTarget(t)
	ctx := ctxFor(t, 30*time.Minute)
	names, _, _ := createAll(t, ctx, tg, "n-%d", sz.neighbours+1, 4)
	loaded := names[1:]
	p := probe{ctx: ctx, tg: tg, c: tg.client(""), name: names[0], n: sz.probes}
	p.measure(newRecorder("warm-up")) // the first execs of a sandbox pay for its caches
	quiet, quietCLI := newRecorder("probe quiet"), newRecorder("probe quiet, through the CLI")
	quietCPU := cpuBusy()
	p.measure(quiet)
	quietBusy := quietCPU()
	p.measureCLI(quietCLI)

	stop := burnIn(ctx, p.c, loaded)
	// The first seconds, while the neighbours start their loops and
	// before the driver has demoted them (quiet neighbours: a second of
	// saturation), are probed and reported apart: the goal is the probe
	// beside neighbours that keep burning.
	onset := newRecorder(fmt.Sprintf("probe while %d neighbours start burning (first %s)", len(loaded), neighbourOnset))
	p.measureFor(onset, neighbourOnset)
	loadedRec := newRecorder(fmt.Sprintf("probe beside %d loaded sandboxes", len(loaded)))
	loadedCLI := newRecorder(fmt.Sprintf("probe beside %d loaded sandboxes, through the CLI", len(loaded)))
	loadedCPU := cpusBusy()
	p.measure(loadedRec)
	loadedBusy, loadedEach := loadedCPU()
	p.measureCLI(loadedCLI)
	stopped := time.Now()
	for i, ended := range stop() {
		if ended.at.Before(stopped) {
			t.Errorf("neighbour %s stopped burning before the loaded probes ended: %v", loaded[i], ended.err)
		}
	}
	for _, rec := range []*recorder{quiet, onset, loadedRec, quietCLI, loadedCLI} {
		rec.report(t, 0)
		rec.wantNoErrors(t)
	}
	// The neighbours are loaded if they saturate the CPUs they may use:
	// all but the one the daemon reserves (--reserved-cpus 1, its
	// default) while the probe calls, on a host of two or more.
	if len(loadedEach) == 0 {
		t.Error("the host's CPU time could not be read")
	} else if busiest := loadedEach[:max(1, len(loadedEach)-1)]; slices.Min(busiest) < 0.8 {
		t.Errorf("the host's CPUs were %s busy beside the loaded neighbours; want all but one of them loaded (>= 80%%)", percents(loadedEach))
	}
	t.Logf("load: neighbour: K=%d: probe quiet p50 %.1f ms, p99 %.1f ms (CPU %.0f%%); loaded p50 %.1f ms, p99 %.1f ms (CPU %.0f%%: %s); ratio p50 %.1fx, p99 %.1fx; onset p50 %.1f ms, max %.1f ms",
		len(loaded), quiet.p(0.5), quiet.p(0.99), 100*quietBusy, loadedRec.p(0.5), loadedRec.p(0.99), 100*loadedBusy, percents(loadedEach),
		loadedRec.p(0.5)/quiet.p(0.5), loadedRec.p(0.99)/quiet.p(0.99), onset.p(0.5), onset.p(1))
	if tg.d == nil {
		return // another host's daemon: no CLI, and this host's processes are no baseline
	}
	t.Logf("load: neighbour through the CLI: K=%d: probe quiet p50 %.1f ms, p99 %.1f ms; loaded p50 %.1f ms, p99 %.1f ms; ratio p50 %.1fx, p99 %.1fx",
		len(loaded), quietCLI.p(0.5), quietCLI.p(0.99), loadedCLI.p(0.5), loadedCLI.p(0.99),
		loadedCLI.p(0.5)/quietCLI.p(0.5), loadedCLI.p(0.99)/quietCLI.p(0.99))
	neighbourBaselines(t, p, tg.d.Runtime, len(loaded), quiet, quietCLI)
}

// burnEnd is when a neighbour's load ended, and the error its exec
// returned.
type burnEnd struct {
	at  time.Time
	err error
}

// burnIn runs burn in each of the sandboxes names until the returned
// stop is called, which returns when and how each load ended.
func burnIn(ctx context.Context, c *client.Client, names []string) (stop func() []burnEnd) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ends := make([]burnEnd, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := sandbox.ExecRequest{Shell: burn, Timeout: sandbox.Duration(20 * time.Minute), Grace: sandbox.Duration(time.Second)}
			_, ends[i].err = c.Exec(ctx, name, req, nil, nil, nil)
			ends[i].at = time.Now()
		}()
	}
	return func() []burnEnd {
		cancel()
		wg.Wait()
		return ends
	}
}

// percents writes shares (0–1) as "96%/41%".
func percents(shares []float64) string {
	parts := make([]string, len(shares))
	for i, v := range shares {
		parts[i] = fmt.Sprintf("%.0f%%", 100*v)
	}
	return strings.Join(parts, "/")
}
