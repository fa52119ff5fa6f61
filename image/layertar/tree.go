package layertar

import (
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// maxName is the longest entry name or link target accepted (PATH_MAX).
const maxName = 4096

const (
	// inRoot resolves a path from the root's descriptor as if the root
	// were "/": links are followed, but never out of the root, and never
	// through /proc's magic links or onto another mount.
	inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
	// beneath opens one name in a directory descriptor: not a link, not
	// another mount.
	beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV
)

// cleanName returns name relative to the root: "/" and "." components
// dropped, "" for the root itself. A refused name returns the reason.
func cleanName(name string) (rel, reason string) {
	switch {
	case name == "":
		return "", "empty name"
	case strings.IndexByte(name, 0) >= 0:
		return "", "name holds a NUL byte"
	case len(name) > maxName:
		return "", "name longer than 4096 bytes"
	}
	parts := make([]string, 0, strings.Count(name, "/")+1)
	for p := range strings.SplitSeq(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", `name has a ".." component`
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "/"), ""
}

// split returns rel's directory and last name; the root is ("", ".").
func split(rel string) (dir, base string) {
	if rel == "" {
		return "", "."
	}
	dir, base = path.Split(rel)
	return strings.TrimSuffix(dir, "/"), base
}

// join joins a directory relative to the root and a name in it.
func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// openat2 is unix.Openat2 with O_CLOEXEC, retried when a rename or mount
// elsewhere made the kernel give up (EAGAIN) or a signal came (EINTR).
func openat2(dirfd int, name string, flags int, mode uint32, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// openChild opens name, one component, in the directory dirfd: a link is
// never followed (with O_PATH the link itself is opened), and a mount
// point is refused (EXDEV).
func openChild(dirfd int, name string, flags int) (int, error) {
	return openat2(dirfd, name, flags|unix.O_NOFOLLOW, 0, beneath)
}

// tree is the root an Apply writes into, as an open directory.
type tree struct{ fd int }

// openDir opens the directory rel, resolved inside the root, as O_PATH.
func (t tree) openDir(rel string) (int, error) {
	if rel == "" {
		rel = "."
	}
	return openat2(t.fd, rel, unix.O_PATH|unix.O_DIRECTORY, 0, inRoot)
}

// mkdirs opens the directory rel like openDir, first creating what is
// missing of it (mode 0755); created is called with each directory made.
func (t tree) mkdirs(rel string, created func(string)) (int, error) {
	fd, err := t.openDir(rel)
	if err != unix.ENOENT || rel == "" {
		return fd, err
	}
	dir, base := split(rel)
	pfd, err := t.mkdirs(dir, created)
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(pfd, base, 0o755)
	unix.Close(pfd)
	switch err {
	case nil:
		created(rel)
	case unix.EEXIST: // a link whose target is missing: openDir says ENOENT again
	default:
		return -1, err
	}
	return t.openDir(rel)
}

// readNames returns the names in the directory dirfd, sorted.
func readNames(dirfd int) ([]string, error) {
	fd, err := openat2(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// removeAll removes name from the directory dirfd, with its contents if it
// is a directory; a link is removed, never followed, and a mount point is
// not entered. A name that is not there is no error. removed is called
// with the lstat of each non-directory before it is removed.
func removeAll(dirfd int, name string, removed func(*unix.Stat_t)) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return err
	}
	if !isDir(&st) {
		removed(&st)
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
			return err
		}
		return nil
	}
	fd, err := openChild(dirfd, name, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeAll(fd, n, removed); err != nil {
			return err
		}
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}
