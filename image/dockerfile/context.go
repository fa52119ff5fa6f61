package dockerfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/sys/unix"
)

// Context is a build context: the directory COPY and ADD read their
// sources from, with its .dockerignore. Every name in it is resolved by
// openat2 from one descriptor of the directory, with RESOLVE_BENEATH,
// RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV: a symlink may lead from one
// place in the context to another, never out of it (an absolute symlink
// is out), and no mount inside it is crossed; a file is read only after
// its descriptor shows a regular file, so a FIFO or a device in the
// context is never opened. The context may be the caller's own directory
// (DirContext) or a tar stream spooled to a private one (TarContext); the
// directory may change under it (a content changed after Resolve is
// ErrChanged at Copy.WriteTar), but nothing it reads lies outside.
//
// .dockerignore is honoured with github.com/moby/patternmatcher, the
// matcher Docker's own client uses: an excluded path is not in the
// context, neither as a source nor inside a copied directory.
//
// A Context is safe for concurrent use. Close releases it; it never
// removes the directory.
type Context struct {
	root int    // O_PATH descriptor of the directory
	dir  string // the caller's name for it, for messages
	real string // the directory as /proc/self/fd names it

	mu     sync.Mutex // patternmatcher is not safe for concurrent use
	ignore *patternmatcher.PatternMatcher
}

// resolveBeneath keeps every resolution inside the context (see Context).
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// maxIgnoreFile is the largest .dockerignore read.
const maxIgnoreFile = 1 << 20

// DirContext opens dir, a directory the caller trusts the name of, as a
// build context, reading its .dockerignore.
func DirContext(dir string) (*Context, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: build context: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	c := &Context{root: fd, dir: dir}
	if c.real, err = os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("dockerfile: build context %s: %w", dir, err)
	}
	if err := c.readIgnore(); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("dockerfile: build context %s: .dockerignore: %w", dir, err)
	}
	return c, nil
}

// Close releases the context's descriptor.
func (c *Context) Close() error { return unix.Close(c.root) }

// Dir is the context's directory.
func (c *Context) Dir() string { return c.dir }

// readIgnore reads .dockerignore, if the context has one.
func (c *Context) readIgnore() error {
	f, err := c.openFile(c.root, ".dockerignore", true)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(io.LimitReader(f, maxIgnoreFile))
	if err != nil {
		return err
	}
	if len(patterns) == 0 {
		return nil
	}
	c.ignore, err = patternmatcher.New(patterns)
	return err
}

// excluded reports whether .dockerignore excludes rel (or a directory
// above it).
func (c *Context) excluded(rel string) (bool, error) {
	if c.ignore == nil || rel == "." {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ignore.MatchesOrParentMatches(rel)
}

// exceptions reports whether .dockerignore re-includes paths (!pattern),
// so that an excluded directory must still be walked.
func (c *Context) exceptions() bool { return c.ignore != nil && c.ignore.Exclusions() }

// openat2 opens name under dirfd with openat2 and resolve; a rename
// meanwhile (EAGAIN) is retried a few times. Its errors are the
// package's: ErrEscapes for a way out of the context, ErrNotFound for
// nothing there.
func openat2(dirfd int, name string, flags, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve}
	var err error
	for range 8 {
		var fd int
		fd, err = unix.Openat2(dirfd, name, &how)
		if err == nil {
			return fd, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	switch err {
	case unix.EXDEV:
		return -1, fmt.Errorf("%s %w", name, ErrEscapes)
	case unix.ENOENT, unix.ENOTDIR:
		return -1, fmt.Errorf("%s %w", name, ErrNotFound)
	}
	return -1, &os.PathError{Op: "openat2", Path: name, Err: err}
}

// open opens rel, a path from the context's root, as an O_PATH
// descriptor: symlinks on the way (and rel itself, if one) are followed
// while they stay in the context.
func (c *Context) open(rel string) (int, error) {
	return openat2(c.root, rel, unix.O_PATH, resolveBeneath)
}

// openFile opens name under dirfd for reading, if it is a regular file
// (checked on an O_PATH descriptor before the file is opened, so that a
// FIFO or a device is never opened). follow allows symlinks that stay
// under dirfd; otherwise no symlink is followed on the way.
func (c *Context) openFile(dirfd int, name string, follow bool) (*os.File, error) {
	resolve, flags := uint64(resolveBeneath), uint64(unix.O_PATH)
	if !follow {
		resolve |= unix.RESOLVE_NO_SYMLINKS
		flags |= unix.O_NOFOLLOW
	}
	fd, err := openat2(dirfd, name, flags, resolve)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is %s, not a regular file", name, typeName(st.Mode))
	}
	return reopen(fd, name)
}

// reopen opens for reading the very inode an O_PATH descriptor holds.
func reopen(fd int, name string) (*os.File, error) {
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(rfd), name), nil
}

// relPath is where fd, a descriptor opened under the root, is in the
// context: its path from the root, symlinks resolved.
func (c *Context) relPath(fd int, name string) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if p == c.real {
		return ".", nil
	}
	rel, ok := strings.CutPrefix(p, strings.TrimSuffix(c.real, "/")+"/")
	if !ok {
		return "", fmt.Errorf("%s %w", name, ErrEscapes)
	}
	return filepath.ToSlash(rel), nil
}

// readNames lists the directory rel under dirfd, sorted, following no
// symlink on the way unless follow.
func readNames(dirfd int, rel string, follow bool) ([]string, error) {
	resolve := uint64(resolveBeneath)
	if !follow {
		resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	fd, err := openat2(dirfd, rel, unix.O_RDONLY|unix.O_DIRECTORY, resolve)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// typeName names a file type for messages.
func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "a regular file"
}

// join is path.Join that keeps "." for the root out of the result.
func join(dir, name string) string {
	if dir == "." || dir == "" {
		return name
	}
	return path.Join(dir, name)
}
