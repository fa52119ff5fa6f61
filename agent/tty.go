package agent

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

const (
	// defaultRows and defaultCols replace a zero sandbox.TTYSize field.
	defaultRows = 24
	defaultCols = 80
	// defaultTerm is TERM on a terminal unless the request's env sets it.
	defaultTerm = "xterm-256color"
	// ptmx is the multiplexer that hands out new pseudo-terminals; runc
	// links it to the ptmx of the sandbox's devpts, gVisor has its own.
	ptmx = "/dev/ptmx"
)

// openPTY opens a new pseudo-terminal of the given size (zeros meaning the
// defaults) whose slave belongs to uid. The master is non-blocking, so that
// its reads honour deadlines as the pipes' do; the slave is blocking, as
// programs expect of their stdio. Neither becomes the agent's controlling
// terminal (O_NOCTTY): as PID 1 the agent may be a session leader without
// one. A failure is unavailable: the sandbox is out of terminals or has no
// devpts.
func openPTY(size sandbox.TTYSize, uid int) (master, slave *os.File, err error) {
	mfd, err := unix.Open(ptmx, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, ptyError(err)
	}
	master = os.NewFile(uintptr(mfd), ptmx)
	name, err := unlockPTY(master)
	if err == nil {
		err = setSize(master, size)
	}
	if err != nil {
		master.Close()
		return nil, nil, ptyError(err)
	}
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, ptyError(err)
	}
	slave = os.NewFile(uintptr(sfd), name)
	// As login and sshd do, the user owns its terminal (the devpts mount
	// gives it the tty group and mode 0620): mesg, write and whatever else
	// reopens it by name can then use it as the command does.
	if err := slave.Chown(uid, -1); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, ptyError(err)
	}
	return master, slave, nil
}

// unlockPTY unlocks the slave of master, which a new pseudo-terminal keeps
// locked until its owner is ready (TIOCSPTLCK), and returns its path.
func unlockPTY(master *os.File) (string, error) {
	var n uint32
	err := control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return err
		}
		var err error
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		return err
	})
	return "/dev/pts/" + strconv.FormatUint(uint64(n), 10), err
}

// setSize sets the size of the terminal of master (zeros meaning the
// defaults). When it changes, the kernel sends SIGWINCH to the terminal's
// foreground process group.
func setSize(master *os.File, size sandbox.TTYSize) error {
	ws := &unix.Winsize{Row: size.Rows, Col: size.Cols}
	if ws.Row == 0 {
		ws.Row = defaultRows
	}
	if ws.Col == 0 {
		ws.Col = defaultCols
	}
	return control(master, func(fd int) error { return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) })
}

// control runs op on f's descriptor. Unlike f.Fd it leaves the descriptor
// non-blocking, and it fails once f is closed.
func control(f *os.File, op func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(int(fd)) }); err != nil {
		return err
	}
	return opErr
}

func ptyError(err error) error {
	return sandbox.Errorf(sandbox.CodeUnavailable, "cannot open a terminal in this sandbox: %v", err).
		WithHint("run the command without tty")
}
