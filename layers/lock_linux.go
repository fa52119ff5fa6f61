package layers

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DirLock is a Store's hold on its directory, which only one Store at a
// time, in any process, may have open: the file lock in the directory,
// flock'ed.
type DirLock struct{ f *os.File }

// LockDir takes the DirLock of dir: it opens dir/lock, creating it (mode
// 0600) if missing, and flocks it without waiting. It fails with the
// error of the open, or with one wrapping ErrInUse, `<dir> is open
// elsewhere`, if the flock fails (another holds it).
func LockDir(dir string) (*DirLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is open elsewhere: %w", dir, ErrInUse)
	}
	return &DirLock{f: f}, nil
}

// Close releases l. Closing it again does nothing and returns nil. It is
// not safe for concurrent use: a Store calls it with its mutex held.
func (l *DirLock) Close() error {
	f := l.f
	if f == nil {
		return nil
	}
	l.f = nil
	return f.Close()
}
