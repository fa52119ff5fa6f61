package dockerfile

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// WriteTar writes c to w as a tar stream for the executor to unpack into
// c.Dest: the entries, read again from bc (the context Resolve read), as
// Resolve found them, named relative to c.Dest, owned by c.Owner (root
// without one), with c.Chmod's bits if set, modification times as in the
// context; for an Unpack copy, the archive's entries, checked (see
// unpacker). Names are clean and relative, never with "..", and no
// entry's parent is a symlink of the stream.
//
// A c.Owner given by name must be resolved first (see Owner). A file
// whose content, size or type is no longer what Resolve found is
// ErrChanged; on any error the stream is incomplete and is to be
// discarded.
func (c *Copy) WriteTar(w io.Writer, bc *Context) error {
	if c.Owner != nil && !c.Owner.Resolved() {
		return fmt.Errorf("dockerfile: copy %s: --chown=%s is not resolved to IDs", c.Source, c.Owner)
	}
	if err := c.writeTar(w, bc); err != nil {
		return fmt.Errorf("dockerfile: copy %s: %w", c.Source, err)
	}
	return nil
}

func (c *Copy) writeTar(w io.Writer, bc *Context) error {
	fd, err := bc.open(c.Source)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var sys unix.Stat_t
	if err := unix.Fstat(fd, &sys); err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	isDir := sys.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case isDir && !c.Unpack:
		for _, e := range c.Entries {
			if err := c.writeEntry(tw, bc, fd, e); err != nil {
				return err
			}
		}
	case sys.Mode&unix.S_IFMT == unix.S_IFREG && len(c.Entries) == 1 && c.Entries[0].Type == TypeFile:
		f, err := reopen(fd, c.Source)
		if err != nil {
			return err
		}
		defer f.Close()
		if c.Unpack {
			err = c.writeUnpacked(tw, f, c.Entries[0])
		} else {
			err = c.writeFile(tw, f, c.Entries[0])
		}
		if err != nil {
			return err
		}
	default:
		return changed(c.Source, fmt.Errorf("it is %s", typeName(sys.Mode)))
	}
	return tw.Close()
}

// changed is ErrChanged for name, with why.
func changed(name string, why error) error {
	return fmt.Errorf("%s %w (%v)", name, ErrChanged, why)
}

// header is the tar header of e, with c's owner and mode.
func (c *Copy) header(e Entry, mtime time.Time) *tar.Header {
	h := &tar.Header{Name: e.Name, Mode: int64(e.Mode), ModTime: mtime, Size: e.Size}
	switch e.Type {
	case TypeDir:
		h.Typeflag, h.Name, h.Size = tar.TypeDir, e.Name+"/", 0
	case TypeSymlink:
		h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.Link, 0
	default:
		h.Typeflag = tar.TypeReg
	}
	if c.Owner != nil {
		h.Uid, h.Gid = c.Owner.UID, c.Owner.GID
	}
	if c.Chmod != nil && e.Type != TypeSymlink {
		h.Mode = int64(*c.Chmod)
	}
	return h
}

// writeEntry writes e, found under the directory src (an O_PATH
// descriptor) by its name, following no symlink.
func (c *Copy) writeEntry(tw *tar.Writer, bc *Context, src int, e Entry) error {
	if e.Type == TypeFile {
		f, err := bc.openFile(src, e.Name, false)
		if err != nil {
			return changed(e.Path, err)
		}
		defer f.Close()
		return c.writeFile(tw, f, e)
	}
	fd, err := openat2(src, e.Name, unix.O_PATH|unix.O_NOFOLLOW, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return changed(e.Path, err)
	}
	defer unix.Close(fd)
	var sys unix.Stat_t
	if err := unix.Fstat(fd, &sys); err != nil {
		return err
	}
	want := map[string]uint32{TypeDir: unix.S_IFDIR, TypeSymlink: unix.S_IFLNK}[e.Type]
	if sys.Mode&unix.S_IFMT != want {
		return changed(e.Path, fmt.Errorf("it is %s", typeName(sys.Mode)))
	}
	if e.Type == TypeSymlink {
		if link, err := readlink(fd); err != nil || link != e.Link {
			return changed(e.Path, fmt.Errorf("the link is %q", link))
		}
	}
	return tw.WriteHeader(c.header(e, time.Unix(sys.Mtim.Unix())))
}

// writeFile writes the regular file f as e, checking that its content is
// what Resolve hashed.
func (c *Copy) writeFile(tw *tar.Writer, f *os.File, e Entry) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != e.Size {
		return changed(e.Path, fmt.Errorf("%d bytes, not %d", fi.Size(), e.Size))
	}
	if err := tw.WriteHeader(c.header(e, fi.ModTime())); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(tw, io.TeeReader(io.LimitReader(f, e.Size), h))
	if err != nil {
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	if n != e.Size || "sha256:"+hex.EncodeToString(h.Sum(nil)) != e.Digest {
		return changed(e.Path, fmt.Errorf("its content differs"))
	}
	return nil
}

// writeUnpacked writes the entries of the archive f, checking that the
// archive is what Resolve hashed.
func (c *Copy) writeUnpacked(tw *tar.Writer, f *os.File, e Entry) error {
	h := sha256.New()
	r := io.TeeReader(f, h)
	u := &unpacker{c: c, files: map[string]bool{}, symlinks: map[string]bool{}}
	if err := u.unpack(r, tw); err != nil {
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil { // what follows the archive's end
		return err
	}
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != e.Digest {
		return changed(e.Path, fmt.Errorf("its content differs"))
	}
	return nil
}
