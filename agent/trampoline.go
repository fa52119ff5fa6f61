package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// TrampolineArg is the first argument that makes the agent's binary act as
// the trampoline of a command with rlimits instead of as the agent. The
// main function of any binary whose Server sets Options.NProc or
// Options.AddressSpace (hearth-agent, and test binaries) must start with:
//
//	if len(os.Args) > 1 && os.Args[1] == agent.TrampolineArg {
//		agent.Trampoline(os.Args[2:])
//		os.Exit(127)
//	}
const TrampolineArg = "--exec-trampoline"

// selfExe is the agent's own binary as its children see it: a magic link
// that works even when the binary is not on the sandbox's PATH, was
// bind-mounted from the host, or was replaced since.
const selfExe = "/proc/self/exe"

// Why a trampoline: rlimits must hold from the command's first instruction
// but never apply to the agent. Go's SysProcAttr has no rlimit field;
// prlimit(2) on the child after Start is too late (it has already exec'd);
// setting them on the agent around the fork would limit the agent and race
// with concurrent commands. So the child execs the agent's binary again,
// already as the sandbox user and in its own session, which lowers its
// limits and execs the program. The cost is one more exec of a small
// static binary, paid only when limits are set.

// trampolineArgs returns the argv that runs path with argv under the
// limits, reporting an exec failure on status, the child's descriptor
// number of the write end of a close-on-exec pipe.
func trampolineArgs(status int, nproc, as uint64, path string, argv []string) []string {
	return append([]string{
		"hearth-agent", TrampolineArg,
		strconv.Itoa(status),
		strconv.FormatUint(nproc, 10),
		strconv.FormatUint(as, 10),
		path,
	}, argv...)
}

// Trampoline sets the rlimits that trampolineArgs encoded in args (the
// arguments after TrampolineArg) and execs the command. It returns only
// when it could not: it then has written the errno to the status
// descriptor, where the agent reads it as the command's start error, and
// the caller should exit without writing anything (its stdout and stderr
// are the command's).
func Trampoline(args []string) error {
	if len(args) < 5 {
		return errors.New("agent: trampoline: too few arguments")
	}
	status, err := strconv.Atoi(args[0])
	if err != nil || status < 3 {
		return fmt.Errorf("agent: trampoline: bad status descriptor %q", args[0])
	}
	syscall.CloseOnExec(status)
	fail := func(err error) error {
		errno := syscall.EINVAL
		errors.As(err, &errno)
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(errno))
		syscall.Write(status, b[:])
		return err
	}
	for i, res := range []int{unix.RLIMIT_NPROC, unix.RLIMIT_AS} {
		v, err := strconv.ParseUint(args[1+i], 10, 64)
		if err != nil {
			return fail(err)
		}
		if err := lowerLimit(res, v); err != nil {
			return fail(err)
		}
	}
	return fail(syscall.Exec(args[3], args[4:], os.Environ()))
}

// lowerLimit sets both the soft and the hard limit of res to v (so the
// command cannot raise it again), or leaves it when v is 0 or the current
// hard limit is already lower.
func lowerLimit(res int, v uint64) error {
	if v == 0 {
		return nil
	}
	var cur unix.Rlimit
	if err := unix.Prlimit(0, res, nil, &cur); err != nil {
		return err
	}
	v = min(v, cur.Max)
	return unix.Prlimit(0, res, &unix.Rlimit{Cur: v, Max: v}, nil)
}

// readStartError reads what a trampoline wrote to its status pipe: nothing
// (EOF at its exec) means the command started.
func readStartError(r *os.File) error {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil
	}
	return &os.PathError{Op: "exec", Path: "trampoline", Err: syscall.Errno(binary.BigEndian.Uint32(b[:]))}
}
