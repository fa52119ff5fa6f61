package oci

import (
	"os"
	"strconv"
	"strings"

	"github.com/hearth/hearth/driver"
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

// hostFiles are where the host's task limits and count are read; tests
// point them elsewhere.
type hostFiles struct {
	pidMax, threadsMax, loadavg string
}

var procFiles = hostFiles{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max", "/proc/loadavg"}

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
		return &driver.HostLimitError{What: "task ids", Free: free, Need: sandboxTasks + hostTasks, Limit: limit}
	}
	return nil
}

// readInt is the integer in file path, or 0.
func readInt(path string) int {
	s, _ := readTrimmed(path)
	n, _ := strconv.Atoi(s)
	return n
}
