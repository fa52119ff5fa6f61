package layers

import (
	"os"

	"golang.org/x/sys/unix"
)

// SyncFS writes out the dirty data and metadata of the filesystem that
// holds path (one syncfs(2), cheaper than an fsync of every file). A
// snapshot writes it out anyway; doing it first keeps the snapshot's own
// work, and the time a sandbox is frozen around it, to the snapshot itself.
func SyncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return &os.PathError{Op: "syncfs", Path: path, Err: err}
	}
	return nil
}
