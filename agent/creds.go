package agent

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"unsafe"
)

// File operations run with the sandbox user's credentials, so the kernel
// (gVisor's sentry under runsc) refuses them what it refuses the user in a
// shell: chmod or chown of a file the user does not own, setuid or setgid
// bits on one, reading a file it may not read, creating a file where it
// may not write. The agent stays root for everything else.
//
// How: credentials are per thread in Linux and in gVisor (the C library
// and Go's syscall.Setuid broadcast a change to every thread; the raw
// system calls do not), and gVisor has no setfsuid (ENOSYS), so the
// operation's goroutine locks itself to its OS thread and sets that
// thread's supplementary groups, effective gid and effective uid to the
// user's with raw setgroups, setresgid and setresuid, keeping the real and
// saved ids root's: the way back. An effective uid that leaves 0 empties
// the effective capability set, and one that comes back to 0 restores it
// from the permitted set (capabilities(7); gVisor's setKUIDsUnchecked does
// the same, and TestAsUser checks it). A real uid of 0 also keeps the
// user's processes from signalling or tracing the switched thread.
//
// New threads: Go never clones a thread that LockOSThread locked. newm, on
// such a thread, asks the template thread to create the new one (Go's
// runtime/proc.go: "We're on a locked M ... We don't want to clone that
// into another thread"); the template thread is started by the first
// LockOSThread, before its caller has changed anything. So no thread is
// ever born with the user's ids; TestAsUserNewThreads checks it.
//
// If the thread cannot take back the agent's ids, it stays locked: the
// runtime then ends it with its goroutine rather than let it run another.

// ids are credentials a thread can take: its effective uid and gid and its
// supplementary groups.
type ids struct {
	uid, gid int
	groups   []uint32
}

// keepID is -1 for setresuid and setresgid: leave that id as it is.
const keepID = -1

// setres sets the calling thread's real, effective and saved uid (trap
// SYS_SETRESUID) or gid (SYS_SETRESGID); keepID leaves one unchanged.
// Unlike syscall.Setresuid it changes only this thread.
func setres(trap uintptr, r, e, s int) error {
	if _, _, errno := syscall.RawSyscall(trap, uintptr(r), uintptr(e), uintptr(s)); errno != 0 {
		return errno
	}
	return nil
}

// setGroups sets the calling thread's supplementary groups.
func setGroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); errno != 0 {
		return errno
	}
	return nil
}

// become makes to the calling thread's effective ids, from those it has
// now (from). The groups change only when they differ, and while the
// effective uid is still root: setgroups needs CAP_SETGID. The uid changes
// last going away from root and first coming back, for the same reason.
func become(from, to ids) error {
	if to.uid != 0 {
		if !slices.Equal(from.groups, to.groups) {
			if err := setGroups(to.groups); err != nil {
				return fmt.Errorf("setgroups: %w", err)
			}
		}
		if err := setres(syscall.SYS_SETRESGID, keepID, to.gid, keepID); err != nil {
			return fmt.Errorf("setresgid: %w", err)
		}
		if err := setres(syscall.SYS_SETRESUID, keepID, to.uid, keepID); err != nil {
			return fmt.Errorf("setresuid: %w", err)
		}
		return nil
	}
	if err := setres(syscall.SYS_SETRESUID, keepID, to.uid, keepID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	if err := setres(syscall.SYS_SETRESGID, keepID, to.gid, keepID); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if !slices.Equal(from.groups, to.groups) {
		if err := setGroups(to.groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	return nil
}

// userIDs returns the agent's own ids and the sandbox user's (no
// supplementary groups, as its commands), and whether file operations
// switch between them: only a root agent can, and only a user other than
// the agent needs it.
func userIDs(opts Options) (self, user ids, switches bool) {
	self = ids{uid: os.Geteuid(), gid: os.Getegid(), groups: []uint32{}}
	if gs, err := syscall.Getgroups(); err == nil {
		for _, g := range gs {
			self.groups = append(self.groups, uint32(g))
		}
	}
	user = ids{uid: opts.UID, gid: opts.GID, groups: []uint32{}}
	switches = self.uid == 0 && (user.uid != self.uid || user.gid != self.gid || !slices.Equal(self.groups, user.groups))
	return self, user, switches
}

// asUser runs op on a thread of its own with the sandbox user's ids (see
// above), and returns an error without running it when the thread cannot
// take them. op must do its work on the calling goroutine: one it starts
// runs as the agent. Without a user to switch to (a non-root agent, or a
// root user) op runs as the agent.
func (s *Server) asUser(op func()) error {
	if !s.switches {
		op()
		return nil
	}
	runtime.LockOSThread()
	if err := become(s.self, s.user); err != nil {
		if become(s.user, s.self) == nil {
			runtime.UnlockOSThread()
		}
		return fmt.Errorf("agent: take the sandbox user's ids: %w", err)
	}
	defer func() {
		if err := become(s.user, s.self); err != nil {
			s.log.Error("a thread cannot take back the agent's ids; it ends with its goroutine", "err", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	op()
	return nil
}
