package oci

import (
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hearth/hearth/internal/hostusage"
)

// Reserved CPUs. Demotion (quiet.go) ranks a CPU-saturating sandbox below
// the others, which under runsc is not enough: a CPU-bound guest's sentry
// and stub threads hand the CPU to each other about a thousand times a
// second whatever their precedence, and a quiet sandbox's exec round trip
// beside ten of them took 2–3× its quiet p99 (beside ten bare runsc
// sandboxes marked idle the same way, as much). So while a sandbox that is
// not demoted is being called, the demoted are confined (their cpuset) to
// the instance's CPUs less a reserve of them: the calls' agents, their
// sentries and the daemon then have CPUs on which no demoted sandbox's
// thread runs. reserveHold after the last such call the demoted get every
// CPU back, so a host whose only work is CPU-bound sandboxes nobody calls
// loses nothing; while calls go on, the cost is the reserve's idle time,
// which the demoted may not use.
//
// A call confines the demoted at once (the quieter's goroutine writes
// their cpusets as soon as the call's dial tells it; ten sandboxes take
// about 1.5 ms), so an agent's first command after minutes of thought is
// protected as well as a probe's hundredth.
//
// While the demoted are confined, a sandbox called again and again is
// also kept on one CPU of theirs (its cpuset), as long as no more
// sandboxes are called within reserveHold than the demoted have CPUs (each
// then has one of its own) and no sandbox neither demoted nor called ran
// in the last period. Left on every CPU, its sentry ran on the reserved
// CPU and its systrap stubs on the others, where they preempt the
// demoted: each of its system calls crossed CPUs, about 9,000 cross-CPU
// wakeups a second and as many reschedule interrupts on the demoted's
// CPU, and its exec round trip's p99 was 1.1–1.6× its quiet one beside
// ten CPU-bound sandboxes. On a CPU the demoted keep busy it preempts them
// at once (they are idle-class) and that CPU never idles; on the reserved
// CPU, idle between calls 20 ms apart, a VM's halted vCPU woke late and
// the tail grew (docs/BENCHMARKS.md, "The called sandbox kept on one
// CPU"). A sandbox called once (a command that starts work and returns,
// or streams) is not pinned: its work would be held to one CPU; nor is
// one that used heavyCPU or more in the last period, whose own work may
// want more than one. A sandbox that runs while neither demoted nor
// called (one starting to saturate its share, not yet demoted) leaves
// every called sandbox free to move to the reserved CPU; so do demoted
// ones that did not run in the last period (their work ended; on a host
// saturated by others they stay demoted), from whom there is nothing to
// keep apart. Sandboxes called at once keep every CPU when they outnumber
// the demoted's CPUs: ten called at once, each on one CPU of two, ran
// about 30% fewer execs a second than free. Pinned is at most
// reserveHold past the last call, and a sandbox not called that
// saturates its share is demoted as before.
const reserveHold = 2 * time.Second

// cpuReserve keeps CPUs free of demoted sandboxes while others are called
// (see above). called may be called from any goroutine; the others only
// from the quieter's, which alone writes cpusets. A nil *cpuReserve keeps
// nothing.
type cpuReserve struct {
	dir  string // <cpuset hierarchy>/<parent>
	v2   bool
	n    int // how many CPUs to keep
	log  *slog.Logger
	wake chan struct{} // a call wants the demoted confined
	// clock is time.Now, or a test's.
	clock func() time.Time

	mu      sync.Mutex
	demoted map[string]bool
	last    time.Time // the last call to a sandbox not demoted
	// calls is each sandbox not demoted called within reserveHold: its
	// last call, and how many calls each within reserveHold of the one
	// before led to it.
	calls map[string]callRun
	// pinned is the called sandboxes kept on one of the demoted's CPUs,
	// and its number (see above).
	pinned map[string]int
	// othersRan is whether a sandbox neither demoted nor called ran in the
	// last period (period), demotedRan whether a demoted one did: none is
	// pinned unless only the latter.
	othersRan, demotedRan bool
	// heavy is the called sandboxes that used heavyCPU or more in the
	// last period: none of them is pinned.
	heavy    map[string]bool
	confined bool // the demoted are on rest, not on all
	// wasConfined is whether the demoted were confined at any time since
	// the last period began (period).
	wasConfined bool
	all, rest   hostusage.CPUList // the parent's CPUs, and those less the reserve
	// unread is set once confine found no CPUs to keep (and said so).
	unread bool
}

// newCPUReserve returns the reserve of n CPUs of the sandboxes under
// parent, or nil when n is not positive or the host has no cpuset
// controller.
func newCPUReserve(m cgroupMounts, parent string, n int, log *slog.Logger) *cpuReserve {
	r := &cpuReserve{n: n, log: log, wake: make(chan struct{}, 1), clock: time.Now, demoted: map[string]bool{},
		calls: map[string]callRun{}, pinned: map[string]int{}, heavy: map[string]bool{}}
	switch {
	case n <= 0:
		return nil
	case m.cpuset != "":
		r.dir = filepath.Join(m.cpuset, parent)
	case m.v2 != "":
		r.dir, r.v2 = filepath.Join(m.v2, parent), true
	default:
		log.Warn("no cpuset cgroup controller: no CPUs are reserved from demoted sandboxes")
		return nil
	}
	return r
}

// callRun is a sandbox's calls in a run, each within reserveHold of the
// one before: the last one's time, and how many.
type callRun struct {
	last time.Time
	n    int
}

const (
	// pinCalls is how many calls in a run make a sandbox one to pin.
	pinCalls = 2
	// heavyCPU is the CPUs a called sandbox uses in a period from which
	// it is not pinned.
	heavyCPU = 0.9
)

// called tells the reserve of a call to sandbox id's agent: one to a
// sandbox that is not demoted asks for the demoted to be confined, and
// for the called to be pinned when the call makes it one to pin.
func (r *cpuReserve) called(id string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.demoted[id] {
		r.mu.Unlock()
		return
	}
	now := r.clock()
	c := r.calls[id]
	if now.Sub(c.last) >= reserveHold {
		c.n = 0
	}
	c.last, c.n = now, c.n+1
	r.last, r.calls[id] = now, c
	// Confine the demoted; pin one called again; unpin the others when a
	// newcomer may make the called too many.
	ask := len(r.demoted) > 0 && (!r.confined || c.n == pinCalls || c.n == 1 && len(r.pinned) > 0)
	r.mu.Unlock()
	if ask {
		select {
		case r.wake <- struct{}{}:
		default: // asked already
		}
	}
}

// wakeC is where called asks the quieter to confine (never ready for a
// nil reserve).
func (r *cpuReserve) wakeC() <-chan struct{} {
	if r == nil {
		return nil
	}
	return r.wake
}

// confine confines the demoted to the CPUs outside the reserve, unless
// they are already, none is demoted, the last call is older than
// reserveHold, or the parent's CPUs leave none outside it; then it pins
// the called (repin).
func (r *cpuReserve) confine() {
	r.mu.Lock()
	now := r.clock()
	if len(r.demoted) == 0 || now.Sub(r.last) >= reserveHold {
		r.mu.Unlock()
		return
	}
	var ids []string
	if !r.confined {
		if !r.readCPUs() {
			warn := !r.unread
			r.unread = true
			r.mu.Unlock()
			if warn {
				r.log.Warn("reserved CPUs: the instance's cpuset cgroup has no CPUs to read, or one; none are reserved", "dir", r.dir)
			}
			return
		}
		r.confined, r.wasConfined = true, true
		ids = r.demotedIDs()
	}
	rest, pins := r.rest, r.repin(now)
	r.mu.Unlock()
	for _, id := range ids {
		r.write(id, rest)
	}
	r.writeAll(pins)
}

// cpusetWrite is a cpuset to write: sandbox id's CPUs.
type cpusetWrite struct {
	id  string
	set hostusage.CPUList
}

// repin forgets the calls older than reserveHold at now and returns the
// cpusets that keep each sandbox called at least pinCalls times in a run,
// and not heavy, on one of the demoted's CPUs of its own, while the
// demoted are confined, the called are no more than their CPUs, and of
// the others only the demoted ran (demotedRan, othersRan); and that give
// every CPU back to those pinned before and no longer. r.mu is held.
func (r *cpuReserve) repin(now time.Time) []cpusetWrite {
	for id, c := range r.calls {
		if now.Sub(c.last) >= reserveHold {
			delete(r.calls, id)
		}
	}
	keep := r.confined && r.demotedRan && !r.othersRan && len(r.calls) <= len(r.rest)
	var w []cpusetWrite
	taken := map[int]bool{}
	for _, id := range slices.Sorted(maps.Keys(r.pinned)) {
		if _, called := r.calls[id]; keep && called && !r.heavy[id] {
			taken[r.pinned[id]] = true
			continue
		}
		delete(r.pinned, id)
		w = append(w, cpusetWrite{id, r.all})
	}
	if !keep {
		return w
	}
	for _, id := range slices.Sorted(maps.Keys(r.calls)) {
		if _, ok := r.pinned[id]; ok || r.calls[id].n < pinCalls || r.heavy[id] {
			continue
		}
		i := slices.IndexFunc(r.rest, func(cpu int) bool { return !taken[cpu] })
		r.pinned[id], taken[r.rest[i]] = r.rest[i], true
		w = append(w, cpusetWrite{id, hostusage.CPUList{r.rest[i]}})
	}
	return w
}

// demote adds sandbox id to the demoted, confined if the others are (and
// given every CPU if not, which undoes a confinement a killed daemon left).
func (r *cpuReserve) demote(id string) { r.mark(id, true) }

// promote gives sandbox id, not demoted, every CPU: one promoted, one a
// wake made a new cgroup for, or one the quieter sees the first time (a
// killed daemon may have left it pinned). The next repin pins it again if
// it is called.
func (r *cpuReserve) promote(id string) { r.mark(id, false) }

// mark adds sandbox id to the demoted or drops it, unpinned either way,
// and writes its cpuset: the CPUs outside the reserve if it is demoted
// while the others are confined, else every CPU.
func (r *cpuReserve) mark(id string, demoted bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if demoted {
		r.demoted[id] = true
		delete(r.calls, id)
	} else {
		delete(r.demoted, id)
	}
	delete(r.pinned, id)
	ok := r.readCPUs()
	set := r.all
	if demoted && r.confined {
		set = r.rest
	}
	r.mu.Unlock()
	if ok {
		r.write(id, set)
	}
}

// forget drops sandbox id, gone, whose cpuset is not written.
func (r *cpuReserve) forget(id string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.demoted, id)
	delete(r.calls, id)
	delete(r.pinned, id)
	r.mu.Unlock()
}

// period ends a period of the quieter at now, in which each sandbox used
// the CPUs in used (those under activeCPU did not run): it returns the
// CPUs the demoted were confined to at some time in it (empty if never),
// gives them and the pinned every CPU back once reserveHold has passed
// since the last call to a sandbox not demoted, and else repins the
// called.
func (r *cpuReserve) period(now time.Time, used map[string]float64) hostusage.CPUList {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	r.othersRan, r.demotedRan = false, false
	clear(r.heavy)
	for id, cpus := range used {
		c, called := r.calls[id]
		switch {
		case cpus < activeCPU: // it did not run
		case r.demoted[id]:
			r.demotedRan = true
		case !called || now.Sub(c.last) >= reserveHold:
			r.othersRan = true
		case cpus >= heavyCPU:
			r.heavy[id] = true
		}
	}
	var was hostusage.CPUList
	if r.wasConfined {
		was = r.rest
	}
	expired := r.confined && now.Sub(r.last) >= reserveHold
	r.wasConfined = r.confined && !expired
	var pins []cpusetWrite
	if !expired {
		pins = r.repin(now)
	}
	r.mu.Unlock()
	if expired {
		r.release()
	}
	r.writeAll(pins)
	return was
}

// release gives the demoted every CPU back if they are confined, and the
// pinned: the quieter's end (a daemon stopping leaves its sandboxes
// running, and their confinement would outlast the calls it served).
func (r *cpuReserve) release() {
	if r == nil {
		return
	}
	r.mu.Lock()
	var ids []string
	if r.confined {
		r.confined = false
		ids = r.demotedIDs()
	}
	for id := range r.pinned {
		ids = append(ids, id)
		delete(r.pinned, id)
	}
	set := r.all
	r.mu.Unlock()
	for _, id := range ids {
		r.write(id, set)
	}
}

// demotedIDs lists the demoted; r.mu is held.
func (r *cpuReserve) demotedIDs() []string {
	ids := make([]string, 0, len(r.demoted))
	for id := range r.demoted {
		ids = append(ids, id)
	}
	return ids
}

// readCPUs reads the parent's CPUs into all and rest (all less the
// reserve: its lowest-numbered r.n, or all but one if it has no more);
// false if they cannot be read or leave nothing outside a reserve of one.
// r.mu is held.
func (r *cpuReserve) readCPUs() bool {
	file := "cpuset.effective_cpus"
	if r.v2 {
		file = "cpuset.cpus.effective"
	}
	list, err := readTrimmed(filepath.Join(r.dir, file))
	if err != nil {
		return false // no sandbox yet, or no cpuset in the parent
	}
	all, err := hostusage.ParseCPUList(list)
	if err != nil || len(all) < 2 {
		return false
	}
	r.all, r.rest = all, all[min(r.n, len(all)-1):]
	return true
}

// writeAll writes each of w (see write).
func (r *cpuReserve) writeAll(w []cpusetWrite) {
	for _, c := range w {
		r.write(c.id, c.set)
	}
}

// write sets sandbox id's cpuset to set. A cgroup without one (gone, or
// under a v2 parent without the cpuset controller) is skipped.
func (r *cpuReserve) write(id string, set hostusage.CPUList) {
	err := writeExisting(filepath.Join(r.dir, id, "cpuset.cpus"), set.String())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.log.Debug("reserved CPUs: the sandbox has no cpuset cgroup", "sandbox", id)
	case err != nil:
		r.log.Warn("reserved CPUs: set a sandbox's CPUs", "sandbox", id, "cpus", set.String(), "err", err)
	}
}
