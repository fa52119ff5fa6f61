package oci

import (
	"os"
	"strconv"
	"strings"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/internal/hostusage"
)

// Task ids. Every process and thread of the host takes one, up to
// kernel.pid_max (and kernel.threads-max); an idle sandbox holds about 32
// under runsc (the sentry's threads, the gofer's, the systrap stubs') and
// a start briefly more. A host out of them fails every fork, the daemon's
// and the operator's shell's too, so a start is refused, before it makes
// anything, unless a sandbox's tasks and a reserve for the host are free.
const (
	sandboxTasks = 64
	hostTasks    = 1024
)

// Memory. A host out of memory has its OOM killer pick a victim among
// the sandboxes, the daemon and everything else, so a start is also
// refused, before it makes anything, while the host's available memory
// (MemAvailable: free memory and what the kernel can reclaim) is below the
// reserve the host keeps plus StartMemory, what one start takes: the
// runtime's command and the new sandbox's processes before they settle
// (an idle runsc sandbox holds about 14 MiB after, an idle runc one 3).
// Sandboxes' memory limits are not counted: they are caps that idle
// sandboxes stay far below, and a sandbox that grows meets its own cgroup
// first. The reserve absorbs the starts that run at once (each checks
// alone) and the growth of running sandboxes between two starts.
const StartMemory = 64 << 20

// DefaultMemoryReserve is the memory a start leaves available on a host
// of total bytes when Options.MemoryReserve is zero: a twentieth of it,
// at least 256 MiB and at most 2 GiB.
func DefaultMemoryReserve(total int64) int64 {
	return min(max(total/20, 256<<20), 2<<30)
}

// hostFiles are where the host's task limits and count and its memory are
// read; tests point them elsewhere.
type hostFiles struct {
	pidMax, threadsMax, loadavg, meminfo string
}

var procFiles = hostFiles{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max", "/proc/loadavg", "/proc/meminfo"}

// hostRoom decides whether the host has room for one more sandbox: its
// task ids, and its memory with memReserve (Options.MemoryReserve: zero
// for DefaultMemoryReserve, negative for no memory check).
type hostRoom struct {
	files      hostFiles
	memReserve int64
}

// check returns a *driver.HostLimitError when the host has too few task
// ids or too little memory for one more start (see checkTasks and
// checkMemory), and nil otherwise.
func (h hostRoom) check() error {
	if err := h.files.checkTasks(); err != nil {
		return err
	}
	return h.files.checkMemory(h.memReserve)
}

// checkMemory returns a *driver.HostLimitError, in MiB (free rounded down
// and need up, so the two always differ), when the host's MemAvailable is
// below reserve (DefaultMemoryReserve of its total when zero) plus
// StartMemory; nil when it is not, when reserve is negative,
// or when the kernel does not say (no meminfo, or no MemAvailable in it).
func (f hostFiles) checkMemory(reserve int64) error {
	if reserve < 0 {
		return nil
	}
	b, err := os.ReadFile(f.meminfo)
	if err != nil {
		return nil
	}
	m, err := hostusage.ParseMemory(b)
	if err != nil || m.Available == 0 {
		return nil
	}
	if reserve == 0 {
		reserve = DefaultMemoryReserve(m.Total)
	}
	if need := reserve + StartMemory; m.Available < need {
		return &driver.HostLimitError{What: driver.LimitMemory, Free: int(m.Available >> 20), Need: int((need + 1<<20 - 1) >> 20), Limit: int(m.Total >> 20)}
	}
	return nil
}

// checkTasks returns a *driver.HostLimitError when fewer than a sandbox's
// tasks and the host's reserve are free, and nil when they are, or when
// the files cannot be read (the kernel then says so at the fork).
func (f hostFiles) checkTasks() error {
	limit := readInt(f.pidMax)
	if tm := readInt(f.threadsMax); tm > 0 && (limit <= 0 || tm < limit) {
		limit = tm
	}
	b, err := os.ReadFile(f.loadavg) // "1.0 0.5 0.2 running/total last-pid"
	fields := strings.Fields(string(b))
	if err != nil || limit <= 0 || len(fields) < 4 {
		return nil
	}
	_, total, _ := strings.Cut(fields[3], "/")
	used, err := strconv.Atoi(total)
	if err != nil {
		return nil
	}
	if free := limit - used; free < sandboxTasks+hostTasks {
		return &driver.HostLimitError{What: driver.LimitTaskIDs, Free: free, Need: sandboxTasks + hostTasks, Limit: limit}
	}
	return nil
}

// readInt is the integer in file path, or 0.
func readInt(path string) int {
	s, _ := readTrimmed(path)
	n, _ := strconv.Atoi(s)
	return n
}
