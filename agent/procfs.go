package agent

import (
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"
)

// The agent reads the kernel's own files (procfs, cgroupfs) often: the
// memory guard looks at every process's statm several times a second
// while commands run. os.Open hands each descriptor to the Go runtime's
// poller, which on Linux refuses regular files but not gVisor's procfs
// files: there, one os.ReadFile is an openat, four fcntls, an epoll_ctl,
// an fstat, the reads and a close, and every one of them is a round trip
// from the sandbox to the sentry (tens of µs of the host's CPU). These
// read them with plain blocking descriptors instead: an openat, the
// reads, a close.

// readKernelFile returns the whole content of a file of the kernel's,
// such as /proc/<pid>/statm. It is for the kernel's files only: it reads
// until end of file, however long that is.
func readKernelFile(path string) ([]byte, error) {
	fd, err := openKernel(path, 0)
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

// kernelDirNames returns the names in a directory of the kernel's, such as
// /proc, without "." and "..".
func kernelDirNames(path string) ([]string, error) {
	fd, err := openKernel(path, unix.O_DIRECTORY)
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

// eachProcFile calls fn with the pid of every process in the procfs at
// proc and the content of its file (such as "stat"), leaving out the
// processes that exit before theirs is read.
func eachProcFile(proc, file string, fn func(pid int, b []byte)) {
	names, err := kernelDirNames(proc)
	if err != nil {
		return
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue // not a process
		}
		b, err := readKernelFile(proc + "/" + name + "/" + file)
		if err != nil {
			continue // exited meanwhile
		}
		fn(pid, b)
	}
}

// openKernel opens path read-only and close-on-exec, with flags added.
func openKernel(path string, flags int) (int, error) {
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
