// Package kernfile reads the kernel's small files (procfs, cgroupfs,
// sysfs) with plain system calls: an open, the reads, a close.
//
// os.Open hands every descriptor to the Go runtime's poller. On Linux the
// poller refuses regular files but takes cgroup files, which support poll,
// and gVisor's procfs files: there one os.ReadFile is an open, a stat,
// fcntls and an epoll_ctl to add the descriptor and one to remove it
// besides the reads. The agent reads every process's statm several times a
// second while commands run, each call a round trip to gVisor's sentry;
// the daemon reads every sandbox's cgroup files every few seconds, and
// beside 2,000 idle sandboxes reading them this way took a quarter off its
// CPU (docs/BENCHMARKS.md).
//
// Like os.ReadFile these follow symlinks: they are for the kernel's files
// and for files in directories only the caller writes, never for a path
// within a sandbox's reach from the host.
package kernfile

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// Open opens path read-only and close-on-exec, with flags added, retrying
// on EINTR. Errors are *fs.PathError.
func Open(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// Read returns the whole content of the file at path, such as
// /proc/<pid>/statm: it reads until end of file, however long that is (a
// procfs file's size says nothing). Errors are *fs.PathError, a missing
// file's fs.ErrNotExist.
func Read(path string) ([]byte, error) {
	fd, err := Open(path, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 1024)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// DirNames returns the names in the directory at path, such as /proc,
// without "." and "..".
func DirNames(path string) ([]string, error) {
	fd, err := Open(path, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "getdents", Path: path, Err: err}
		case n <= 0:
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}
