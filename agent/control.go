package agent

import (
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxSignal is the highest signal number on Linux (_NSIG - 1, the last
// real-time signal).
const maxSignal = 64

// control applies one FrameControl to the running command: a resize to its
// terminal, a signal to its process group. A control that cannot apply (see
// sandbox.ExecControl) is logged at debug level and dropped: a control
// never fails the exec nor ends its stream.
func (e *execution) control(payload []byte) {
	c, err := DecodeControl(payload)
	if err != nil {
		e.log.Debug("exec: control ignored", "err", err)
		return
	}
	if c.Resize != nil {
		if e.tty == nil {
			e.log.Debug("exec: resize ignored: the command has no terminal")
			return
		}
		if err := setSize(e.tty, *c.Resize); err != nil {
			e.log.Debug("exec: resize ignored", "err", err) // the terminal closed: the command is gone
		}
		return
	}
	sig, ok := parseSignal(c.Signal)
	if !ok {
		e.log.Debug("exec: unknown signal ignored", "signal", c.Signal)
		return
	}
	e.log.Debug("exec: signal", "signal", signalName(sig))
	e.signalGroup(sig)
}

// parseSignal reads a signal as sandbox.ExecControl.Signal gives it: a
// name with or without "SIG", in any case ("TERM", "SIGTERM", "sigterm"),
// or a number from 1 to maxSignal ("15").
func parseSignal(s string) (syscall.Signal, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n), n >= 1 && n <= maxSignal
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	return sig, sig != 0
}
