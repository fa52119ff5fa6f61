package oci

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeCPU is a cpu and a cpuacct hierarchy (v1) or a unified one (v2) in
// a directory, with sandboxes whose CPU time the test advances.
type fakeCPU struct {
	t     *testing.T
	q     *quieter
	ns    map[string]uint64
	now   time.Time
	idle  bool         // the kernel has cpu.idle
	ticks [2][2]uint64 // each CPU's busy and idle clock ticks so far
	calls map[string]uint64
	// parentCPUs is the cpuset parent's CPUs, with a reserve.
	parentCPUs string
}

func newFakeCPU(t *testing.T, v2, idle bool) *fakeCPU {
	dir := t.TempDir()
	m := cgroupMounts{cpu: filepath.Join(dir, "cpu"), cpuacct: filepath.Join(dir, "cpuacct")}
	if v2 {
		m = cgroupMounts{v2: filepath.Join(dir, "unified")}
	}
	c := &cgroups{mounts: m, parent: "hearth", log: slog.New(slog.DiscardHandler)}
	q := c.quieter()
	q.ncpu = 2
	q.proc = dir
	f := &fakeCPU{t: t, q: q, ns: map[string]uint64{}, now: time.Unix(1000, 0), idle: idle, calls: map[string]uint64{}}
	q.calls = func(id string) uint64 { return f.calls[id] }
	return f
}

// add makes sandbox id's cgroups with a quota of cores CPUs (0: none).
func (f *fakeCPU) add(id string, cores float64) {
	f.write(f.q.cpu, id, "cpu.shares", "1024")
	if f.q.v2 {
		f.write(f.q.cpu, id, "cpu.weight", "100")
		max := "max 100000"
		if cores > 0 {
			max = fmt.Sprintf("%d 100000", int(cores*100000))
		}
		f.write(f.q.cpu, id, "cpu.max", max)
	} else {
		quota := "-1"
		if cores > 0 {
			quota = fmt.Sprint(int(cores * 100000))
		}
		f.write(f.q.cpu, id, "cpu.cfs_quota_us", quota)
		f.write(f.q.cpu, id, "cpu.cfs_period_us", "100000")
	}
	if f.idle {
		f.write(f.q.cpu, id, "cpu.idle", "0")
	}
	if r := f.q.reserve; r != nil {
		f.write(r.dir, id, "cpuset.cpus", f.parentCPUs)
	}
	f.ns[id] = 0
	f.setTime(id)
}

// addEach adds n sandboxes named prefix0, prefix1, … with a quota of one
// CPU each, and has each use cpus CPUs a period in use.
func (f *fakeCPU) addEach(prefix string, n int, cpus float64, use map[string]float64) {
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		f.add(id, 1)
		use[id] = cpus
	}
}

func (f *fakeCPU) write(dir, id, name, v string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, id), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, id, name), []byte(v+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeCPU) setTime(id string) {
	if f.q.v2 {
		f.write(f.q.usage, id, "cpu.stat", fmt.Sprintf("usage_usec %d\nuser_usec 0\n", f.ns[id]/1000))
	} else {
		f.write(f.q.usage, id, "cpuacct.usage", fmt.Sprint(f.ns[id]))
	}
}

// period has each sandbox use cpus CPUs (in CPU-seconds per second) for
// one quietPeriod on a host whose CPUs are idle for the part idle of it,
// then ticks.
func (f *fakeCPU) period(cpus map[string]float64, idle float64) {
	f.periodEach(cpus, [2]float64{idle, idle})
}

// periodEach is period on a host whose two CPUs are each idle for their
// part of it.
func (f *fakeCPU) periodEach(cpus map[string]float64, idle [2]float64) {
	for id, c := range cpus {
		f.ns[id] += uint64(c * float64(quietPeriod))
		f.setTime(id)
	}
	ticks := uint64(100 * quietPeriod.Seconds()) // each CPU's
	var all [2]uint64
	lines := ""
	for n := range 2 {
		f.ticks[n][1] += uint64(idle[n] * float64(ticks))
		f.ticks[n][0] += ticks - uint64(idle[n]*float64(ticks))
		all[0], all[1] = all[0]+f.ticks[n][0], all[1]+f.ticks[n][1]
		lines += fmt.Sprintf("cpu%d %d 0 0 %d 0 0 0 0 0 0\n", n, f.ticks[n][0], f.ticks[n][1])
	}
	stat := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\n%sintr 1\n", all[0], all[1], lines)
	if err := os.WriteFile(filepath.Join(f.q.proc, "stat"), []byte(stat), 0o644); err != nil {
		f.t.Fatal(err)
	}
	f.now = f.now.Add(quietPeriod)
	f.q.tick(f.now)
}

// demoted reports whether sandbox id's cgroup is marked idle (or at the
// lowest weight).
func (f *fakeCPU) demoted(id string) bool {
	f.t.Helper()
	file, low := "cpu.idle", "1"
	if !f.idle {
		file, low = "cpu.shares", "2"
		if f.q.v2 {
			file, low = "cpu.weight", "1"
		}
	}
	b, err := os.ReadFile(filepath.Join(f.q.cpu, id, file))
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.TrimSpace(string(b)) == low
}

// cgroupKinds are the kinds of cpu cgroups the quieter handles: v1 and v2,
// with cpu.idle and with weights only.
var cgroupKinds = []struct {
	name     string
	v2, idle bool
}{{"v1 cpu.idle", false, true}, {"v1 weights", false, false}, {"v2 cpu.idle", true, true}, {"v2 weights", true, false}}

// TestQuietNeighbours: a sandbox saturating its quota for two periods is
// demoted, one busy period alone is not; a sandbox that uses little, or a
// share of a quota-less host below busy, is never demoted; a demoted one
// is promoted after two quiet periods; a cgroup made again (CPU time back
// to zero) starts afresh. On v1 and v2, with cpu.idle and with weights.
func TestQuietNeighbours(t *testing.T) {
	for _, tc := range cgroupKinds {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCPU(t, tc.v2, tc.idle)
			f.add("busy1", 1)
			f.add("quiet1", 1)
			f.add("nolimit", 0)
			f.period(nil, 0.5) // first sight
			f.period(map[string]float64{"busy1": 0.98, "quiet1": 0.05, "nolimit": 0.9}, 0.5)
			if f.demoted("busy1") {
				t.Fatal("demoted after one busy period")
			}
			f.period(map[string]float64{"busy1": 0.97, "quiet1": 0.9, "nolimit": 1.0}, 0.5)
			if !f.demoted("busy1") || f.demoted("quiet1") || f.demoted("nolimit") {
				t.Fatalf("after two busy periods: busy1 %v quiet1 %v nolimit %v; want only busy1 demoted (nolimit used half the host)",
					f.demoted("busy1"), f.demoted("quiet1"), f.demoted("nolimit"))
			}
			f.period(map[string]float64{"busy1": 0.1}, 0.5)
			if !f.demoted("busy1") {
				t.Fatal("promoted after one quiet period")
			}
			f.period(map[string]float64{"busy1": 0.0}, 0.5)
			if f.demoted("busy1") {
				t.Fatal("still demoted after two quiet periods")
			}
			// Busy again, then its cgroup is made anew (a wake): afresh.
			f.period(map[string]float64{"busy1": 1}, 0.5)
			f.ns["busy1"] = 0
			f.setTime("busy1")
			f.period(nil, 0.5)
			f.period(map[string]float64{"busy1": 1}, 0.5)
			if f.demoted("busy1") {
				t.Fatal("a remade cgroup inherited its old busy run")
			}
			if err := os.RemoveAll(filepath.Join(f.q.cpu, "quiet1")); err != nil {
				t.Fatal(err)
			}
			f.period(nil, 0.5)
			if _, ok := f.q.seen["quiet1"]; ok {
				t.Error("a gone sandbox is still watched")
			}
			if _, ok := f.q.fds["quiet1"]; ok || len(f.q.fds) != len(f.q.seen) {
				t.Errorf("usage files open for %v, want one for each sandbox watched (%d)", f.q.fds, len(f.q.seen))
			}
			f.q.close()
			if len(f.q.fds) != 0 {
				t.Errorf("usage files still open after close: %v", f.q.fds)
			}
		})
	}
}

// TestQuietNeighboursSaturated: on a host whose CPUs are saturated, ten
// sandboxes that each get only their fair part of the CPUs (far below
// their quota) are demoted, the quiet one beside them is not; the same use
// on a host with idle CPUs demotes none (they could have had more).
func TestQuietNeighboursSaturated(t *testing.T) {
	for _, tc := range []struct {
		name    string
		idle    float64
		demoted bool
	}{{"saturated", 0.02, true}, {"idle CPUs", 0.3, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCPU(t, false, true)
			use := map[string]float64{"probe": 0.01}
			f.addEach("busy", 10, 0.18, use)
			f.add("probe", 1)
			for range 3 {
				f.period(use, tc.idle)
			}
			for id := range use {
				if want := tc.demoted && id != "probe"; f.demoted(id) != want {
					t.Errorf("%s (using %.2f CPUs, host %.0f%% idle): demoted %v, want %v", id, use[id], tc.idle*100, f.demoted(id), want)
				}
			}
		})
	}
}

// TestQuietNeighboursStarved: demoted sandboxes that a saturated host
// starves (they use almost nothing, because they run last) stay demoted
// for as long as the host stays saturated, and are promoted once they use
// little while the host has CPUs to spare.
func TestQuietNeighboursStarved(t *testing.T) {
	f := newFakeCPU(t, false, true)
	use := map[string]float64{}
	f.addEach("busy", 4, 0.45, use)
	for range 3 {
		f.period(use, 0.02)
	}
	for id := range use {
		if !f.demoted(id) {
			t.Fatalf("%s not demoted while saturating a saturated host", id)
		}
		use[id] = 0.01 // starved by whatever else saturates the host
	}
	for range 6 {
		f.period(use, 0.02)
	}
	for id := range use {
		if !f.demoted(id) {
			t.Errorf("%s promoted while a saturated host starves it", id)
		}
	}
	for range 2 {
		f.period(use, 0.5)
	}
	for id := range use {
		if f.demoted(id) {
			t.Errorf("%s still demoted after two quiet periods on a host with idle CPUs", id)
		}
	}
}

// TestQuietNeighboursProbe: on a saturated host, a sandbox driven by calls
// (a probe, using less than the CPU-bound sandboxes beside it, yet more
// than half its fair part) is not demoted with them, nor later, when the
// demoted ones leave it the CPUs and it uses more than each of them.
func TestQuietNeighboursProbe(t *testing.T) {
	f := newFakeCPU(t, false, true)
	use := map[string]float64{"probe": 0.1}
	f.add("probe", 1)
	f.addEach("burn", 10, 0.17, use)
	for range 3 {
		f.period(use, 0.02)
	}
	for id := range use {
		if want := id != "probe"; f.demoted(id) != want {
			t.Fatalf("after the onset: %s demoted %v, want %v", id, f.demoted(id), want)
		}
	}
	use["probe"] = 0.3
	for id := range use {
		if id != "probe" {
			use[id] = 0.16
		}
	}
	for range 6 {
		f.period(use, 0.02)
	}
	for id := range use {
		if want := id != "probe"; f.demoted(id) != want {
			t.Errorf("beside the demoted: %s demoted %v, want %v", id, f.demoted(id), want)
		}
	}
}

// TestQuietNeighboursTakeOver: a sandbox a killed daemon left demoted is
// taken over by the next daemon's quieter and promoted once quiet, not
// left idle for good. On v1 and v2, with cpu.idle and with weights.
func TestQuietNeighboursTakeOver(t *testing.T) {
	for _, tc := range cgroupKinds {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCPU(t, tc.v2, tc.idle)
			f.add("left", 1)
			f.add("other", 1)
			if err := f.q.setIdle("left", true); err != nil {
				t.Fatal(err)
			}
			f.period(nil, 0.5) // first sight
			if !f.demoted("left") || f.demoted("other") {
				t.Fatalf("at first sight: left demoted %v, other %v; want only left, as it was left", f.demoted("left"), f.demoted("other"))
			}
			f.period(map[string]float64{"left": 0.01}, 0.5)
			f.period(map[string]float64{"left": 0.01}, 0.5)
			if f.demoted("left") {
				t.Fatal("a sandbox left demoted is still demoted after two quiet periods")
			}
		})
	}
}

// TestQuietNeighboursCalled: on a saturated host, at the onset of ten
// CPU-bound sandboxes, a sandbox its agent's callers drive (drivenCalls a
// period) is not demoted though it uses more than each of them, while its
// twin with the same use and no calls is; and a demoted sandbox that its
// callers come to drive is promoted, the host still saturated, and
// demoted again once called less while it saturates its part.
func TestQuietNeighboursCalled(t *testing.T) {
	f := newFakeCPU(t, false, true)
	use := map[string]float64{"probe": 0.3, "twin": 0.3}
	f.add("probe", 1)
	f.add("twin", 1)
	f.addEach("burn", 10, 0.17, use)
	for range 3 {
		f.calls["probe"] += drivenCalls
		f.period(use, 0.02)
	}
	for id := range use {
		if want := id != "probe"; f.demoted(id) != want {
			t.Fatalf("after the onset: %s demoted %v, want %v", id, f.demoted(id), want)
		}
	}
	for range 2 {
		f.calls["probe"] += drivenCalls
		f.calls["twin"] += drivenCalls
		f.period(use, 0.02)
	}
	if f.demoted("twin") || f.demoted("probe") || !f.demoted("burn0") {
		t.Errorf("twin driven by calls for two periods: twin demoted %v, probe %v, burn0 %v; want only burn0",
			f.demoted("twin"), f.demoted("probe"), f.demoted("burn0"))
	}
	use["twin"] = 0.95
	for range 2 {
		f.calls["twin"] += drivenCalls - 1
		f.period(use, 0.02)
	}
	if !f.demoted("twin") {
		t.Error("twin called less than drivenCalls a period, saturating its part, is not demoted again")
	}
}

// TestCallsCounted: every dial of a sandbox's agent counts as a call, one
// that fails too (the daemon made it), until the sandbox is forgotten.
func TestCallsCounted(t *testing.T) {
	c := &channels{runtime: RuntimeRunsc, dir: stateDir{path: t.TempDir()}}
	for range 3 {
		if conn, err := c.dial(t.Context(), "xcalled"); err == nil {
			conn.Close()
			t.Fatal("dialed a sandbox that does not exist")
		}
	}
	if n, other := c.called("xcalled"), c.called("xother"); n != 3 || other != 0 {
		t.Errorf("called = %d and %d for a sandbox never dialed; want 3 and 0", n, other)
	}
	c.forget("xcalled")
	if n := c.called("xcalled"); n != 0 {
		t.Errorf("called after forget = %d, want 0", n)
	}
}

// TestQuietNeighboursBusyCalls: twenty sandboxes each running its
// callers' short commands back to back on a saturated host (one call a
// period each, using their fair part of the CPUs) are not demoted; the
// same use with no calls is. Demoted, they would be confined while the
// others are called (reserve.go), which halved test/load's busy scenario.
func TestQuietNeighboursBusyCalls(t *testing.T) {
	for _, called := range []bool{true, false} {
		f := newFakeCPU(t, false, true)
		use := map[string]float64{}
		f.addEach("loop", 20, 0.1, use)
		for range 4 {
			for id := range use {
				if called {
					f.calls[id]++
				}
			}
			f.period(use, 0.02)
		}
		for id := range use {
			if f.demoted(id) == called {
				t.Errorf("called once a period %v: %s demoted %v", called, id, f.demoted(id))
			}
		}
	}
}
