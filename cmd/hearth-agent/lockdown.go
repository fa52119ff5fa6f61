package main

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockDown puts the agent, PID 1, out of the reach of every other process
// in its sandbox, root's included (an image may ship sudo or another
// setuid-root program):
//
//   - it is not dumpable, so its /proc entries (mem, environ, fd: the
//     host file its console output goes to, the listening socket, a
//     command's secrets on their way) and ptrace need CAP_SYS_PTRACE;
//   - CAP_SYS_PTRACE and CAP_SETPCAP leave the bounding set of every one
//     of its threads, so no command, nor a setuid-root program a command
//     runs, can ever hold them. The agent keeps both in its own permitted
//     and effective sets: under gVisor it traces each command up to its
//     exec.
//
// Capabilities are per thread: the drop goes to every thread the Go
// runtime has (syscall.AllThreadsSyscall; the agent is built without cgo),
// and threads made later inherit the bounding set of the one that made
// them. It fails closed: an agent that cannot lock itself down does not
// serve.
func lockDown() error {
	for _, c := range []uintptr{unix.CAP_SYS_PTRACE, unix.CAP_SETPCAP} {
		if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); errno != 0 {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, errno)
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the agent not dumpable: %w", err)
	}
	return nil
}
