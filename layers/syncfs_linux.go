package layers

import (
	"os"

	"golang.org/x/sys/unix"
)

// Syncfs writes out the whole filesystem that holds path, data and
// metadata, with syncfs(2): one call, cheaper than an fsync per file of a
// tree just written (a root filesystem, a copied layer), and what makes a
// btrfs's quota counters current. Before a snapshot it keeps the
// snapshot's own work, and the time a sandbox is frozen around it, to the
// snapshot itself. The error is the open's, or an
// *os.PathError with Op "syncfs".
func Syncfs(path string) error {
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
