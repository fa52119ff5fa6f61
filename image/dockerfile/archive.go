package dockerfile

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Magic numbers of the compressions ADD meets.
var (
	magicGzip  = []byte{0x1f, 0x8b}
	magicBzip2 = []byte("BZh")
	magicXz    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicZstd  = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// archiveProbe is how much of a file (decompressed) is read to tell
// whether it is a tar archive.
const archiveProbe = 1 << 16

// errNotCompressed is decompress's answer for a stream with a
// compression's magic number that does not decompress.
var errNotCompressed = errors.New("not a valid compressed stream")

// decompress undoes a gzip or bzip2 compression of r, and refuses xz and
// zstd, which the standard library does not read.
func decompress(r *bufio.Reader) (io.Reader, error) {
	magic, _ := r.Peek(6)
	switch {
	case bytes.HasPrefix(magic, magicGzip):
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errNotCompressed, err)
		}
		return z, nil
	case bytes.HasPrefix(magic, magicBzip2):
		return bzip2.NewReader(r), nil
	case bytes.HasPrefix(magic, magicXz), bytes.HasPrefix(magic, magicZstd):
		return nil, fmt.Errorf("an xz or zstd compressed file to ADD is %w: hearth unpacks tar archives plain or compressed with gzip or bzip2; COPY it and unpack it in a RUN", ErrUnsupported)
	}
	return r, nil
}

// isArchive reports whether the regular file fd (an O_PATH descriptor) is
// a tar archive, plain or compressed, which ADD unpacks as Docker does: a
// file whose start (decompressed) reads as a tar header.
func (c *Context) isArchive(fd int, name string) (bool, error) {
	f, err := reopen(fd, name)
	if err != nil {
		return false, err
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, archiveProbe))
	if errors.Is(err, errNotCompressed) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	_, err = tar.NewReader(io.LimitReader(r, archiveProbe)).Next()
	return err == nil, nil
}

// unpacker re-writes the entries of an archive ADD unpacks, checked: a
// name is made relative to the destination (a leading "/" dropped) and
// refused if it climbs out of it or passes through a symlink of the
// archive; a hard link must name a file the archive has already given;
// devices and FIFOs are refused. Owners and modes are the archive's
// unless the Copy sets them; extended attributes are dropped.
type unpacker struct {
	c        *Copy
	files    map[string]bool // regular files written, for hard links
	symlinks map[string]bool
}

// unpack copies the archive r's entries to tw.
func (u *unpacker) unpack(r io.Reader, tw *tar.Writer) error {
	z, err := decompress(bufio.NewReader(r))
	if err != nil {
		return err
	}
	tr := tar.NewReader(z)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		out, err := u.header(h)
		if err != nil {
			return fmt.Errorf("archive entry %q: %w", h.Name, err)
		}
		if out == nil {
			continue
		}
		if err := tw.WriteHeader(out); err != nil {
			return err
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
		}
	}
}

// header checks one archive entry and gives the header to write, nil
// for one to skip (the root, pax globals).
func (u *unpacker) header(h *tar.Header) (*tar.Header, error) {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil, nil
	}
	name, err := u.name(h.Name)
	if err != nil || name == "" {
		return nil, err
	}
	out := &tar.Header{Name: name, Mode: h.Mode & 0o7777, Uid: h.Uid, Gid: h.Gid, ModTime: h.ModTime}
	switch h.Typeflag {
	case tar.TypeDir:
		out.Typeflag, out.Name = tar.TypeDir, name+"/"
	case tar.TypeReg, tar.TypeRegA:
		out.Typeflag, out.Size = tar.TypeReg, h.Size
		u.files[name] = true
	case tar.TypeSymlink:
		out.Typeflag, out.Linkname, out.Mode = tar.TypeSymlink, h.Linkname, 0o777
		u.symlinks[name] = true
	case tar.TypeLink:
		target, err := u.name(h.Linkname)
		if err != nil || !u.files[target] {
			return nil, fmt.Errorf("%w: a hard link to %q, no file before it", ErrUnsafe, h.Linkname)
		}
		out.Typeflag, out.Linkname = tar.TypeLink, target
	default:
		return nil, fmt.Errorf("%w: type %q (a device, a FIFO, …) is not unpacked", ErrUnsafe, h.Typeflag)
	}
	if c := u.c; c.Owner != nil {
		out.Uid, out.Gid = c.Owner.UID, c.Owner.GID
	}
	if c := u.c; c.Chmod != nil && out.Typeflag != tar.TypeSymlink {
		out.Mode = int64(*c.Chmod)
	}
	return out, nil
}

// name checks an archive name and makes it relative to the destination.
func (u *unpacker) name(raw string) (string, error) {
	p := path.Clean(raw)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("%w: it climbs out of the destination", ErrUnsafe)
	}
	p = strings.TrimLeft(p, "/")
	if p == "." {
		return "", nil
	}
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if u.symlinks[dir] {
			return "", fmt.Errorf("%w: it passes through the archive's symlink %s", ErrUnsafe, dir)
		}
	}
	return p, nil
}
