package dockerfile

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultMaxContext is TarContext's limit on the bytes of a context's
// files when the caller gives none: 1 GiB.
const DefaultMaxContext = 1 << 30

// TarContext spools r, a build context as a tar stream (plain or gzip),
// into dir, and opens dir as a Context. dir is the caller's: it must not
// exist (it is made, mode 0700) or be an empty directory; the caller
// removes it when done with the Context.
//
// Every entry lands under dir or the whole stream is refused: a name that
// is absolute or climbs out with ".." (ErrEscapes), that passes through a
// symlink of the stream or names something twice, a device or a FIFO, a
// hard link to a file not given before it (ErrUnsafe), more than
// maxBytes of file content (DefaultMaxContext if maxBytes <= 0) or more
// than MaxEntries entries (ErrTooLarge). Files are made with openat and
// O_CREAT|O_EXCL|O_NOFOLLOW under a parent reached by openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so nothing is ever written through
// a symlink; symlinks are stored as written, never followed; a hard link
// is stored as a copy of its file. Owners are not kept (a COPY gives its
// files to root or to --chown); modes and file modification times are.
// On an error, what was spooled is removed, and dir too if TarContext
// made it.
func TarContext(r io.Reader, dir string, maxBytes int64) (*Context, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxContext
	}
	created, err := prepareDir(dir)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: build context: %w", err)
	}
	c, err := spoolAndOpen(r, dir, maxBytes)
	if err != nil {
		removeSpooled(dir, created)
		return nil, fmt.Errorf("dockerfile: build context: %w", err)
	}
	return c, nil
}

// prepareDir makes dir, or checks that it is an empty directory; it
// reports whether it made it.
func prepareDir(dir string) (bool, error) {
	err := os.Mkdir(dir, 0o700)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return false, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%s is not a directory", dir)
	}
	names, err := readDirNames(dir)
	if err != nil {
		return false, err
	}
	if len(names) > 0 {
		return false, fmt.Errorf("%s is not empty", dir)
	}
	return false, nil
}

// readDirNames lists dir.
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// removeSpooled removes what TarContext wrote into dir, and dir if it
// made it. os.RemoveAll removes symlinks, never what they name.
func removeSpooled(dir string, created bool) {
	if created {
		os.RemoveAll(dir)
		return
	}
	names, _ := readDirNames(dir)
	for _, n := range names {
		os.RemoveAll(filepath.Join(dir, n))
	}
}

// spoolAndOpen spools r into dir and opens the context.
func spoolAndOpen(r io.Reader, dir string, maxBytes int64) (*Context, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(root)
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, magicGzip) {
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		in = z
	}
	s := &spooler{root: root, left: maxBytes, max: maxBytes, dirModes: map[string]uint32{}}
	if err := s.spool(tar.NewReader(in)); err != nil {
		return nil, err
	}
	return DirContext(dir)
}

// spooler writes a context's entries under root.
type spooler struct {
	root      int
	left, max int64 // bytes of file content left, of max
	entries   int
	dirModes  map[string]uint32 // applied at the end, so a read-only directory still takes its entries
}

// spool writes every entry of tr.
func (s *spooler) spool(tr *tar.Reader) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return s.applyDirModes()
		}
		if err != nil {
			return fmt.Errorf("reading the tar stream: %w", err)
		}
		if s.entries++; s.entries > MaxEntries {
			return fmt.Errorf("more than %d entries: %w", MaxEntries, ErrTooLarge)
		}
		if err := s.entry(h, tr); err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
}

// spoolName checks an entry's name and cleans it ("." for the root).
func spoolName(raw string) (string, error) {
	if path.IsAbs(raw) {
		return "", fmt.Errorf("an absolute name %w", ErrEscapes)
	}
	p := path.Clean(raw)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("a name climbing out with .. %w", ErrEscapes)
	}
	return p, nil
}

// entry writes one entry.
func (s *spooler) entry(h *tar.Header, r io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := spoolName(h.Name)
	if err != nil {
		return err
	}
	if name == "." {
		return nil
	}
	parent, err := s.mkdirAll(path.Dir(name))
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	base := path.Base(name)
	switch h.Typeflag {
	case tar.TypeDir:
		return s.dir(parent, name, base, uint32(h.Mode&0o7777))
	case tar.TypeReg, tar.TypeRegA:
		return s.file(parent, base, h, r)
	case tar.TypeSymlink:
		return exists(unix.Symlinkat(h.Linkname, parent, base))
	case tar.TypeLink:
		return s.hardLink(parent, base, h)
	}
	return fmt.Errorf("%w: type %q (a device, a FIFO, …) has no place in a build context", ErrUnsafe, h.Typeflag)
}

// exists turns EEXIST into ErrUnsafe (a name given twice).
func exists(err error) error {
	if err == unix.EEXIST {
		return fmt.Errorf("%w: the name is given twice", ErrUnsafe)
	}
	return err
}

// mkdirAll opens the directory rel under the root, making what is
// missing (mode 0755), through no symlink; the caller closes it.
func (s *spooler) mkdirAll(rel string) (int, error) {
	fd, err := unix.Dup(s.root)
	if err != nil || rel == "." {
		return fd, err
	}
	for _, comp := range strings.Split(rel, "/") {
		next, err := openat2(fd, comp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
		if errors.Is(err, ErrNotFound) {
			if err := unix.Mkdirat(fd, comp, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(fd)
				return -1, err
			}
			next, err = openat2(fd, comp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%w: its parent %s is not a directory (a file or a symlink of the stream?)", ErrUnsafe, rel)
		}
		fd = next
	}
	return fd, nil
}

// dir makes a directory (or takes one the stream implied earlier).
func (s *spooler) dir(parent int, name, base string, mode uint32) error {
	err := unix.Mkdirat(parent, base, 0o755)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if e := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); e == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = nil
		}
	}
	if err != nil {
		return exists(err)
	}
	s.dirModes[name] = mode
	return nil
}

// file writes a regular file of h.Size bytes from r.
func (s *spooler) file(parent int, base string, h *tar.Header, r io.Reader) error {
	if h.Size > s.left {
		return fmt.Errorf("the context's files are over %d bytes: %w", s.max, ErrTooLarge)
	}
	s.left -= h.Size
	fd, err := unix.Openat(parent, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return exists(err)
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	if _, err := io.CopyN(f, r, h.Size); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, uint32(h.Mode&0o7777)); err != nil {
		return err
	}
	if !h.ModTime.IsZero() {
		tv := unix.NsecToTimeval(h.ModTime.UnixNano())
		if err := unix.Futimes(fd, []unix.Timeval{tv, tv}); err != nil {
			return err
		}
	}
	return nil
}

// hardLink stores a hard link as a copy of the regular file it names,
// which the stream gave before it.
func (s *spooler) hardLink(parent int, base string, h *tar.Header) error {
	target, err := spoolName(h.Linkname)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", h.Linkname, err)
	}
	fd, err := openat2(s.root, target, unix.O_PATH|unix.O_NOFOLLOW, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return fmt.Errorf("%w: a hard link to %q, no file before it", ErrUnsafe, h.Linkname)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: a hard link to %q, which is %s", ErrUnsafe, h.Linkname, typeName(st.Mode))
	}
	src, err := reopen(fd, target)
	if err != nil {
		return err
	}
	defer src.Close()
	copyHdr := &tar.Header{Size: st.Size, Mode: int64(st.Mode & 0o7777), ModTime: h.ModTime}
	return s.file(parent, base, copyHdr, src)
}

// applyDirModes gives the directories their modes, once every entry is in.
func (s *spooler) applyDirModes() error {
	for name, mode := range s.dirModes {
		fd, err := openat2(s.root, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, resolveBeneath|unix.RESOLVE_NO_SYMLINKS)
		if err != nil {
			return err
		}
		err = unix.Fchmod(fd, mode)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}
