package agent

import (
	"strconv"

	"github.com/hearth/hearth/internal/kernfile"
)

// The agent reads the kernel's own files (procfs, cgroupfs) often: the
// memory guard looks at every process's statm several times a second
// while commands run, and under gVisor every system call is a round trip
// to the sentry. It reads them through package kernfile, with plain
// blocking descriptors that never enter the runtime's poller.

// eachProcFile calls fn with the pid of every process in the procfs at
// proc and the content of its file (such as "stat"), leaving out the
// processes that exit before theirs is read.
func eachProcFile(proc, file string, fn func(pid int, b []byte)) {
	names, err := kernfile.DirNames(proc)
	if err != nil {
		return
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue // not a process
		}
		b, err := kernfile.Read(proc + "/" + name + "/" + file)
		if err != nil {
			continue // exited meanwhile
		}
		fn(pid, b)
	}
}
