package oci

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/hostusage"
)

// Quiet neighbours. A sandbox that keeps its CPU share saturated is
// demoted: its cpu cgroup is marked idle (cpu.idle, Linux 5.15+, in v1's
// cpu hierarchy and in v2), so among the instance's sandboxes it runs on
// what the others leave, and a quiet sandbox's exec round trip (the
// agent, the command, under runsc the sentry serving both) no longer
// waits behind its processes. Once it has been quiet for a while it is
// promoted back. Demoted sandboxes share the CPUs fairly among
// themselves, as all did before; only their precedence over the quiet
// ones changes. Where cpu.idle is missing, the weight drops to the
// lowest instead (cpu.shares 2, cpu.weight 1).
//
// Every quietPeriod the driver reads each sandbox's CPU time. Its share is
// what it used of what it could have had: its quota (the host's CPUs
// without one), or, while the host's CPUs are saturated (under
// saturatedIdle of them idle), its fair part of them, the CPUs over the
// sandboxes that ran at all, if that is less. A share of at least
// busyShare (saturatedBusyShare on a saturated host, where the host's own
// work takes its part too) for busyPeriods periods in a row demotes a
// sandbox, at most quietShare for quietPeriods promotes it. On a
// saturated host the fair part is over the sandboxes that are not demoted
// (the demoted run on what those leave), and only those using about as
// much as the median of them or more count as busy: a sandbox driven by
// calls (an agent's execs, a probe) uses less than the CPU-bound ones it
// contends with, and once they are demoted it has the CPUs to itself
// without saturating its part. A period on a saturated host never counts
// as quiet for a demoted sandbox: there its little use says only that it
// runs last, not that it wants no more, and promoting it would let it
// take its part from the quiet ones again, to be demoted a second later
// (a flapping that left a demoted sandbox's calls waiting for seconds).
//
// A sandbox whose agent the daemon called at least drivenCalls times in a
// period is driven by calls, and its period counts as quiet whatever it
// used, on a saturated host too: its CPU is its callers' round trips (a
// probe's execs, an agent's commands and file reads), the very work the
// demotions keep others from delaying. At the onset of CPU-bound
// neighbours a probe used more than they did, as they were still
// starting, and was demoted with them: its p99 rose from 2× to 5–11× its
// quiet one. One call in a period is enough: twenty sandboxes each running
// its callers' short commands back to back (test/load's busy scenario)
// got two or three calls a period each, and with the bar at four some
// were demoted, and then confined by the reserved CPUs (reserve.go)
// while the others were called, which halved the scenario's execs a
// second. A sandbox whose processes saturate the CPU while its agent is
// called that often keeps its precedence too; its callers' calls take
// their turns like any (lifecycle's command queue), and its quota still
// bounds it.
const (
	quietPeriod        = 500 * time.Millisecond
	busyShare          = 0.75
	saturatedBusyShare = 0.5
	quietShare         = 0.25
	busyPeriods        = 2
	quietPeriods       = 2
	// saturatedIdle is the part of the host's CPU time left idle under
	// which its CPUs count as saturated.
	saturatedIdle = 0.1
	// activeCPU is the CPUs a sandbox must have used in a period to count
	// among those that ran.
	activeCPU = 0.02
	// typicalPart: on a saturated host, a sandbox that used less than
	// this part of what the median contending sandbox used is not busy,
	// whatever its share.
	typicalPart = 0.75
	// drivenCalls is how many calls to its agent in a period make a
	// sandbox driven by calls (2 a second).
	drivenCalls = 1
)

// QuietNeighbours demotes the sandboxes that saturate their CPU share and
// promotes them once quiet (see above), until ctx ends. It logs once and
// returns at once on a host with no cpu controller it can read.
func (d *Driver) QuietNeighbours(ctx context.Context) {
	q := d.cg.quieter()
	if q == nil {
		d.log.Warn("no cpu cgroup controller: CPU-saturating sandboxes are not demoted")
		return
	}
	q.calls = d.channels.called
	q.reserve = d.reserve
	defer q.close()
	defer q.reserve.release()
	t := time.NewTicker(quietPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			q.tick(now)
		case <-q.reserve.wakeC():
			q.reserve.confine()
		}
	}
}

// quieter is QuietNeighbours' state: the instance's cpu cgroups (cpu:
// where weights and cpu.idle are, usage: where CPU time is), the host's
// CPU times (proc), and what it last saw of each sandbox and of the
// host.
type quieter struct {
	cpu, usage string // <hierarchy>/<parent>
	v2         bool
	proc       string // the host's /proc, for its CPU times
	ncpu       float64
	seen       map[string]*cpuWatch
	fds        map[string]int // each sandbox's usage file, open (cpuTime)
	host       hostusage.CPU
	hostCPUs   map[int]hostusage.CPU // each CPU's, as host
	log        *slog.Logger
	// reserve keeps CPUs free of the demoted while others are called
	// (reserve.go); nil keeps none.
	reserve *cpuReserve
	// calls is how many calls the daemon made to a sandbox's agent so far
	// (channels.called); nil counts none.
	calls func(id string) uint64
}

// cpuWatch is one sandbox's CPU time and count of calls when last read,
// whether the last period's calls made it driven by calls, its run of
// busy or quiet periods, whether it is demoted, and its CFS quota in CPUs
// once read (0 before, or while it has none): a cgroup's quota does not
// change in its life, so it is read once.
type cpuWatch struct {
	ns          uint64
	calls       uint64
	at          time.Time
	driven      bool
	busy, quiet int
	demoted     bool
	quota       float64
}

// quieter returns the instance's quieter, or nil when the host has no cpu
// controller with CPU time to read.
func (c *cgroups) quieter() *quieter {
	q := &quieter{proc: hostusage.Proc, ncpu: float64(runtime.NumCPU()), seen: map[string]*cpuWatch{}, fds: map[string]int{}, log: c.log}
	switch {
	case c.mounts.cpu != "" && c.mounts.cpuacct != "":
		q.cpu, q.usage = filepath.Join(c.mounts.cpu, c.parent), filepath.Join(c.mounts.cpuacct, c.parent)
	case c.mounts.v2 != "":
		q.cpu, q.usage, q.v2 = filepath.Join(c.mounts.v2, c.parent), filepath.Join(c.mounts.v2, c.parent), true
	default:
		return nil
	}
	return q
}

// tick reads every sandbox's CPU time at now, and the host's, and
// demotes or promotes each sandbox by its share. Whether a demoted
// sandbox ran on a saturated host is judged over the CPUs it was confined
// to, if the reserve confined it in the period.
func (q *quieter) tick(now time.Time) {
	used := q.sample(now)
	saturated, confinedSaturated := q.saturated(q.reserve.period(now, used))
	busy, fair, typical := busyShare, q.ncpu, 0.0
	if saturated {
		busy = saturatedBusyShare
		fair, typical = q.contenders(used)
	}
	for id, cpus := range used {
		w := q.seen[id]
		if w.quota == 0 {
			w.quota = q.quota(id)
		}
		could := q.ncpu
		if w.quota > 0 {
			could = min(w.quota, q.ncpu)
		}
		share := cpus / min(could, fair)
		if w.driven || saturated && !w.demoted && cpus < typicalPart*typical {
			// Its callers drive it, or it uses less than the sandboxes it
			// contends with: whatever its share, it is not the one that
			// saturates the host.
			share = min(share, quietShare)
		}
		sat := saturated
		if w.demoted {
			sat = confinedSaturated
		}
		q.judge(id, w, share, busy, sat)
	}
}

// contenders returns, on a saturated host, the fair part of the CPUs of
// each sandbox that ran in the last period and is not demoted (the
// demoted run on what those leave), and the median of what those used.
// With none, the fair part is every CPU and the median 0.
func (q *quieter) contenders(used map[string]float64) (fair, median float64) {
	var running []float64
	for id, cpus := range used {
		if cpus >= activeCPU && !q.seen[id].demoted {
			running = append(running, cpus)
		}
	}
	if len(running) == 0 {
		return q.ncpu, 0
	}
	slices.Sort(running)
	return q.ncpu / float64(len(running)), running[len(running)/2]
}

// sample reads every sandbox's CPU time at now and returns the CPUs each
// used since the last sample (none for one seen the first time, or whose
// cgroup was made again: a wake), forgetting the sandboxes gone.
func (q *quieter) sample(now time.Time) map[string]float64 {
	ents, err := os.ReadDir(q.cpu)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		q.log.Warn("quiet neighbours: list the sandboxes' cpu cgroups", "err", err)
	}
	used := map[string]float64{}
	alive := map[string]bool{}
	for _, e := range ents {
		if !e.IsDir() || validID(e.Name()) != nil {
			continue
		}
		id := e.Name()
		ns, err := q.cpuTime(id)
		if err != nil {
			continue // gone meanwhile, or not the runtime's yet
		}
		alive[id] = true
		w := q.seen[id]
		if w == nil || ns < w.ns {
			// A daemon killed or restarted leaves its demotions and pins
			// behind: take the demoted over, to promote them in time, and
			// give the others every CPU.
			w = &cpuWatch{ns: ns, calls: q.called(id), at: now, demoted: q.isIdle(id)}
			q.seen[id] = w
			if w.demoted {
				q.reserve.demote(id)
			} else {
				q.reserve.promote(id)
			}
			continue
		}
		if dt := now.Sub(w.at); dt > 0 {
			used[id] = float64(ns-w.ns) / float64(dt.Nanoseconds())
		}
		calls := q.called(id)
		w.driven = calls-w.calls >= drivenCalls
		w.ns, w.calls, w.at = ns, calls, now
	}
	for id := range q.seen {
		if !alive[id] {
			delete(q.seen, id)
			q.reserve.forget(id)
		}
	}
	for id := range q.fds {
		if !alive[id] {
			q.closeFile(id)
		}
	}
	return used
}

// called is how many calls the daemon made to sandbox id's agent so far.
func (q *quieter) called(id string) uint64 {
	if q.calls == nil {
		return 0
	}
	return q.calls(id)
}

// saturated reports whether the host's CPUs were nearly all busy since the
// last call, and whether those of confined were (all of them, if it is
// empty); false on the first call, or when /proc/stat cannot be read.
func (q *quieter) saturated(confined hostusage.CPUList) (host, some bool) {
	all, each, err := hostusage.ReadCPUs(q.proc)
	if err != nil {
		return false, false
	}
	lastAll, lastEach := q.host, q.hostCPUs
	q.host, q.hostCPUs = all, each
	host = busySince(lastAll, all)
	if len(confined) == 0 {
		return host, host
	}
	var was, now hostusage.CPU
	for _, n := range confined {
		was.Total, was.Busy = was.Total+lastEach[n].Total, was.Busy+lastEach[n].Busy
		now.Total, now.Busy = now.Total+each[n].Total, now.Busy+each[n].Busy
	}
	return host, busySince(was, now)
}

// busySince reports whether CPU time from last to now was busy but for
// less than saturatedIdle of it (false without a last).
func busySince(last, now hostusage.CPU) bool {
	if last.Total == 0 || now.Total <= last.Total {
		return false
	}
	idle := (now.Total - now.Busy) - (last.Total - last.Busy)
	return float64(idle)/float64(now.Total-last.Total) < saturatedIdle
}

// judge counts share, the part of its CPUs sandbox id used in the last
// period, into w (busy from the share busy up; quiet at most quietShare,
// unless the sandbox is demoted, not driven by calls, and saturated: the
// host, or the CPUs it was confined to, was saturated), and demotes or
// promotes it when its run is long enough.
func (q *quieter) judge(id string, w *cpuWatch, share, busy float64, saturated bool) {
	switch {
	case share >= busy:
		w.busy, w.quiet = w.busy+1, 0
	case share <= quietShare && (w.driven || !(saturated && w.demoted)):
		w.busy, w.quiet = 0, w.quiet+1
	default:
		w.busy, w.quiet = 0, 0
	}
	switch {
	case !w.demoted && w.busy >= busyPeriods:
		if err := q.setIdle(id, true); err != nil {
			q.log.Warn("quiet neighbours: demote", "sandbox", id, "err", err)
			return
		}
		q.reserve.demote(id)
		w.demoted = true
		q.log.Info("quiet neighbours: sandbox demoted while it saturates its CPU share", "sandbox", id, "share", share)
	case w.demoted && w.quiet >= quietPeriods:
		// Its CPUs back before its precedence: a daemon killed between
		// the two leaves it demoted, which the next takes over.
		q.reserve.promote(id)
		if err := q.setIdle(id, false); err != nil {
			q.log.Warn("quiet neighbours: promote", "sandbox", id, "err", err)
			q.reserve.demote(id)
			return
		}
		w.demoted = false
		q.log.Info("quiet neighbours: sandbox promoted", "sandbox", id)
	}
}

// cpuTime is sandbox id's CPU time in nanoseconds, read with one pread of
// its usage file, which the quieter keeps open: opening, reading and
// closing it every period took six system calls a sandbox, and most of
// an idle daemon's CPU (45 ms a second at 200 sandboxes). A file whose
// cgroup was removed (a stop; a wake makes a new one) fails to read
// (ENODEV) and is closed.
func (q *quieter) cpuTime(id string) (uint64, error) {
	fd, ok := q.fds[id]
	if !ok {
		file := "cpuacct.usage"
		if q.v2 {
			file = "cpu.stat"
		}
		var err error
		if fd, err = unix.Open(filepath.Join(q.usage, id, file), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return 0, err
		}
		q.fds[id] = fd
	}
	var buf [1024]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil {
		q.closeFile(id)
		return 0, err
	}
	if q.v2 {
		us, ok := parseKeyed(buf[:n], "usage_usec")
		if !ok {
			return 0, fs.ErrNotExist
		}
		return uint64(us) * 1000, nil
	}
	return strconv.ParseUint(string(bytes.TrimSpace(buf[:n])), 10, 64)
}

// closeFile closes sandbox id's usage file, if open.
func (q *quieter) closeFile(id string) {
	if fd, ok := q.fds[id]; ok {
		unix.Close(fd)
		delete(q.fds, id)
	}
}

// close closes every usage file.
func (q *quieter) close() {
	for id := range q.fds {
		q.closeFile(id)
	}
}

// quota is how many CPUs sandbox id's CFS quota lets it use (its quota
// over its period), or 0 without one.
func (q *quieter) quota(id string) float64 {
	var quota, period float64
	if q.v2 {
		v, _ := readTrimmed(filepath.Join(q.cpu, id, "cpu.max"))
		f := strings.Fields(v)
		if len(f) == 2 {
			quota, _ = strconv.ParseFloat(f[0], 64) // "max" leaves 0
			period, _ = strconv.ParseFloat(f[1], 64)
		}
	} else {
		quota = readFloat(filepath.Join(q.cpu, id, "cpu.cfs_quota_us"))
		period = readFloat(filepath.Join(q.cpu, id, "cpu.cfs_period_us"))
	}
	if quota <= 0 || period <= 0 {
		return 0
	}
	return quota / period
}

// setIdle marks sandbox id's cpu cgroup idle, or not: cpu.idle, else its
// weight at the lowest (or back at the default).
func (q *quieter) setIdle(id string, idle bool) error {
	dir := filepath.Join(q.cpu, id)
	v := "0"
	if idle {
		v = "1"
	}
	err := writeExisting(filepath.Join(dir, "cpu.idle"), v)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	file, low, normal := q.weightKnob()
	if idle {
		return writeExisting(filepath.Join(dir, file), low)
	}
	return writeExisting(filepath.Join(dir, file), normal)
}

// isIdle reports whether sandbox id's cpu cgroup is marked idle (see
// setIdle).
func (q *quieter) isIdle(id string) bool {
	dir := filepath.Join(q.cpu, id)
	if v, err := readTrimmed(filepath.Join(dir, "cpu.idle")); err == nil {
		return v == "1"
	}
	file, low, _ := q.weightKnob()
	v, err := readTrimmed(filepath.Join(dir, file))
	return err == nil && v == low
}

// weightKnob is where a kernel without cpu.idle marks a cgroup idle: its
// weight file, the lowest weight, and the default one.
func (q *quieter) weightKnob() (file, low, normal string) {
	if q.v2 {
		return "cpu.weight", "1", "100"
	}
	return "cpu.shares", "2", "1024"
}

// writeExisting writes v to the file at path, which must exist (a cgroup
// knob: one the kernel lacks is ErrNotExist, never created).
func writeExisting(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readFloat reads a number from a one-line file; 0 when it cannot.
func readFloat(path string) float64 {
	s, err := readTrimmed(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
