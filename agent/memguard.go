package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/internal/kernfile"
)

// Under gVisor the sandbox's memory cgroup only reports, and the host cgroup
// holds the whole user-space kernel: at its limit the host kills the sentry,
// and with it the sandbox. So the agent is the sandbox's OOM killer there
// (Options.Memory): memGuard watches how much memory the sandbox holds, as
// gVisor accounts it (/proc/meminfo's MemTotal minus MemFree: processes'
// anonymous memory, tmpfs and gVisor's page cache), and past the limit it
// SIGKILLs the process with the largest resident set other than the agent,
// as Linux's OOM killer does at a cgroup's limit. The host cgroup sits above
// the limit with room for gVisor itself and for what a command allocates
// between two looks (driver/oci's resources).
//
// It looks more often the closer the sandbox is to its limit: the wait is
// the time a command allocating at guardRate would take to reach it, within
// [guardMinWait, guardMaxWait], or guardSteadyWait once the processes'
// memory has held steady for guardSteadyLooks looks. With no process but
// the agent it does not look at all until a command starts (poke): under
// gVisor each wake-up of an idle agent costs more than a millisecond of
// CPU, ten times a second most of an idle sandbox's.
//
// This replaced a per-command RLIMIT_AS, which refused programs that reserve
// more address space than they use: Go, Node and the JVM reserve gigabytes at
// start (a WebAssembly memory alone reserves 10 GiB).
const (
	guardRate        = 4 << 30 // bytes per second a command may commit
	guardMinWait     = 10 * time.Millisecond
	guardMaxWait     = 100 * time.Millisecond
	guardSteadyWait  = time.Second
	guardSteadyLooks = 5
	guardSteadyBytes = 1 << 20 // a change under this is steady
)

// memGuard kills the largest process while the sandbox holds more than
// limit bytes.
type memGuard struct {
	limit uint64
	proc  string // the procfs root: "/proc"
	self  int    // the agent's pid, never a victim
	kill  func(pid int) error
	log   *slog.Logger
	kills atomic.Uint64 // processes killed so far
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	wake  chan struct{} // poke's, at most one pending

	last   uint64 // the processes' resident sets at the last look
	steady int    // looks in a row they held steady
}

// newMemGuard returns a guard of limit bytes over the processes of proc,
// not yet started.
func newMemGuard(limit uint64, proc string, log *slog.Logger) *memGuard {
	return &memGuard{
		limit: limit,
		proc:  proc,
		self:  os.Getpid(),
		kill:  func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) },
		log:   log,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		wake:  make(chan struct{}, 1),
	}
}

// poke has the guard look now, and go on looking: a command started. A
// nil guard (no memory limit) does nothing.
func (g *memGuard) poke() {
	if g == nil {
		return
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// run guards until close.
func (g *memGuard) run() {
	defer close(g.done)
	dying := map[int]bool{}
	for {
		var timer <-chan time.Time
		if wait, idle := g.check(dying); !idle {
			timer = time.After(wait)
		}
		select {
		case <-g.stop:
			return
		case <-g.wake:
		case <-timer:
		}
	}
}

// close stops the guard and waits for it; later calls do nothing.
func (g *memGuard) close() {
	g.once.Do(func() {
		close(g.stop)
		<-g.done
	})
}

// check looks once, kills when the sandbox is over its limit, and returns
// how long to wait before the next look, or idle when no process but the
// agent is left (nothing to look at until poke). dying holds the processes
// killed that still live: what they hold is as good as free (a victim may
// take a while to die, and other commands keep allocating meanwhile), and
// they are not chosen again.
func (g *memGuard) check(dying map[int]bool) (wait time.Duration, idle bool) {
	// The processes' resident sets are cheap to read (gVisor keeps each
	// as a counter), its accounting of the whole sandbox is not (a read
	// of /proc/meminfo may scan the sandbox's memory: ≈1.5 ms, which ten
	// times a second was most of an idle sandbox's CPU). Under half the
	// limit their sum stands in for the whole.
	used, others := g.residentTotal()
	if others == 0 && len(dying) == 0 {
		return 0, true
	}
	held := used
	if used >= g.limit/2 || len(dying) > 0 {
		var err error
		if used, err = g.used(); err != nil {
			g.log.Warn("memory guard: cannot read the sandbox's memory use", "err", err)
			return guardMaxWait, false
		}
	}
	for pid := range dying {
		rss, alive := g.resident(pid)
		if !alive {
			delete(dying, pid)
			continue
		}
		used -= min(rss, used)
	}
	if used > g.limit {
		g.reclaim(used, dying)
	}
	if len(dying) > 0 {
		return guardMinWait, false
	}
	return g.pace(held, used), false
}

// pace is the wait after a look that found the processes holding held
// bytes and the sandbox used: guardWait's, or guardSteadyWait once held has
// been steady for guardSteadyLooks looks far from the limit.
func (g *memGuard) pace(held, used uint64) time.Duration {
	if max(held, g.last)-min(held, g.last) < guardSteadyBytes && used < g.limit/2 {
		g.steady++
	} else {
		g.steady = 0
	}
	g.last = held
	if g.steady >= guardSteadyLooks {
		return guardSteadyWait
	}
	return guardWait(g.limit, used)
}

// reclaim kills the process with the largest resident set, unless the
// sandbox's processes together hold less than the excess over the limit:
// then the memory is held elsewhere (tmpfs, or victims' memory that gVisor
// has yet to count as free), and killing would free too little of it.
func (g *memGuard) reclaim(used uint64, dying map[int]bool) {
	pid, rss, total := g.largest(dying)
	switch {
	case total < used-g.limit:
		g.log.Debug("memory guard: over the limit, but processes hold less than the excess", "used", used, "limit", g.limit, "held", total)
	case g.kill(pid) != nil:
		g.log.Warn("memory guard: kill failed", "pid", pid)
	default:
		g.kills.Add(1)
		dying[pid] = true
		g.log.Info("memory guard: killed the largest process: the sandbox was over its memory limit",
			"pid", pid, "rss", rss, "used", used, "limit", g.limit)
	}
}

// guardWait is how long the guard may wait when used of limit bytes are
// held: the time guardRate takes to fill the rest.
func guardWait(limit, used uint64) time.Duration {
	if used >= limit {
		return guardMinWait
	}
	wait := time.Duration(float64(limit-used) / guardRate * float64(time.Second))
	return min(max(wait, guardMinWait), guardMaxWait)
}

// used is how many bytes the sandbox's memory holds: MemTotal minus MemFree.
func (g *memGuard) used() (uint64, error) {
	b, err := kernfile.Read(g.proc + "/meminfo")
	if err != nil {
		return 0, err
	}
	return parseMemUsed(b)
}

// parseMemUsed returns MemTotal less MemFree of a /proc/meminfo, in
// bytes.
func parseMemUsed(b []byte) (uint64, error) {
	m, err := hostusage.ParseMemory(b)
	if err != nil {
		return 0, fmt.Errorf("meminfo: %w", err)
	}
	return uint64(m.Total - m.Free), nil
}

// largest returns the process with the largest resident set other than the
// agent, PID 1 and those in skip, that set's size in bytes (pid 0 when there
// is none), and the sizes of all those processes' sets together.
func (g *memGuard) largest(skip map[int]bool) (pid int, rss, total uint64) {
	g.eachResident(func(p int, r uint64) {
		if p == g.self || p <= 1 || skip[p] {
			return
		}
		total += r
		if r > rss {
			pid, rss = p, r
		}
	})
	return pid, rss, total
}

// residentTotal is the sum of every process's resident set, the agent's
// included, and how many processes there are besides the agent and PID 1.
func (g *memGuard) residentTotal() (total uint64, others int) {
	g.eachResident(func(p int, r uint64) {
		total += r
		if p != g.self && p > 1 {
			others++
		}
	})
	return total, others
}

// eachResident calls fn with every process's pid and resident set in
// bytes, from its statm alone (one read per process; a zombie's set is
// empty).
func (g *memGuard) eachResident(fn func(pid int, rss uint64)) {
	eachProcFile(g.proc, "statm", func(pid int, b []byte) {
		if r, ok := parseResident(b); ok {
			fn(pid, r)
		}
	})
}

// resident returns pid's resident set in bytes, and whether it still runs
// (a zombie holds no memory).
func (g *memGuard) resident(pid int) (uint64, bool) {
	dir := g.proc + "/" + strconv.Itoa(pid)
	b, err := kernfile.Read(dir + "/stat")
	if err != nil {
		return 0, false
	}
	if p, ok := parseStat(b); !ok || p.state == 'Z' || p.state == 'X' {
		return 0, false
	}
	if b, err = kernfile.Read(dir + "/statm"); err != nil {
		return 0, false
	}
	return parseResident(b)
}

// parseResident returns the resident set in bytes from a /proc/<pid>/statm
// ("size resident shared text lib data dt", in pages).
func parseResident(b []byte) (uint64, bool) {
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return n * uint64(os.Getpagesize()), true
}
