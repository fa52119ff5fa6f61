package btrfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

// The loop-mounted backing file, for hosts whose data dir is not on btrfs.
//
// The file is sparse, so it takes host space only as data is written; the
// filesystem is mounted with discard=async so that space freed inside it
// (removed sandboxes) is punched back out of the file. The loop device is
// attached with LO_FLAGS_AUTOCLEAR, so unmounting the filesystem is all it
// takes to detach it: no loop device outlives the mount.

// mountOptions are the btrfs mount options of a backing file, which is also
// mounted noatime so that reads do not dirty metadata that snapshots share.
const mountOptions = "discard=async"

// formatBacking creates the sparse backing file at path (size bytes) and
// makes a btrfs filesystem in it. It formats a temporary file and renames
// it into place, so a backing file that exists is always formatted, and an
// interrupted format is redone from scratch.
func formatBacking(ctx context.Context, path string, size int64) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// Metadata "single", not the default "dup": the backing file lives on
	// the host's filesystem, which owns redundancy, and dup would double
	// every metadata write of every sandbox.
	cmd := exec.CommandContext(ctx, "mkfs.btrfs", "-q", "-m", "single", "-d", "single", "-L", "hearth-layers", tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("mkfs.btrfs %s: %w: %s", tmp, err, bytes.TrimSpace(out))
	}
	if err := layers.Fsync(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return layers.Fsync(filepath.Dir(path))
}

// mountBacking attaches the backing file to a free loop device and mounts
// it at dir.
func mountBacking(backing, dir string) error {
	dev, loop, err := attachLoop(backing)
	if err != nil {
		return err
	}
	// Whatever happens, drop our reference: with autoclear, the device is
	// detached when the mount (if any) goes away.
	defer unix.Close(loop)
	if err := unix.Mount(dev, dir, "btrfs", unix.MS_NOATIME, mountOptions); err != nil {
		unix.IoctlSetInt(loop, unix.LOOP_CLR_FD, 0)
		return &os.PathError{Op: "mount " + dev, Path: dir, Err: err}
	}
	return nil
}

// attachLoop attaches path to a free loop device and returns the device's
// path and an open descriptor of it.
func attachLoop(path string) (string, int, error) {
	backing, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(backing)
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, &os.PathError{Op: "open", Path: "/dev/loop-control", Err: err}
	}
	defer unix.Close(ctl)
	cfg := unix.LoopConfig{Fd: uint32(backing)}
	// Direct I/O keeps the data out of the host's page cache a second
	// time; the kernel falls back to buffered I/O where it cannot.
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], path)
	// Another process may take the free device between GET_FREE and
	// CONFIGURE (EBUSY); try again, as losetup does.
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", -1, fmt.Errorf("get free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", -1, &os.PathError{Op: "open", Path: dev, Err: err}
		}
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if err == nil {
			return dev, fd, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EBUSY) || attempt >= 20 {
			return "", -1, fmt.Errorf("configure %s for %s: %w", dev, path, err)
		}
		time.Sleep(time.Duration(attempt+1) * time.Millisecond)
	}
}

// unmount unmounts dir and waits until the kernel has let go of the loop
// device behind it, so that a caller (a test) that checks for leaked
// devices right after sees none.
func unmount(dir string) error {
	dev := mountSource(dir)
	if err := unix.Unmount(dir, 0); err != nil {
		return &os.PathError{Op: "umount", Path: dir, Err: err}
	}
	if !strings.HasPrefix(dev, "/dev/loop") {
		return nil
	}
	backing := "/sys/block/" + strings.TrimPrefix(dev, "/dev/") + "/loop/backing_file"
	// The kernel lets go once btrfs has torn its superblock down, which
	// under load (other file systems busy, the CPU saturated) has taken
	// over 10 s.
	for i := 0; i < 3000; i++ {
		if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("umount %s: loop device %s still attached after 30s", dir, dev)
}

// mountSource returns the source device of the mount at dir, or "".
func mountSource(dir string) string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		// id parent major:minor root mountpoint opts... - fstype source superopts
		fields := strings.Fields(line)
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				return fields[i+2]
			}
		}
	}
	return ""
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
