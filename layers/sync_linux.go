package layers

import (
	"os"

	"golang.org/x/sys/unix"
)

// SyncFS writes out the dirty data and metadata of the filesystem that
// holds path (one syncfs(2), cheaper than an fsync of every file). A
// snapshot writes it out anyway; doing it first keeps the snapshot's own
// work, and the time a sandbox is frozen around it, to the snapshot itself.
// Btrfs quota counters move only when the sync commits a transaction.
func SyncFS(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return &os.PathError{Op: "syncfs", Path: path, Err: err}
	}
	return nil
}
