package oci

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// reserveCPUs gives f's quieter a reserve of n of the CPUs of parent (a
// cpuset list), in a cpuset hierarchy beside its cpu one (v1) or in its
// unified one (v2), on the fake's clock. Sandboxes added after it get a
// cpuset of every CPU.
func (f *fakeCPU) reserveCPUs(n int, parent string) *cpuReserve {
	f.t.Helper()
	m := cgroupMounts{cpuset: filepath.Join(filepath.Dir(filepath.Dir(f.q.cpu)), "cpuset")}
	file := "cpuset.effective_cpus"
	if f.q.v2 {
		m, file = cgroupMounts{v2: filepath.Dir(f.q.cpu)}, "cpuset.cpus.effective"
	}
	r := newCPUReserve(m, "hearth", n, slog.New(slog.DiscardHandler))
	r.clock = func() time.Time { return f.now }
	f.q.reserve, f.parentCPUs = r, parent
	f.write(filepath.Dir(r.dir), "hearth", file, parent)
	return r
}

// cpus is sandbox id's cpuset.
func (f *fakeCPU) cpus(id string) string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.q.reserve.dir, id, "cpuset.cpus"))
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// asked reports whether a call asked the quieter to confine the demoted,
// and lets it, as QuietNeighbours does.
func (f *fakeCPU) asked() bool {
	select {
	case <-f.q.reserve.wakeC():
		f.q.reserve.confine()
		return true
	default:
		return false
	}
}

// TestReservedCPUs: a demoted sandbox keeps every CPU until a sandbox that
// is not demoted is called (a call to the demoted one itself asks
// nothing); then it is confined to the CPUs outside the reserve, the
// called one, once called again, is pinned to the demoted's CPU (called
// once, it keeps every CPU), and both stay so while the
// calls go on and the demoted saturate their CPUs, though the host has
// idle time on the reserved one (judged over all CPUs, three sandboxes
// each using a third of a CPU of two would look quiet and be promoted, to
// be demoted again: a flapping). reserveHold after the last call both
// get every CPU back, the demoted still demoted; promoted, they have
// every CPU, and calls pin nothing. On v1 and v2.
func TestReservedCPUs(t *testing.T) {
	for _, tc := range cgroupKinds {
		if !tc.idle {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCPU(t, tc.v2, tc.idle)
			f.reserveCPUs(1, "0-1")
			burns := []string{"burn0", "burn1", "burn2"}
			for _, id := range append(burns, "calm") {
				f.add(id, 0)
			}
			f.period(nil, 0.5)
			use := func(each float64) map[string]float64 {
				m := map[string]float64{"calm": 0.05}
				for _, id := range burns {
					m[id] = each
				}
				return m
			}
			for range 2 {
				f.period(use(0.65), 0.02)
			}
			for _, id := range burns {
				if !f.demoted(id) || f.cpus(id) != "0-1" {
					t.Fatalf("%s after two saturated periods, no call: demoted %v, CPUs %s; want demoted on 0-1", id, f.demoted(id), f.cpus(id))
				}
			}
			f.q.reserve.called("burn0")
			if f.asked() {
				t.Error("a call to a demoted sandbox asked for the demoted to be confined")
			}
			f.q.reserve.called("calm")
			if !f.asked() {
				t.Fatal("a call to a sandbox not demoted did not ask for the demoted to be confined")
			}
			check := func(when, demoted, called string) {
				t.Helper()
				for _, id := range burns {
					if !f.demoted(id) || f.cpus(id) != demoted {
						t.Errorf("%s: %s demoted %v, CPUs %s; want demoted on %s", when, id, f.demoted(id), f.cpus(id), demoted)
					}
				}
				if got := f.cpus("calm"); got != called {
					t.Errorf("%s: the called sandbox's CPUs are %s, want %s", when, got, called)
				}
			}
			check("at the first call", "1", "0-1")
			for range 6 {
				f.q.reserve.called("calm")
				f.asked()
				f.periodEach(use(0.33), [2]float64{0.6, 0})
			}
			check("while calls go on", "1", "1")
			for range int(reserveHold/quietPeriod) + 1 {
				f.periodEach(use(0.66), [2]float64{0.02, 0.02})
			}
			check(fmt.Sprintf("%s after the last call", reserveHold), "0-1", "0-1")
			f.q.reserve.called("calm")
			f.asked()
			for range 2 {
				f.q.reserve.called("calm")
				f.periodEach(use(0), [2]float64{0.9, 0.9})
			}
			for _, id := range burns {
				if f.demoted(id) || f.cpus(id) != "0-1" {
					t.Errorf("quiet for two periods: %s demoted %v, CPUs %s; want promoted, on 0-1", id, f.demoted(id), f.cpus(id))
				}
			}
			f.q.reserve.called("calm")
			f.asked()
			f.periodEach(use(0), [2]float64{0.9, 0.9})
			if got := f.cpus("calm"); got != "0-1" {
				t.Errorf("called with none demoted: the called sandbox's CPUs are %s, want 0-1", got)
			}
		})
	}
}

// TestReservedCPUsPinned: with a reserve of two CPUs of four and a demoted
// sandbox confined to the other two, each sandbox called twice within
// reserveHold is kept on one of those two CPUs of its own while the called
// are no more than two (called once, it keeps every CPU); a third called
// gives all every CPU, and once its calls and the second's are older than
// reserveHold the first is pinned again. A period in which a sandbox
// neither demoted nor called ran unpins all, until a period in which none
// did (under activeCPU is not running), and so does one in which the
// demoted did not run; one in which the pinned used heavyCPU unpins it,
// until one in which it used less. A pinned sandbox demoted is confined
// with the demoted, and calls to it pin nothing; the reserve released,
// every sandbox has every CPU.
func TestReservedCPUsPinned(t *testing.T) {
	f := newFakeCPU(t, false, true)
	r := f.reserveCPUs(2, "0-3")
	for _, id := range []string{"burn", "a", "b", "c"} {
		f.add(id, 0)
	}
	r.demote("burn")
	r.period(f.now, map[string]float64{"burn": 1})
	want := func(when string, cpus map[string]string) {
		t.Helper()
		for _, id := range slices.Sorted(maps.Keys(cpus)) {
			if got := f.cpus(id); got != cpus[id] {
				t.Errorf("%s: %s on %s, want %s", when, id, got, cpus[id])
			}
		}
	}
	call := func(id string, asks bool) {
		t.Helper()
		r.called(id)
		if got := f.asked(); got != asks {
			t.Errorf("a call to %s asked to confine or pin: %v, want %v", id, got, asks)
		}
	}
	call("a", true)
	want("a called once", map[string]string{"burn": "2-3", "a": "0-3", "b": "0-3"})
	call("a", true)
	want("a called twice", map[string]string{"burn": "2-3", "a": "2", "b": "0-3", "c": "0-3"})
	call("a", false) // pinned already
	call("b", true)  // one pinned: a newcomer may unpin it
	call("b", true)
	want("a and b called twice", map[string]string{"burn": "2-3", "a": "2", "b": "3", "c": "0-3"})
	call("c", true)
	want("a, b and c called", map[string]string{"burn": "2-3", "a": "0-3", "b": "0-3", "c": "0-3"})
	for range int(reserveHold/quietPeriod) + 1 {
		f.now = f.now.Add(quietPeriod)
		call("a", false)
		r.period(f.now, map[string]float64{"a": 0.3, "burn": 1})
	}
	want(fmt.Sprintf("only a called for %s", reserveHold), map[string]string{"burn": "2-3", "a": "2", "b": "0-3", "c": "0-3"})
	f.now = f.now.Add(quietPeriod)
	call("a", false)
	r.period(f.now, map[string]float64{"a": 0.3, "c": 0.05, "burn": 1})
	want("c ran, not called", map[string]string{"burn": "2-3", "a": "0-3", "c": "0-3"})
	f.now = f.now.Add(quietPeriod)
	call("a", false)
	r.period(f.now, map[string]float64{"a": 0.3})
	want("the demoted did not run", map[string]string{"burn": "2-3", "a": "0-3", "c": "0-3"})
	f.now = f.now.Add(quietPeriod)
	call("a", false)
	r.period(f.now, map[string]float64{"a": 0.3, "burn": 1})
	want("only a and the demoted ran", map[string]string{"burn": "2-3", "a": "2", "c": "0-3"})
	f.now = f.now.Add(quietPeriod)
	call("a", false)
	r.period(f.now, map[string]float64{"a": 0.3, "c": activeCPU / 2, "burn": 1})
	want("c used under activeCPU: it did not run", map[string]string{"burn": "2-3", "a": "2", "c": "0-3"})
	f.now = f.now.Add(quietPeriod)
	call("a", false)
	r.period(f.now, map[string]float64{"a": heavyCPU, "burn": 1})
	want("a used most of its CPU", map[string]string{"burn": "2-3", "a": "0-3"})
	f.now = f.now.Add(quietPeriod)
	call("a", false)
	r.period(f.now, map[string]float64{"a": 0.5, "burn": 1})
	want("a used less", map[string]string{"burn": "2-3", "a": "2"})
	r.demote("a")
	call("a", false)
	r.period(f.now, map[string]float64{"burn": 1})
	want("a demoted", map[string]string{"burn": "2-3", "a": "2-3"})
	call("b", false) // confined already, none pinned
	call("b", true)
	want("b called twice", map[string]string{"burn": "2-3", "a": "2-3", "b": "2"})
	r.release()
	want("released", map[string]string{"burn": "0-3", "a": "0-3", "b": "0-3", "c": "0-3"})
}

// TestReservedCPUsTakeOver: a sandbox a killed daemon left demoted and
// confined gets every CPU back at the next quieter's first sight, with no
// call, and so does one it left pinned; one a wake made again (a new
// cgroup, not demoted) is no longer among the demoted; a gone one is
// forgotten.
func TestReservedCPUsTakeOver(t *testing.T) {
	f := newFakeCPU(t, false, true)
	r := f.reserveCPUs(1, "0-1")
	f.add("left", 0)
	f.add("woken", 0)
	f.add("gone", 0)
	for _, id := range []string{"left", "woken", "gone"} {
		if err := f.q.setIdle(id, true); err != nil {
			t.Fatal(err)
		}
		f.write(r.dir, id, "cpuset.cpus", "1")
	}
	f.add("pinned", 0)
	f.write(r.dir, "pinned", "cpuset.cpus", "0")
	f.period(nil, 0.5)
	for _, id := range []string{"left", "woken", "gone"} {
		if !f.demoted(id) || f.cpus(id) != "0-1" || !r.demoted[id] {
			t.Errorf("%s at first sight: demoted %v, CPUs %s, among the reserve's demoted %v; want demoted, on 0-1",
				id, f.demoted(id), f.cpus(id), r.demoted[id])
		}
	}
	if f.demoted("pinned") || f.cpus("pinned") != "0-1" {
		t.Errorf("a sandbox left pinned, at first sight: demoted %v, CPUs %s; want on 0-1, not demoted", f.demoted("pinned"), f.cpus("pinned"))
	}
	f.period(map[string]float64{"woken": 0.1}, 0.02) // saturated: no promotion
	if err := f.q.setIdle("woken", false); err != nil {
		t.Fatal(err)
	}
	f.ns["woken"] = 0
	f.setTime("woken")
	for _, dir := range []string{f.q.cpu, f.q.usage} {
		if err := os.RemoveAll(filepath.Join(dir, "gone")); err != nil {
			t.Fatal(err)
		}
	}
	f.period(nil, 0.02)
	if got := slices.Sorted(func(yield func(string) bool) {
		for id := range r.demoted {
			yield(id)
		}
	}); !slices.Equal(got, []string{"left"}) {
		t.Errorf("the reserve's demoted after a wake and a removal: %v, want [left]", got)
	}
}

// TestReserveSize: the reserve is the parent's lowest-numbered CPUs, at
// most all but one; a parent of one CPU, or none to read, reserves
// nothing and writes no cpuset; a reserve of none is nil, and a nil
// reserve takes every call.
func TestReserveSize(t *testing.T) {
	for _, tc := range []struct {
		n            int
		parent, want string
	}{{1, "0-3", "1-3"}, {2, "0-3", "2-3"}, {9, "0-3", "3"}, {1, "2,5,7-8", "5,7-8"}, {1, "3", "0-9"}} {
		f := newFakeCPU(t, false, true)
		r := f.reserveCPUs(tc.n, tc.parent)
		f.write(r.dir, "x", "cpuset.cpus", "0-9")
		r.demote("x")
		r.last = f.now
		r.confined = false
		r.confine()
		if got := f.cpus("x"); got != tc.want {
			t.Errorf("a reserve of %d of %s: the demoted confined to %s, want %s", tc.n, tc.parent, got, tc.want)
		}
	}
	f := newFakeCPU(t, false, true)
	r := f.reserveCPUs(1, "0-1")
	if err := os.Remove(filepath.Join(r.dir, "cpuset.effective_cpus")); err != nil {
		t.Fatal(err)
	}
	f.write(r.dir, "x", "cpuset.cpus", "0-9")
	r.demote("x")
	r.called("y")
	f.asked()
	if got := f.cpus("x"); got != "0-9" {
		t.Errorf("with no parent CPUs to read, a demoted sandbox's cpuset became %s", got)
	}
	if r := newCPUReserve(cgroupMounts{cpuset: t.TempDir()}, "hearth", 0, slog.New(slog.DiscardHandler)); r != nil {
		t.Error("a reserve of 0 CPUs is not nil")
	}
	var none *cpuReserve
	none.called("x")
	none.demote("x")
	none.promote("x")
	none.forget("x")
	if got := none.period(f.now, nil); len(got) != 0 || none.wakeC() != nil {
		t.Errorf("a nil reserve: period %v, wake channel %v", got, none.wakeC())
	}
}

// TestReserveRelease: at the quieter's end (a daemon stopping, its
// sandboxes left running) the confined demoted get every CPU back and
// stay demoted; the next daemon takes them over from there.
func TestReserveRelease(t *testing.T) {
	f := newFakeCPU(t, false, true)
	r := f.reserveCPUs(1, "0-3")
	f.add("burn", 0)
	if err := f.q.setIdle("burn", true); err != nil {
		t.Fatal(err)
	}
	f.period(nil, 0.02) // taken over as demoted
	r.called("calm")
	if !f.asked() || f.cpus("burn") != "1-3" {
		t.Fatalf("after a call: burn on %s, want 1-3", f.cpus("burn"))
	}
	r.release()
	if f.cpus("burn") != "0-3" || !f.demoted("burn") {
		t.Errorf("after release: burn on %s, demoted %v; want 0-3, demoted", f.cpus("burn"), f.demoted("burn"))
	}
	r.release() // not confined: nothing to do
	if f.cpus("burn") != "0-3" {
		t.Errorf("after a second release: burn on %s", f.cpus("burn"))
	}
}
