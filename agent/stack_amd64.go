package agent

import "golang.org/x/sys/unix"

// stackPointer returns the stack pointer of tracee pid, stopped.
func stackPointer(pid int) (uintptr, error) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(pid, &regs); err != nil {
		return 0, err
	}
	return uintptr(regs.Rsp), nil
}
