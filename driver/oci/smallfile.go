package oci

import (
	"io/fs"
	"slices"

	"golang.org/x/sys/unix"
)

// readSmallFile reads the whole of a small file with plain system calls:
// an open, reads, a close. os.ReadFile also stats the file and hands its
// descriptor to the runtime's poller, which takes a cgroup file (they
// support poll) with an epoll_ctl to add it and one to remove it: in the
// daemon's periodic reads of every sandbox's cgroup files and pid, that was
// a third of its CPU beside 2,000 sandboxes (docs/BENCHMARKS.md). It is for
// the kernel's files (cgroupfs, procfs, sysfs) and the driver's own state
// files: like os.ReadFile it follows symlinks, so never for a path in a
// sandbox's reach. Errors are *fs.PathError, fs.ErrNotExist among them.
func readSmallFile(path string) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 1024)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
