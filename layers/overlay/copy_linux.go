package overlay

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// inode identifies a file on the host, to find hard links.
type inode struct{ dev, ino uint64 }

// copier copies a layer (see copyTree).
type copier struct {
	ctx   context.Context
	links map[inode]string // a file with more than one link -> its copy
}

// copyTree copies the layer at src to the new directory dst, keeping what
// overlayfs and a root filesystem need: every kind of file (directories,
// regular files, symlinks, devices, fifos, sockets; overlayfs's whiteouts
// are 0:0 character devices), owners, modes (setuid bits included), every
// extended attribute (trusted.overlay.* marks opaque directories and
// redirects; security.capability file capabilities), access and
// modification times, hard links within src, and holes in sparse files.
// Regular files are cloned (FICLONE) where the filesystem can share
// extents, else copied in the kernel (copy_file_range).
//
// src may change meanwhile (a sandbox the caller did not freeze): what
// disappears during the copy is left out, but the copy is then no
// consistent image of any moment.
func copyTree(ctx context.Context, dst, src string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: src, Err: err}
	}
	c := &copier{ctx: ctx, links: make(map[inode]string)}
	return c.copy(dst, src, &st)
}

// copy copies src, whose lstat is st, to dst, which does not exist.
func (c *copier) copy(dst, src string, st *unix.Stat_t) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	var link inode
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		link = inode{st.Dev, st.Ino}
		if first, ok := c.links[link]; ok {
			return os.Link(first, dst)
		}
	}
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		// Its metadata (times, a read-only mode) after its entries.
		return c.copyDir(dst, src, st)
	case unix.S_IFREG:
		err = copyFile(dst, src)
	case unix.S_IFLNK:
		var target string
		if target, err = os.Readlink(src); err == nil {
			err = os.Symlink(target, dst)
		}
	default:
		if err = unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			err = &os.PathError{Op: "mknod", Path: dst, Err: err}
		}
	}
	if errors.Is(err, fs.ErrNotExist) && missing(src) {
		return nil // removed since its directory was read
	}
	if err != nil {
		return err
	}
	if link != (inode{}) {
		c.links[link] = dst
	}
	return copyMeta(dst, src, st)
}

// copyDir copies the directory src, whose lstat is st, to dst.
func (c *copier) copyDir(dst, src string, st *unix.Stat_t) error {
	f, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	for _, name := range names {
		var cst unix.Stat_t
		p := filepath.Join(src, name)
		if err := unix.Lstat(p, &cst); err == unix.ENOENT {
			continue
		} else if err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		if err := c.copy(filepath.Join(dst, name), p, &cst); err != nil {
			return err
		}
	}
	return copyMeta(dst, src, st)
}

// missing reports whether nothing is at path any more.
func missing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// copyFile copies the regular file src to the new file dst: a clone if
// the filesystem can, else its data segments, leaving holes as holes.
func copyFile(dst, src string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) != nil {
		err = copyData(out, in)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyData copies the data segments of in (SEEK_DATA, SEEK_HOLE) to the
// same offsets of the empty file out, in the kernel where it can
// (copy_file_range, which io.Copy uses between files), and gives out in's
// size.
func copyData(out, in *os.File) error {
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	for off := int64(0); off < size; {
		data, err := in.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, syscall.ENXIO) {
			break // a hole to the end
		}
		if err != nil {
			return err
		}
		hole, err := in.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		hole = min(hole, size)
		if data >= hole {
			break
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return out.Truncate(size)
}

// copyMeta gives dst the owner, extended attributes, mode and times of
// src, whose lstat is st, in the order that keeps each: chown clears
// setuid bits and file capabilities, so it comes first.
func copyMeta(dst, src string, st *unix.Stat_t) error {
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := copyXattrs(dst, src); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return &os.PathError{Op: "chmod", Path: dst, Err: err}
		}
	}
	times := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimensat", Path: dst, Err: err}
	}
	return nil
}

// copyXattrs copies every extended attribute of src to dst (neither
// followed if a symlink).
func copyXattrs(dst, src string) error {
	names, err := xattr(src, "", func(buf []byte) (int, error) { return unix.Llistxattr(src, buf) })
	if err != nil || len(names) == 0 {
		return err
	}
	for _, name := range splitNames(names) {
		value, err := xattr(src, name, func(buf []byte) (int, error) { return unix.Lgetxattr(src, name, buf) })
		if err == unix.ENODATA {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, name, value, 0); err != nil {
			return &os.PathError{Op: "setxattr " + name, Path: dst, Err: err}
		}
	}
	return nil
}

// xattr calls get (a list or a get of the attribute name of path) with a
// buffer large enough, growing it while the value grows.
func xattr(path, name string, get func([]byte) (int, error)) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := get(buf)
		if err == unix.ERANGE {
			if n, err = get(nil); err != nil {
				return nil, &os.PathError{Op: "getxattr " + name, Path: path, Err: err}
			}
			buf = make([]byte, n+256)
			continue
		}
		if err == unix.ENODATA {
			return nil, err
		}
		if err != nil {
			return nil, &os.PathError{Op: "getxattr " + name, Path: path, Err: err}
		}
		return buf[:n], nil
	}
}

// splitNames splits listxattr's NUL-terminated names.
func splitNames(list []byte) []string {
	var names []string
	start := 0
	for i, b := range list {
		if b == 0 {
			if i > start {
				names = append(names, string(list[start:i]))
			}
			start = i + 1
		}
	}
	return names
}

// diskUsage adds up the disk blocks (st_blocks × 512) of everything below
// root, root itself excluded, counting each hard-linked inode once. What
// disappears during the walk (root is an active snapshot's upper dir) is
// not counted.
func diskUsage(ctx context.Context, root string) (int64, error) {
	var total int64
	seen := make(map[inode]bool)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != root && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !d.IsDir() && st.Nlink > 1 {
			k := inode{st.Dev, st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
