package layertar

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Write writes the tree under root (an open O_PATH or O_DIRECTORY
// descriptor, not closed) to w as an uncompressed tar stream, ended with
// the tar's end blocks (w itself is not closed), and returns what it
// wrote. Write is what exporting a root and making an image of a sandbox
// need.
//
// The stream is deterministic: each directory comes before its contents,
// the entries of a directory in byte order of their names, and every
// header (PAX format) holds only what the tree decides: the name (a
// directory's ending in "/"), the type, the permission bits with setuid,
// setgid and sticky, the uid and gid as numbers, the modification time to
// the nanosecond, the size or link target, and the extended attributes
// Apply keeps (user.*, and security.capability on regular files). The
// root itself has no entry. A regular file with several names is written
// once, under the first of them, and its other names as hard links to it.
//
// Write never follows a link and never leaves the root: every name is
// opened from its directory's descriptor with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV) and O_NOFOLLOW. A
// symbolic link is written as a link. Device nodes, FIFOs, sockets, mount
// points inside the tree, and names beginning ".wh." (which a layer cannot
// carry: Apply would take them for whiteouts) are skipped, each with a
// note in Stats.Skipped. A sparse file is written whole, its holes as
// zeros (the standard library's tar writer writes no sparse entries). The
// tree should not change while Write runs (a stopped sandbox's root, a
// committed layer): a file that shrinks meanwhile fails Write.
//
// Errors: an *Error naming the path that could not be read or written
// (w's error as its Err), matching ErrHostile for a path longer than 4095
// bytes, which Apply would refuse; ctx's error when ctx is done.
func Write(ctx context.Context, root *os.File, w io.Writer) (Stats, error) {
	defer runtime.KeepAlive(root)
	fd, err := openat2(int(root.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return Stats{}, &Error{Path: ".", Reason: "opening the root", Err: err}
	}
	defer unix.Close(fd)
	wr := &writer{ctx: ctx, tw: tar.NewWriter(w), links: map[fileID]string{}, buf: make([]byte, 1<<20)}
	err = wr.walk(fd, "")
	if err == nil {
		if err = wr.tw.Close(); err != nil {
			err = &Error{Path: ".", Reason: "ending the tar", Err: err}
		}
	}
	return wr.st.done(), err
}

// writer is one Write's state.
type writer struct {
	ctx   context.Context
	tw    *tar.Writer
	st    Stats
	links map[fileID]string // the first name written of each file with several
	buf   []byte
}

// fileID tells files apart.
type fileID struct{ dev, ino uint64 }

// walk writes the entries of the directory rel, open as dirfd.
func (wr *writer) walk(dirfd int, rel string) error {
	names, err := readNames(dirfd)
	if err != nil {
		return &Error{Path: nonEmpty(rel), Reason: "reading the directory", Err: err}
	}
	for _, n := range names {
		if err := wr.ctx.Err(); err != nil {
			return err
		}
		if err := wr.entry(dirfd, n, join(rel, n)); err != nil {
			return err
		}
	}
	return nil
}

// entry writes name, in the directory dirfd, as rel.
func (wr *writer) entry(dirfd int, name, rel string) error {
	if len(rel) >= maxName { // with a directory's "/", longer than Apply takes
		return refuse(rel, "path longer than 4095 bytes")
	}
	if strings.HasPrefix(name, whPrefix) {
		wr.st.note(rel, "name reserved for whiteouts skipped")
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &Error{Path: rel, Reason: "examining the file", Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return wr.dir(dirfd, name, rel)
	case unix.S_IFREG:
		return wr.file(dirfd, name, rel, &st)
	case unix.S_IFLNK:
		return wr.symlink(dirfd, name, rel, &st)
	case unix.S_IFCHR, unix.S_IFBLK:
		wr.st.note(rel, "device node skipped")
	case unix.S_IFIFO:
		wr.st.note(rel, "FIFO skipped")
	default:
		wr.st.note(rel, "socket skipped")
	}
	return nil
}

// open opens name in dirfd, which must still be of the type want, and
// returns its descriptor and status. A mount point is noted, and fd is
// then -1 with no error.
func (wr *writer) open(dirfd int, name, rel string, flags int, want uint32) (int, *unix.Stat_t, error) {
	fd, err := openChild(dirfd, name, flags|unix.O_NONBLOCK)
	if err == unix.EXDEV {
		wr.st.note(rel, "mount point skipped")
		return -1, nil, nil
	}
	if err != nil {
		return -1, nil, &Error{Path: rel, Reason: "opening the file", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != want {
		unix.Close(fd)
		return -1, nil, &Error{Path: rel, Reason: "the file changed while being written", Err: err}
	}
	return fd, &st, nil
}

// dir writes the directory name in dirfd, then its contents.
func (wr *writer) dir(dirfd int, name, rel string) error {
	fd, st, err := wr.open(dirfd, name, rel, unix.O_RDONLY|unix.O_DIRECTORY, unix.S_IFDIR)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	h := header(rel+"/", tar.TypeDir, st)
	if h.PAXRecords, err = readXattrs(fd, false); err != nil {
		return &Error{Path: rel, Reason: "reading extended attributes", Err: err}
	}
	if err := wr.write(h); err != nil {
		return err
	}
	wr.st.Dirs++
	return wr.walk(fd, rel)
}

// file writes the regular file name in dirfd (lst its status before it
// was opened), or a hard link to its first name written.
func (wr *writer) file(dirfd int, name, rel string, lst *unix.Stat_t) error {
	if first, ok := wr.links[fileID{lst.Dev, lst.Ino}]; ok && lst.Nlink > 1 {
		h := header(rel, tar.TypeLink, lst)
		h.Linkname = first
		wr.st.Hardlinks++
		return wr.write(h)
	}
	fd, st, err := wr.open(dirfd, name, rel, unix.O_RDONLY, unix.S_IFREG)
	if err != nil || fd < 0 {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	h := header(rel, tar.TypeReg, st)
	h.Size = st.Size
	if h.PAXRecords, err = readXattrs(fd, true); err != nil {
		return &Error{Path: rel, Reason: "reading extended attributes", Err: err}
	}
	if err := wr.write(h); err != nil {
		return err
	}
	n, err := io.CopyBuffer(wr.tw, io.LimitReader(f, st.Size), wr.buf)
	wr.st.Bytes += n
	if err == nil && n < st.Size {
		return &Error{Path: rel, Reason: "the file shrank while being written", Err: io.ErrUnexpectedEOF}
	}
	if err != nil {
		return &Error{Path: rel, Reason: "copying the file", Err: err}
	}
	wr.st.Files++
	if st.Nlink > 1 {
		wr.links[fileID{st.Dev, st.Ino}] = rel
	}
	return nil
}

// symlink writes the symbolic link name in dirfd.
func (wr *writer) symlink(dirfd int, name, rel string, st *unix.Stat_t) error {
	buf := make([]byte, maxName)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return &Error{Path: rel, Reason: "reading the symbolic link", Err: err}
	}
	h := header(rel, tar.TypeSymlink, st)
	h.Linkname = string(buf[:n])
	wr.st.Symlinks++
	return wr.write(h)
}

// write writes the header h.
func (wr *writer) write(h *tar.Header) error {
	if err := wr.tw.WriteHeader(h); err != nil {
		return &Error{Path: h.Name, Reason: "writing the tar", Err: err}
	}
	wr.st.Entries++
	return nil
}

// header returns the header of rel, of type typ, from its status st.
func header(rel string, typ byte, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     rel,
		Mode:     int64(st.Mode & 0o7777),
		Uid:      int(st.Uid),
		Gid:      int(st.Gid),
		ModTime:  time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:   tar.FormatPAX,
	}
}
