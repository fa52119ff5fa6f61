package agent

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/kernfile"
	"github.com/hearth/hearth/sandbox"
)

// stdio is a command's standard streams: the child's ends, its fds 0, 1
// and 2, which the agent closes once the command started, and the agent's
// ends.
type stdio struct {
	child [3]*os.File
	// stdin is where stdin frames go, or nil when the caller streams
	// none; input owns it and closes it at FrameEOF.
	stdin *os.File
	// outputs are streamed to the caller, each by a pump that owns it.
	outputs []output
	// tty is the terminal's master, or nil without a terminal; it is
	// also the one output.
	tty *os.File
}

// output is a read end whose content goes out as frames of kind.
type output struct {
	r    *os.File
	kind FrameKind
}

// pipes returns stdio over pipes: stdout and stderr apart, stdin a pipe
// when the caller streams it and /dev/null otherwise.
func pipes(withStdin bool) (_ *stdio, err error) {
	st := &stdio{}
	defer func() {
		if err != nil {
			st.closeChild()
			st.closeOwn()
		}
	}()
	if withStdin {
		st.stdin, st.child[0], err = childPipe(true)
	} else {
		st.child[0], err = devNull()
	}
	if err != nil {
		return nil, fsError(err, "stdin")
	}
	for i, kind := range []FrameKind{FrameStdout, FrameStderr} {
		r, w, err := childPipe(false)
		if err != nil {
			return nil, fsError(err, "stdout and stderr")
		}
		st.child[1+i] = w
		st.outputs = append(st.outputs, output{r, kind})
	}
	return st, nil
}

// childPipe returns a pipe between the agent and a child: own is the
// agent's end, non-blocking and in the Go runtime's poller, and child the
// child's, blocking and never in the poller, which the agent only hands on
// and closes. (os.Pipe would put both ends in the poller, and the child's
// would be set blocking again as it is handed on: under gVisor each of
// those fcntls and epoll_ctls is a round trip to the sentry.) With
// toChild the child reads and the agent writes; otherwise the reverse.
func childPipe(toChild bool) (own, child *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	o, c := p[0], p[1]
	if toChild {
		o, c = c, o
	}
	// The ends are two open files: the child's alone turns blocking.
	if err := unix.SetNonblock(c, false); err != nil {
		unix.Close(o)
		unix.Close(c)
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(o), "|agent"), os.NewFile(uintptr(c), "|child"), nil
}

// devNull opens /dev/null for a child's stdin, outside the poller.
func devNull() (*os.File, error) {
	fd, err := kernfile.Open(os.DevNull, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), os.DevNull), nil
}

// terminal returns stdio over a new terminal of the given size whose slave,
// the child's fds 0, 1 and 2, belongs to uid. Everything the command writes
// comes back as stdout. When the caller streams stdin, stdin is a
// descriptor of the master of its own (a dup), so that closing it at
// FrameEOF ends the input but leaves the terminal open: a terminal whose
// master closes hangs up, which would SIGHUP the command.
func terminal(size sandbox.TTYSize, withStdin bool, uid int) (*stdio, error) {
	master, slave, err := openPTY(size, uid)
	if err != nil {
		return nil, err
	}
	st := &stdio{
		child:   [3]*os.File{slave, slave, slave},
		outputs: []output{{master, FrameStdout}},
		tty:     master,
	}
	if withStdin {
		err = control(master, func(fd int) error {
			dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			if err == nil {
				st.stdin = os.NewFile(uintptr(dup), master.Name())
			}
			return err
		})
		if err != nil {
			st.closeChild()
			st.closeOwn()
			return nil, ptyError(err)
		}
	}
	return st, nil
}

// closeChild closes the child's ends (the one slave of a terminal thrice:
// closing an os.File again does nothing).
func (st *stdio) closeChild() {
	for _, f := range st.child {
		closeFile(f)
	}
}

// closeOwn closes the agent's ends, for a command that did not start.
func (st *stdio) closeOwn() {
	closeFile(st.stdin)
	for _, o := range st.outputs {
		o.r.Close()
	}
}
