package layertar

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrHostile is matched (errors.Is) by the *Error of every entry Apply
// refuses: a name that would climb out of the root, a hard link to
// something that is not a regular file inside it, an entry or a layer over
// the Limits, a malformed tar, and the like. The layer is bad; the host is
// fine.
var ErrHostile = errors.New("hostile or malformed layer")

// Error is an entry Apply refused or could not apply, or a file Write could
// not write.
type Error struct {
	// Path is the entry's name as the tar gives it (Apply), or the file's
	// path under the root (Write).
	Path string
	// Reason says what is wrong, in words safe to show.
	Reason string
	// Err is ErrHostile when the input is refused, or else the system or
	// read error behind the failure.
	Err error
}

func (e *Error) Error() string {
	if e.Err == nil || e.Err == ErrHostile {
		return fmt.Sprintf("layertar: %q: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("layertar: %q: %s: %v", e.Path, e.Reason, e.Err)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// refuse returns the ErrHostile error for path.
func refuse(path, format string, args ...any) error {
	return &Error{Path: path, Reason: fmt.Sprintf(format, args...), Err: ErrHostile}
}

// fsError returns the error for a system call on path's behalf that failed
// with err. The errors a layer can cause on a healthy filesystem (a
// directory that is a file, a link loop, a mount point, a name too long,
// arguments the kernel rejects) refuse the entry; the others (no space, an
// I/O error) are the host's and are wrapped as they are.
func fsError(path, what string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.EXDEV, unix.ENAMETOOLONG,
			unix.EEXIST, unix.EISDIR, unix.EMLINK, unix.EINVAL, unix.ERANGE, unix.E2BIG:
			return refuse(path, "%s: %v", what, errno)
		}
	}
	return &Error{Path: path, Reason: what, Err: err}
}
