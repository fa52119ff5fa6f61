package agent

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Why ptrace: rlimits must hold from a command's first instruction but never
// apply to the agent. Go's SysProcAttr has no rlimit field, prlimit(2) after
// Start is too late (the program already runs), and setting them on the
// agent around the fork would limit the agent itself and race with
// concurrent commands. So the child asks to be traced (PTRACE_TRACEME) just before its
// execve; the kernel stops it with SIGTRAP once the program is loaded and
// before it runs an instruction; the agent, its tracer, lowers the limits
// with prlimit(2) and detaches, discarding the SIGTRAP. That costs a stop
// and a few syscalls, not a second exec (under gVisor a second exec of a Go
// binary cost ≈ 12 ms per command).
//
// One visible effect: exec under ptrace ignores set-user-ID and
// set-group-ID bits, so such a program started directly as the command runs
// with the sandbox user's ids (its own children exec untraced).

// limits are the rlimits of every command, 0 meaning "leave as inherited",
// and the ids the command runs as.
type limits struct {
	nproc    uint64
	uid, gid int
}

func (l limits) none() bool { return l.nproc == 0 }

// startTraced runs fork, which must start one child with SysProcAttr.Ptrace
// set, from a locked OS thread (the tracer is the thread that forks), waits
// for the child's stop at its exec, runs atExec on it (which returns ok
// false when the thread must not serve other goroutines: see apply) and
// detaches. If the child ended before it reached its program's first
// instruction, its final status is returned too (it has been collected:
// nothing else may wait for it). On an error the child is killed and
// collected.
func startTraced(fork func() (*os.Process, error), atExec func(pid int) (ok bool, err error)) (*os.Process, *syscall.WaitStatus, error) {
	runtime.LockOSThread()
	locked := true
	defer func() {
		if locked {
			runtime.UnlockOSThread()
		}
	}()
	p, err := fork()
	if err != nil {
		return nil, nil, err
	}
	for {
		var ws syscall.WaitStatus
		if _, err := wait4(p.Pid, &ws); err != nil {
			return nil, nil, killTraced(p, fmt.Errorf("wait for the command's exec stop: %w", err))
		}
		if !ws.Stopped() {
			return p, &ws, nil
		}
		if ws.StopSignal() != syscall.SIGTRAP {
			// A signal that came before the exec's SIGTRAP: deliver it
			// and wait for the SIGTRAP, still queued behind it.
			if err := syscall.PtraceCont(p.Pid, int(ws.StopSignal())); err != nil {
				return nil, nil, killTraced(p, fmt.Errorf("pass signal %v on to the command: %w", ws.StopSignal(), err))
			}
			continue
		}
		ok, err := atExec(p.Pid)
		locked = ok
		if err != nil {
			return nil, nil, killTraced(p, err)
		}
		if err := syscall.PtraceDetach(p.Pid); err != nil {
			return nil, nil, killTraced(p, fmt.Errorf("detach from the command: %w", err))
		}
		return p, nil, nil
	}
}

// killTraced kills a stopped tracee and collects it, returning err.
func killTraced(p *os.Process, err error) error {
	p.Kill()
	var ws syscall.WaitStatus
	for {
		if _, werr := wait4(p.Pid, &ws); werr != nil || !ws.Stopped() {
			return err
		}
		syscall.PtraceCont(p.Pid, 0) // a stop reported before the kill took
	}
}

// wait4 waits for pid's next state change, retrying on EINTR.
func wait4(pid int, ws *syscall.WaitStatus) (int, error) {
	for {
		wpid, err := syscall.Wait4(pid, ws, syscall.WALL, nil)
		if !errors.Is(err, syscall.EINTR) {
			return wpid, err
		}
	}
}

// apply lowers pid's limits to l. It must run on a locked OS thread.
//
// prlimit(2) on another process takes CAP_SYS_RESOURCE, which the agent
// does not have (nor need otherwise), or a caller whose real uid and gid
// are the target's. Credentials are per thread, so the locked thread takes
// the command's ids as its real ones for the two calls (keeping root as
// effective and saved ids, and so its capabilities) and then takes back its
// own. If it cannot, the thread must not serve other goroutines: apply
// then reports ok false, and the caller leaves the thread locked, so that
// the runtime ends it with its goroutine.
func (l limits) apply(pid int) (ok bool, err error) {
	if l.none() {
		return true, nil
	}
	uid, gid := syscall.Getuid(), syscall.Getgid()
	if err := setres(syscall.SYS_SETRESGID, l.gid, keepID, keepID); err != nil {
		return true, err
	}
	if err := setres(syscall.SYS_SETRESUID, l.uid, keepID, keepID); err != nil {
		return setres(syscall.SYS_SETRESGID, gid, keepID, keepID) == nil, err
	}
	err = lowerLimit(pid, unix.RLIMIT_NPROC, l.nproc)
	ok = setres(syscall.SYS_SETRESUID, uid, keepID, keepID) == nil && setres(syscall.SYS_SETRESGID, gid, keepID, keepID) == nil
	return ok, err
}

// lowerLimit sets both the soft and the hard limit of res of pid to v (so
// the command cannot raise it again), or leaves it when v is 0 or the
// current hard limit is already lower.
func lowerLimit(pid, res int, v uint64) error {
	if v == 0 {
		return nil
	}
	var cur unix.Rlimit
	if err := unix.Prlimit(pid, res, nil, &cur); err != nil {
		return err
	}
	v = min(v, cur.Max)
	return unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil)
}
