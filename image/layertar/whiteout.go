package layertar

import (
	"strings"

	"golang.org/x/sys/unix"
)

const (
	whPrefix = ".wh."         // a whiteout: .wh.NAME removes NAME
	whOpaque = ".wh..wh..opq" // an opaque directory marker
	whMeta   = ".wh..wh."     // reserved for other markers (aufs)
)

// whiteout applies the whiteout or opaque marker base in the directory
// dir (name is the entry's name in the tar). It removes from the lower
// layers' content only; it creates nothing, not even dir.
func (a *applier) whiteout(name, dir, base string) error {
	a.st.Whiteouts++
	var target string
	switch {
	case base == whOpaque:
	case strings.HasPrefix(base, whMeta):
		a.st.note(join(dir, base), "reserved whiteout name skipped")
		return nil
	default:
		target = base[len(whPrefix):]
		if target == "" || target == "." || target == ".." {
			return refuse(name, "whiteout of no file")
		}
	}
	pfd, err := a.t.openDir(dir)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return nil // nothing below to hide
	}
	if err != nil {
		return fsError(name, "opening its directory inside the root", err)
	}
	defer unix.Close(pfd)
	if target != "" {
		err = a.hideLower(pfd, target, join(dir, target))
	} else {
		a.markAdded(dir)
		err = a.hideLowerIn(pfd, dir)
	}
	if err != nil {
		return fsError(name, "removing lower content", err)
	}
	return nil
}

// hideLower removes what the lower layers have at rel, which is name in
// the directory pfd: all of it if this layer did not add rel, else (for a
// directory this layer has) what is in it that this layer did not add.
func (a *applier) hideLower(pfd int, name, rel string) error {
	if !a.added[rel] {
		return removeAll(pfd, name, a.noteRemoval)
	}
	var st unix.Stat_t
	err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT || err == nil && !isDir(&st) {
		return nil
	}
	if err != nil {
		return err
	}
	fd, err := openChild(pfd, name, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return a.hideLowerIn(fd, rel)
}

// hideLowerIn hides the lower content of each entry of the directory rel,
// open as fd.
func (a *applier) hideLowerIn(fd int, rel string) error {
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := a.hideLower(fd, n, join(rel, n)); err != nil {
			return err
		}
	}
	return nil
}
