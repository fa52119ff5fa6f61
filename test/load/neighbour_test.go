package load_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/internal/mountinfo"
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
// host's CPUs. Its baseline (see neighbourBaseline) is the same probe
// beside as many CPU-bound host processes of the lowest priority.
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
	loadedCPU := cpuBusy()
	p.measure(loadedRec)
	loadedBusy := loadedCPU()
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
	if loadedBusy < 0.8 {
		t.Errorf("the host's CPUs were %.0f%% busy beside the loaded neighbours; want them loaded (>= 80%%)", 100*loadedBusy)
	}
	t.Logf("load: neighbour: K=%d: probe quiet p50 %.1f ms, p99 %.1f ms (CPU %.0f%%); loaded p50 %.1f ms, p99 %.1f ms (CPU %.0f%%); ratio p50 %.1fx, p99 %.1fx; onset p50 %.1f ms, max %.1f ms",
		len(loaded), quiet.p(0.5), quiet.p(0.99), 100*quietBusy, loadedRec.p(0.5), loadedRec.p(0.99), 100*loadedBusy,
		loadedRec.p(0.5)/quiet.p(0.5), loadedRec.p(0.99)/quiet.p(0.99), onset.p(0.5), onset.p(1))
	if tg.d == nil {
		return // another host's daemon: no CLI, and this host's processes are no baseline
	}
	t.Logf("load: neighbour through the CLI: K=%d: probe quiet p50 %.1f ms, p99 %.1f ms; loaded p50 %.1f ms, p99 %.1f ms; ratio p50 %.1fx, p99 %.1fx",
		len(loaded), quietCLI.p(0.5), quietCLI.p(0.99), loadedCLI.p(0.5), loadedCLI.p(0.99),
		loadedCLI.p(0.5)/quietCLI.p(0.5), loadedCLI.p(0.99)/quietCLI.p(0.99))
	neighbourBaseline(t, p, 4*len(loaded), quiet, quietCLI)
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

// neighbourBaseline measures probe p beside n CPU-bound host processes
// of the lowest precedence there is (see idleBurners), so that everything
// on the probe's path takes precedence over them: what no demotion of
// sandboxes can improve on this host. It logs the ratios to the quiet
// probes, through the Go client and through the CLI.
func neighbourBaseline(t *testing.T, p probe, n int, quiet, quietCLI *recorder) {
	host := newRecorder(fmt.Sprintf("baseline: probe beside %d idle host processes", n))
	hostCLI := newRecorder(fmt.Sprintf("baseline: probe beside %d idle host processes, through the CLI", n))
	stopBurners := idleBurners(t, n)
	time.Sleep(time.Second)
	hostCPU := cpuBusy()
	p.measure(host)
	hostBusy := hostCPU()
	p.measureCLI(hostCLI)
	stopBurners()
	for _, rec := range []*recorder{host, hostCLI} {
		rec.report(t, 0)
		rec.wantNoErrors(t)
	}
	t.Logf("load: neighbour baseline: probe beside %d idle host processes: p50 %.1f ms, p99 %.1f ms (CPU %.0f%%); ratio to quiet p50 %.1fx, p99 %.1fx; through the CLI p50 %.1f ms, p99 %.1f ms, ratio p50 %.1fx, p99 %.1fx",
		n, host.p(0.5), host.p(0.99), 100*hostBusy, host.p(0.5)/quiet.p(0.5), host.p(0.99)/quiet.p(0.99),
		hostCLI.p(0.5), hostCLI.p(0.99), hostCLI.p(0.5)/quietCLI.p(0.5), hostCLI.p(0.99)/quietCLI.p(0.99))
}

// idleBurners starts n CPU-bound host processes of the lowest precedence
// there is and returns what kills them; t's cleanup kills them too. Each
// is SCHED_IDLE, in a cpu cgroup of their own at the top of the hierarchy
// marked idle (cpu.idle, or the lowest weight where a kernel has none):
// SCHED_IDLE alone ranks them only among the tasks of their own group,
// which are the test's (the client's) and its daemon's, and beside 40 of
// them there a thread of the test woke 13 ms late at the p99 (0.2–0.5 ms
// quiet, and beside the same processes in a cgroup of their own).
func idleBurners(t *testing.T, n int) (stop func()) {
	t.Helper()
	cg := idleCgroup(t)
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		cmds = nil
	}
	t.Cleanup(stop)
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0); err != nil {
			t.Fatalf("a burner into %s: %v", cg, err)
		}
		if err := unix.SchedSetAttr(c.Process.Pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0); err != nil {
			t.Fatalf("SCHED_IDLE for a burner: %v", err)
		}
	}
	return stop
}

// idleCgroup makes a cgroup at the top of the host's cpu hierarchy (v1's
// cpu controller, else the unified one), marks it idle and returns its
// directory; t's cleanup removes it, after idleBurners' cleanup has
// killed what was in it.
func idleCgroup(t *testing.T) string {
	t.Helper()
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var root string
	for _, m := range mounts {
		if m.Root != "/" {
			continue
		}
		if m.FSType == "cgroup" && slices.Contains(strings.Split(m.SuperOptions, ","), "cpu") {
			root = m.Point
			break
		}
		if m.FSType == "cgroup2" && root == "" {
			root = m.Point
		}
	}
	if root == "" {
		t.Fatal("the baseline needs a cpu cgroup hierarchy; found none in /proc/self/mountinfo")
	}
	dir := filepath.Join(root, fmt.Sprintf("hearth-load-burners-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the burners' cgroup: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cpu.idle"), []byte("1"), 0); err == nil {
		return dir
	}
	for _, knob := range [][2]string{{"cpu.shares", "2"}, {"cpu.weight", "1"}} {
		if err := os.WriteFile(filepath.Join(dir, knob[0]), []byte(knob[1]), 0); err == nil {
			return dir
		}
	}
	t.Fatalf("the burners' cgroup %s has neither cpu.idle nor a weight to lower", dir)
	return ""
}
