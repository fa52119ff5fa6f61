package load_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/sandbox"
)

// callBound bounds one call of the scenarios: a call still unanswered then
// is counted as no_answer.
const callBound = 3 * time.Minute

// bounded runs f with a context that ends after callBound.
func bounded(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, callBound)
	defer cancel()
	return f(ctx)
}

// createAll creates n sandboxes named by format and an index, conc at a
// time, each followed by a first `true`; it fails t unless all of them
// answer, and returns their names, the recorder of the creates and each
// create's end, in order of completion.
func createAll(t *testing.T, ctx context.Context, tg *target, format string, n, conc int) ([]string, *recorder, []time.Time) {
	t.Helper()
	c := tg.client("")
	names := make([]string, n)
	rec := newRecorder(fmt.Sprintf("create + first exec of `true` (%d at %d)", n, conc))
	var mu sync.Mutex
	var ends []time.Time
	parallel(n, conc, func(i int) {
		names[i] = tg.name(format, i)
		err := rec.time(func() error { return createAndExec(ctx, c, names[i]) })
		if err == nil {
			mu.Lock()
			ends = append(ends, time.Now())
			mu.Unlock()
		}
	})
	if rec.failed() > 0 {
		rec.report(t, 0)
		rec.wantNoErrors(t)
		t.FailNow()
	}
	return names, rec, ends
}

// createAndExec creates sandbox name and runs `true` in it.
func createAndExec(ctx context.Context, c *client.Client, name string) error {
	return bounded(ctx, func(ctx context.Context) error {
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name}); err != nil {
			return err
		}
		return execTrue(ctx, c, name)
	})
}

// destroyAll destroys names, conc at a time, recording each destroy.
func destroyAll(ctx context.Context, c *client.Client, names []string, conc int) *recorder {
	rec := newRecorder(fmt.Sprintf("destroy (%d at %d)", len(names), conc))
	parallel(len(names), conc, func(i int) {
		rec.time(func() error {
			return bounded(ctx, func(ctx context.Context) error { return c.Destroy(ctx, names[i]) })
		})
	})
	return rec
}

// TestCreates is scenario a: N creates, C at a time, each followed by its
// first exec of `true`, with no warm pool (the daemon's default), so
// every create starts a runtime sandbox. Its baseline, in the same run
// and before it, is N bare runs of the runtime at the same concurrency
// (bareRuns), and N bare sandboxes started that stay (bareStays).
func TestCreates(t *testing.T) {
	sz := loadSizes(t)
	tg := newTarget(t)
	ctx := ctxFor(t, 30*time.Minute)
	baseline := "no baseline (a daemon at HEARTH_URL)"
	if tg.d != nil {
		bare, elapsed := bareRuns(t, tg.d.Runtime, sz.creates, sz.createConc)
		stays, stayed, _ := bareStays(t, tg.d.Runtime, sz.creates, sz.createConc, 0)
		baseline = fmt.Sprintf("bare %s run p50 %.0f ms, p99 %.0f ms, %.2f/s; bare run --detach of sandboxes that stay p50 %.0f ms, p99 %.0f ms, %.2f/s",
			tg.d.Runtime, bare.p(0.5), bare.p(0.99), float64(sz.creates)/elapsed.Seconds(), stays.p(0.5), stays.p(0.99), float64(sz.creates)/stayed.Seconds())
	}
	start := time.Now()
	names, rec, _ := createAll(t, ctx, tg, "c-%d", sz.creates, sz.createConc)
	elapsed := time.Since(start)
	rec.report(t, elapsed)
	start = time.Now()
	destroy := destroyAll(ctx, tg.client(""), names, sz.createConc)
	destroy.report(t, time.Since(start))
	destroy.wantNoErrors(t)
	t.Logf("load: creates: %d at %d: create+exec p50 %.0f ms, p99 %.0f ms, max %.0f ms, %.2f creates/s, errors %d; %s",
		sz.creates, sz.createConc, rec.p(0.5), rec.p(0.99), rec.p(1), float64(sz.creates)/elapsed.Seconds(), rec.failed(), baseline)
}

// TestBusy is scenario b: B of N running sandboxes each run `true` in a
// loop for a duration, while the others idle.
func TestBusy(t *testing.T) {
	sz := loadSizes(t)
	tg := newTarget(t)
	ctx := ctxFor(t, 30*time.Minute)
	names, _, _ := createAll(t, ctx, tg, "b-%d", sz.busyTotal, 4)
	c := tg.client("")
	rec := newRecorder(fmt.Sprintf("exec `true` in %d of %d sandboxes", sz.busyActive, sz.busyTotal))
	start := time.Now()
	deadline := start.Add(sz.busyFor)
	parallel(sz.busyActive, sz.busyActive, func(i int) {
		for time.Now().Before(deadline) {
			rec.time(func() error {
				return bounded(ctx, func(ctx context.Context) error { return execTrue(ctx, c, names[i]) })
			})
		}
	})
	elapsed := time.Since(start)
	rec.report(t, elapsed)
	rec.wantNoErrors(t)
	t.Logf("load: busy: %d of %d for %s: %.1f execs/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, errors %d",
		sz.busyActive, sz.busyTotal, sz.busyFor, float64(len(rec.lat))/elapsed.Seconds(), rec.p(0.5), rec.p(0.99), rec.p(1), rec.failed())
}

// tasksPerSandbox bounds the host tasks (processes and threads) of an
// idle sandbox: 32 under runsc (the sentry's, the gofer's and the systrap
// stubs'), with room.
const tasksPerSandbox = 40

// wantPids fails t unless the host can make n more tasks under its pid
// limit (kernel.pid_max, 32768 by default: fewer than a thousand idle
// runsc sandboxes), saying how to raise it.
func wantPids(t *testing.T, n int) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile("/proc/loadavg") // "... running/total lastpid"
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	_, total, _ := strings.Cut(f[3], "/")
	tasks, _ := strconv.Atoi(total)
	if tasks+n > max {
		t.Fatalf("the host has %d tasks and kernel.pid_max %d: %d more sandboxes need about %d more; raise it first (sysctl -w kernel.pid_max=%d)",
			tasks, max, n/tasksPerSandbox, n, 4*(tasks+n))
	}
}

// densityConc is how many creates the density scenario runs at once.
const densityConc = 4

// idleSettle is how long new sandboxes, hearth's and the bare baseline's,
// settle into idle before the density scenario reads the host's memory.
const idleSettle = 5 * time.Second

// TestDensity is scenario d: the host memory each running idle sandbox
// takes (MemAvailable before and after M creates, over M), a probe exec's
// latency among them, and the create rate at the end against the start.
// Its baseline, in the same run, is the rate and the memory of bare
// sandboxes that stay (bareStays), as many as the rates' window, at the
// same concurrency: once on the empty host before hearth's creates, and
// once beside its M sandboxes after them. What the host's own cost of a start grows by with
// M running sandboxes (fresh memory, the kernel's work per task and
// mount) slows the bare starts as much as hearth's.
func TestDensity(t *testing.T) {
	sz := loadSizes(t)
	tg := newTarget(t)
	ctx := ctxFor(t, 2*time.Hour)
	wantPids(t, sz.density*tasksPerSandbox)
	window := rateWindow(sz.density)
	bareAt := func(when string) string { return "no baseline (a daemon at HEARTH_URL)" }
	if tg.d != nil {
		bareAt = func(when string) string {
			_, took, each := bareStays(t, tg.d.Runtime, window, densityConc, idleSettle)
			return fmt.Sprintf("%.2f/s and %.1f MiB of MemAvailable each %s", float64(window)/took.Seconds(), float64(each)/(1<<20), when)
		}
	}
	bareFirst := bareAt("on the empty host")
	before := memAvailable(t)
	start := time.Now()
	names, rec, ends := createAll(t, ctx, tg, "d-%d", sz.density, densityConc)
	elapsed := time.Since(start)
	time.Sleep(idleSettle)
	after := memAvailable(t)
	c := tg.client("")
	if running, _ := countRunning(t, ctx, tg, "d-"); running != sz.density {
		t.Errorf("%d of the %d sandboxes are running after the creates", running, sz.density)
	}
	probe := newRecorder(fmt.Sprintf("probe `true` among %d idle sandboxes", sz.density))
	for range sz.probes {
		probe.time(func() error {
			return bounded(ctx, func(ctx context.Context) error { return execTrue(ctx, c, names[0]) })
		})
		time.Sleep(probeGap)
	}
	rec.report(t, elapsed)
	probe.report(t, 0)
	probe.wantNoErrors(t)
	bareLast := bareAt(fmt.Sprintf("beside the %d", sz.density))
	perBox := float64(before-after) / float64(sz.density)
	first, last := rateAt(ends, start, true), rateAt(ends, start, false)
	t.Logf("load: density: M=%d: %.1f MiB of MemAvailable per idle sandbox (%.0f → %.0f MiB); probe p50 %.1f ms, p99 %.1f ms; creates/s %.2f at the start, %.2f at the end; %d bare sandboxes that stay: %s, %s",
		sz.density, perBox/(1<<20), float64(before)/(1<<20), float64(after)/(1<<20), probe.p(0.5), probe.p(0.99), first, last, window, bareFirst, bareLast)
}

// rateWindow is how many creates rateAt measures a rate over, of n: a
// tenth, at least five.
func rateWindow(n int) int { return max(n/10, 5) }

// rateAt is the create rate over the first (or last) rateWindow of ends;
// start is when the first began.
func rateAt(ends []time.Time, start time.Time, first bool) float64 {
	k := rateWindow(len(ends))
	if len(ends) <= k {
		return float64(len(ends)) / ends[len(ends)-1].Sub(start).Seconds()
	}
	if first {
		return float64(k) / ends[k-1].Sub(start).Seconds()
	}
	n := len(ends)
	return float64(k) / ends[n-1].Sub(ends[n-1-k]).Seconds()
}

// memAvailable reads the host's MemAvailable, in bytes.
func memAvailable(t *testing.T) int64 {
	t.Helper()
	return readMemory(t).Available
}

// cpuBusy starts measuring the host's CPU time; the function it returns
// tells the busy share (0–1) of all CPUs since (0 if it cannot tell).
func cpuBusy() func() float64 {
	each := cpusBusy()
	return func() float64 {
		all, _ := each()
		return all
	}
}

// cpusBusy starts measuring the host's CPU time; the function it returns
// tells the busy share (0–1) of all CPUs since, and each CPU's, busiest
// first (0 and none if it cannot tell).
func cpusBusy() func() (all float64, each []float64) {
	all0, each0, err0 := hostusage.ReadCPUs(hostusage.Proc)
	share := func(c0, c1 hostusage.CPU) float64 {
		if c1.Total <= c0.Total {
			return 0
		}
		return float64(c1.Busy-c0.Busy) / float64(c1.Total-c0.Total)
	}
	return func() (float64, []float64) {
		all1, each1, err1 := hostusage.ReadCPUs(hostusage.Proc)
		if err0 != nil || err1 != nil {
			return 0, nil
		}
		var each []float64
		for n, c1 := range each1 {
			each = append(each, share(each0[n], c1))
		}
		slices.Sort(each)
		slices.Reverse(each)
		return share(all0, all1), each
	}
}
