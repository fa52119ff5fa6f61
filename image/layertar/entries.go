package layertar

import (
	"archive/tar"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// file applies a regular file entry.
func (a *applier) file(h *tar.Header, rel string, r io.Reader) error {
	if h.Size > a.lim.MaxFileSize {
		return refuse(h.Name, "size %d is over %d (MaxFileSize)", h.Size, a.lim.MaxFileSize)
	}
	if err := checkOwner(h); err != nil {
		return err
	}
	pfd, base, _, err := a.prepare(h.Name, rel, nil)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := openat2(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600, beneath)
	if err != nil {
		return fsError(h.Name, "creating the file", err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	a.markAdded(rel)
	a.st.Files++
	if err := a.writeContent(h.Name, f, r, h.Size); err != nil {
		return err
	}
	return a.setAttrs(h, pfd, base, fd, true)
}

// dir applies a directory entry: an existing directory is kept, with its
// children; its times are set at the end (setDirTimes).
func (a *applier) dir(h *tar.Header, rel string) error {
	if err := checkOwner(h); err != nil {
		return err
	}
	pfd, base, kept, err := a.prepare(h.Name, rel, isDir)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if !kept {
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return fsError(h.Name, "creating the directory", err)
		}
	}
	a.markAdded(rel)
	a.st.Dirs++
	fd, err := openChild(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fsError(h.Name, "opening the directory", err)
	}
	defer unix.Close(fd)
	if err := a.setAttrs(h, pfd, base, fd, false); err != nil {
		return err
	}
	a.dirTimes[rel] = times(h)
	return nil
}

// symlink applies a symbolic link entry, its target verbatim.
func (a *applier) symlink(h *tar.Header, rel string) error {
	switch {
	case h.Linkname == "":
		return refuse(h.Name, "symbolic link with an empty target")
	case len(h.Linkname) >= maxName:
		return refuse(h.Name, "symbolic link target longer than 4095 bytes")
	}
	if err := checkOwner(h); err != nil {
		return err
	}
	pfd, base, _, err := a.prepare(h.Name, rel, nil)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(h.Linkname, pfd, base); err != nil {
		return fsError(h.Name, "creating the symbolic link", err)
	}
	a.markAdded(rel)
	a.st.Symlinks++
	for _, x := range xattrs(h) {
		a.st.note(rel, "extended attribute "+x.name+" of a symbolic link skipped")
	}
	return a.setAttrs(h, pfd, base, -1, false)
}

// hardlink applies a hard link entry: its target must be a regular file
// inside the root, reached without following any link.
func (a *applier) hardlink(h *tar.Header, rel string) error {
	target, why := cleanName(h.Linkname)
	if why != "" {
		return refuse(h.Name, "hard link target %q: %s", h.Linkname, why)
	}
	tfd, err := openat2(a.t.fd, nonEmpty(target), unix.O_PATH|unix.O_NOFOLLOW, 0, inRoot|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return refuse(h.Name, "hard link target %q is not reachable inside the root without following a link: %v", h.Linkname, err)
	}
	defer unix.Close(tfd)
	var tst unix.Stat_t
	if err := unix.Fstat(tfd, &tst); err != nil {
		return fsError(h.Name, "examining the hard link's target", err)
	}
	if tst.Mode&unix.S_IFMT != unix.S_IFREG {
		return refuse(h.Name, "hard link target %q is not a regular file", h.Linkname)
	}
	same := func(st *unix.Stat_t) bool { return st.Dev == tst.Dev && st.Ino == tst.Ino }
	pfd, base, kept, err := a.prepare(h.Name, rel, same)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if !kept {
		if err := unix.Linkat(tfd, "", pfd, base, unix.AT_EMPTY_PATH); err != nil {
			return fsError(h.Name, "making the hard link", err)
		}
		var now unix.Stat_t
		if err := unix.Fstatat(pfd, base, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fsError(h.Name, "examining the hard link", err)
		}
		a.noteLink(&tst, &now)
	}
	a.markAdded(rel)
	a.st.Hardlinks++
	return nil
}

// nonEmpty returns rel, or "." for the root.
func nonEmpty(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// checkOwner refuses an owner chown cannot take: -1 means "unchanged" to
// the kernel, and ids are 32 bits.
func checkOwner(h *tar.Header) error {
	const maxID = 1<<32 - 2
	if h.Uid < 0 || h.Uid > maxID || h.Gid < 0 || h.Gid > maxID {
		return refuse(h.Name, "owner %d:%d out of range", h.Uid, h.Gid)
	}
	return nil
}

// setAttrs gives the entry base in pfd its owner, then (fd being the
// entry's open descriptor, -1 for a symbolic link) its mode and extended
// attributes — in this order, since chown clears setuid, setgid and file
// capabilities — and, when withTimes, its times.
func (a *applier) setAttrs(h *tar.Header, pfd int, base string, fd int, withTimes bool) error {
	if err := unix.Fchownat(pfd, base, h.Uid, h.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fsError(h.Name, "setting the owner", err)
	}
	if fd >= 0 {
		if err := unix.Fchmod(fd, uint32(h.Mode&0o7777)); err != nil {
			return fsError(h.Name, "setting the mode", err)
		}
		if err := a.setXattrs(h, fd); err != nil {
			return err
		}
	}
	if fd < 0 || withTimes {
		if err := unix.UtimesNanoAt(pfd, base, times(h), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fsError(h.Name, "setting the times", err)
		}
	}
	return nil
}

// times returns h's access and modification times for utimensat; a
// missing access time is the modification time.
func times(h *tar.Header) []unix.Timespec {
	at := h.AccessTime
	if at.IsZero() {
		at = h.ModTime
	}
	return []unix.Timespec{
		{Sec: at.Unix(), Nsec: int64(at.Nanosecond())},
		{Sec: h.ModTime.Unix(), Nsec: int64(h.ModTime.Nanosecond())},
	}
}

// setDirTimes sets the times of the directories of the layer, now that
// their contents are in place. One that a later entry removed or replaced
// is left alone.
func (a *applier) setDirTimes() error {
	for rel, ts := range a.dirTimes {
		dir, base := split(rel)
		pfd, err := a.t.openDir(dir)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && isDir(&st) {
			err = unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		unix.Close(pfd)
		if err != nil {
			return fsError(nonEmpty(rel), "setting the times", err)
		}
	}
	return nil
}
