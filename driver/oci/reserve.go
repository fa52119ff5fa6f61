package oci

import (
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
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

	mu       sync.Mutex
	demoted  map[string]bool
	last     time.Time // the last call to a sandbox not demoted
	confined bool      // the demoted are on rest, not on all
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
	r := &cpuReserve{n: n, log: log, wake: make(chan struct{}, 1), clock: time.Now, demoted: map[string]bool{}}
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

// called tells the reserve of a call to sandbox id's agent: one to a
// sandbox that is not demoted asks for the demoted to be confined.
func (r *cpuReserve) called(id string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.demoted[id] {
		r.mu.Unlock()
		return
	}
	r.last = r.clock()
	ask := !r.confined && len(r.demoted) > 0
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
// reserveHold, or the parent's CPUs leave none outside it.
func (r *cpuReserve) confine() {
	r.mu.Lock()
	if r.confined || len(r.demoted) == 0 || r.clock().Sub(r.last) >= reserveHold {
		r.mu.Unlock()
		return
	}
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
	ids, set := r.demotedIDs(), r.rest
	r.mu.Unlock()
	for _, id := range ids {
		r.write(id, set)
	}
}

// demote adds sandbox id to the demoted, confined if the others are (and
// given every CPU if not, which undoes a confinement a killed daemon left).
func (r *cpuReserve) demote(id string) { r.mark(id, true) }

// promote gives sandbox id, no longer demoted, every CPU back.
func (r *cpuReserve) promote(id string) { r.mark(id, false) }

// mark adds sandbox id to the demoted or drops it, and writes its cpuset:
// the CPUs outside the reserve if it is demoted while the others are
// confined, else every CPU.
func (r *cpuReserve) mark(id string, demoted bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if demoted {
		r.demoted[id] = true
	} else {
		delete(r.demoted, id)
	}
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

// forget drops sandbox id, gone or in a cgroup made again (a wake), whose
// cpuset is not written.
func (r *cpuReserve) forget(id string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.demoted, id)
	r.mu.Unlock()
}

// period ends a period of the quieter at now: it returns the CPUs the
// demoted were confined to at some time in it (empty if never), and
// gives them every CPU back once reserveHold has passed since the last
// call to a sandbox not demoted.
func (r *cpuReserve) period(now time.Time) hostusage.CPUList {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	var was hostusage.CPUList
	if r.wasConfined {
		was = r.rest
	}
	expired := r.confined && now.Sub(r.last) >= reserveHold
	r.wasConfined = r.confined && !expired
	r.mu.Unlock()
	if expired {
		r.release()
	}
	return was
}

// release gives the demoted every CPU back if they are confined: the
// quieter's end (a daemon stopping leaves its sandboxes running, and
// their confinement would outlast the calls it served).
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

// write sets sandbox id's cpuset to set. A cgroup without one (gone, or
// under a v2 parent without the cpuset controller) is skipped.
func (r *cpuReserve) write(id string, set hostusage.CPUList) {
	err := writeExisting(filepath.Join(r.dir, id, "cpuset.cpus"), set.String())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.log.Debug("reserved CPUs: the sandbox has no cpuset cgroup", "sandbox", id)
	case err != nil:
		r.log.Warn("reserved CPUs: set a demoted sandbox's CPUs", "sandbox", id, "cpus", set.String(), "err", err)
	}
}
