package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

// resolve turns a path from a request into the absolute, cleaned path it
// names: relative paths are relative to the working directory
// (Options.WorkDir, the sandbox user's home unless the image names one). The agent
// runs inside the sandbox's own root, so every result is inside the
// sandbox; resolve only rejects what the kernel cannot take.
func (s *Server) resolve(p string) (string, error) {
	switch {
	case p == "":
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "empty path").WithHint("name a file, absolute or relative to the home directory")
	case strings.IndexByte(p, 0) >= 0:
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "path contains a NUL byte").WithHint("paths cannot contain NUL")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.opts.WorkDir, p)
	}
	return filepath.Clean(p), nil
}

// fileError is the sandbox.Error of a failed file operation: code and
// message, and the errno that says what failed in details "errno"
// ("ENOENT"), for the doors whose clients speak errno (the Sprites
// filesystem API).
func fileError(errno syscall.Errno, code sandbox.Code, format string, args ...any) *sandbox.Error {
	return sandbox.Errorf(code, format, args...).With("errno", unix.ErrnoName(errno))
}

// fsError maps a file system error about path to the sandbox.Error a caller
// sees. Messages name only the caller's path, never the agent's temporary
// files. Every errno a file operation can return for what a caller or the
// sandbox did has a code; the rest (EBADF, EFAULT: the agent's own bugs)
// and errors without an errno become internal, whose cause the agent logs
// and sends for the daemon to log (see Server.fail).
func fsError(err error, path string) error {
	if err == nil {
		return nil
	}
	var se *sandbox.Error
	if errors.As(err, &se) {
		return se
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s: %w", path, err)
	}
	switch errno {
	case syscall.ENOENT:
		return fileError(errno, sandbox.CodeNotFound, "no such file: %s", path).
			WithHint("check the path; relative paths start at the home directory")
	case syscall.EEXIST:
		return fileError(errno, sandbox.CodeAlreadyExists, "%s already exists", path)
	case syscall.EACCES, syscall.EPERM:
		return fileError(errno, sandbox.CodePermissionDenied, "permission denied: %s", path).
			WithHint("the file's mode, owner or attributes forbid this")
	case syscall.EROFS:
		return fileError(errno, sandbox.CodePermissionDenied, "read-only file system: %s", path).
			WithHint("write under the home directory or /tmp")
	case syscall.ENOTDIR:
		return fileError(errno, sandbox.CodeInvalidArgument, "not a directory: %s (or one of its parents)", path)
	case syscall.EISDIR:
		return fileError(errno, sandbox.CodeInvalidArgument, "%s is a directory", path)
	case syscall.ENOTEMPTY:
		return fileError(errno, sandbox.CodeInvalidArgument, "directory %s is not empty", path).
			WithHint("remove it recursively to delete everything below it")
	case syscall.ELOOP:
		return fileError(errno, sandbox.CodeInvalidArgument, "too many levels of symbolic links: %s", path)
	case syscall.ENAMETOOLONG:
		return fileError(errno, sandbox.CodeInvalidArgument, "path too long: %s", path)
	case syscall.EXDEV:
		return fileError(errno, sandbox.CodeInvalidArgument, "cannot rename %s across file systems", path).
			WithHint("copy the file and remove the original instead")
	case syscall.EINVAL:
		return fileError(errno, sandbox.CodeInvalidArgument, "invalid operation on %s", path).
			WithHint("a directory cannot be moved into itself")
	case syscall.EBUSY:
		return fileError(errno, sandbox.CodeUnavailable, "%s is busy (a mount point or in use)", path)
	case syscall.ENOSPC:
		return fileError(errno, sandbox.CodeUnavailable, "no space left on the sandbox's disk writing %s", path).
			WithHint("free space in the sandbox, or give it a larger disk")
	case syscall.EDQUOT:
		return fileError(errno, sandbox.CodeQuotaExceeded, "disk quota exceeded writing %s", path).
			WithHint("free space in the sandbox, or ask for a larger quota")
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM:
		return fileError(errno, sandbox.CodeUnavailable, "the sandbox is out of resources (%s)", errno.Error()).
			WithHint("retry later")
	case syscall.ENXIO, syscall.ENODEV:
		return fileError(errno, sandbox.CodeInvalidArgument, "%s has nothing behind it to open (a socket, or a device with no driver)", path).
			WithHint("only regular files can be read; run a command to use sockets and devices")
	case syscall.EMLINK:
		return fileError(errno, sandbox.CodeInvalidArgument, "too many links to %s or in its directory", path)
	case syscall.EFBIG, syscall.EOVERFLOW:
		return fileError(errno, sandbox.CodeTooLarge, "%s is too large for the file system", path)
	case syscall.EOPNOTSUPP:
		return fileError(errno, sandbox.CodeInvalidArgument, "the file system of %s does not support this operation", path)
	case syscall.ETXTBSY:
		return fileError(errno, sandbox.CodeUnavailable, "%s is a program that is running", path).
			WithHint("retry once it has exited")
	case syscall.EAGAIN, syscall.EINTR, syscall.ESTALE:
		return fileError(errno, sandbox.CodeUnavailable, "%s is busy (%s)", path, errno.Error()).WithHint("retry")
	case syscall.EIO:
		return fileError(errno, sandbox.CodeUnavailable, "input/output error on %s", path).
			WithHint("retry; if it persists the sandbox's disk is failing")
	}
	return fmt.Errorf("%s: %w", path, err)
}

// refuseRoot is the error for remove and rename of "/" (p is resolved),
// which the agent refuses; nil for any other path.
func refuseRoot(op, p string) error {
	if p == "/" {
		return fileError(syscall.EPERM, sandbox.CodeInvalidArgument, "refusing to %s /", op).
			WithHint("name a file or directory below /")
	}
	return nil
}
