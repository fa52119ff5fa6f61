package layertar

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Hard links over a lower layer that the kernel does not keep whole.
//
// On a plain filesystem (a btrfs snapshot of the parent layer), the root
// holds the lower layers' files themselves, and a hard link made or
// removed by this layer changes the one inode every name of the file
// shares. On overlayfs (layers/overlay: the root is a mount over read-only
// lower layers) it does not:
//
//   - a name removed or replaced leaves the file's other names on the
//     lower inode, whose link count (st_nlink) still counts the name gone;
//   - a link made to a lower file copies the target up to a new inode
//     (overlayfs's index feature, off there, is what would keep it), so
//     the target's other names stay on the lower inode, no longer one file
//     with it.
//
// An unpacked image must be what the layers say, file by file (umoci's
// unpack is the reference), so Apply repairs both at its end, when the
// layer did anything that can cause them (removed a file with other
// names, or linked to one and the target's inode changed): it walks the
// root and, for each file whose link count is not the number of its names
// there, gives those names one inode again: the inode the layer's link
// went to (the second case), or else a copy of the file made by the
// filesystem (the first: overlayfs copies a file up on any change of its
// attributes, here its times set to what they are). On a plain filesystem
// every count matches, and the walk changes nothing.

// inode identifies a file in the root.
type inode struct{ dev, ino uint64 }

// linkGroup is the names (relative to the root) under which the walk found
// one inode, and its link count.
type linkGroup struct {
	names []string
	nlink uint64
}

// noteRemoval records that the entry st, about to be removed, is a file
// with other names: they may be left with a stale link count.
func (a *applier) noteRemoval(st *unix.Stat_t) {
	if !isDir(st) && st.Nlink > 1 {
		a.relink = true
	}
}

// noteLink records that a link to a file whose inode was before (with
// other names) went to the inode after: the names left on before are to
// join after.
func (a *applier) noteLink(before, after *unix.Stat_t) {
	old := inode{before.Dev, before.Ino}
	if now := (inode{after.Dev, after.Ino}); now != old && before.Nlink > 1 {
		a.relink = true
		a.moved[old] = now
	}
}

// repairLinks walks the root for the files whose link count is not the
// number of their names, and makes each such group one inode again.
func (a *applier) repairLinks() error {
	if !a.relink {
		return nil
	}
	groups := map[inode]*linkGroup{}
	if err := a.collectLinks(a.t.fd, "", groups); err != nil {
		return fsError(".", "finding hard links", err)
	}
	for ino, g := range groups {
		if uint64(len(g.names)) == g.nlink {
			continue
		}
		var target string
		if dest := groups[a.moved[ino]]; dest != nil && len(dest.names) > 0 {
			target = dest.names[0]
		} else {
			target = g.names[0]
			if err := a.copyUp(target); err != nil {
				return fsError(target, "separating the file from its lower layer", err)
			}
		}
		for _, n := range g.names {
			if n == target {
				continue
			}
			if err := a.relinkTo(n, target); err != nil {
				return fsError(n, "linking the name to "+target+" again", err)
			}
		}
	}
	return nil
}

// collectLinks adds to groups the regular files, in the directory rel
// (open as dirfd) and below it, that have more than one link or that a
// link of this layer went to.
func (a *applier) collectLinks(dirfd int, rel string, groups map[inode]*linkGroup) error {
	names, err := readNames(dirfd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		p := join(rel, n)
		if isDir(&st) {
			fd, err := openChild(dirfd, n, unix.O_PATH|unix.O_DIRECTORY)
			if err != nil {
				return err
			}
			err = a.collectLinks(fd, p, groups)
			unix.Close(fd)
			if err != nil {
				return err
			}
			continue
		}
		k := inode{st.Dev, st.Ino}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink < 2 && !a.isMoved(k) {
			continue
		}
		if groups[k] == nil {
			groups[k] = &linkGroup{nlink: st.Nlink}
		}
		groups[k].names = append(groups[k].names, p)
	}
	return nil
}

// isMoved reports whether a link of this layer went to the inode k.
func (a *applier) isMoved(k inode) bool {
	for _, v := range a.moved {
		if v == k {
			return true
		}
	}
	return false
}

// openDirNoLinks opens the directory rel inside the root as O_PATH,
// following no symbolic link (the walk found rel through none).
func (a *applier) openDirNoLinks(rel string) (int, error) {
	return openat2(a.t.fd, nonEmpty(rel), unix.O_PATH|unix.O_DIRECTORY, 0, inRoot|unix.RESOLVE_NO_SYMLINKS)
}

// copyUp has the filesystem give the file rel an inode of its own, if it
// is a lower layer's, by setting its times to what they are: a change of
// attributes that overlayfs copies a file up for (and a plain filesystem
// does nothing visible for).
func (a *applier) copyUp(rel string) error {
	dir, base := split(rel)
	pfd, err := a.openDirNoLinks(dir)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.UtimesNanoAt(pfd, base, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// relinkTo replaces the name rel with a hard link to the regular file
// target, in one rename of a new link over it. The directory of rel keeps
// its times (setDirTimes sets them back).
func (a *applier) relinkTo(rel, target string) error {
	tfd, err := openat2(a.t.fd, target, unix.O_PATH|unix.O_NOFOLLOW, 0, inRoot|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	dir, base := split(rel)
	pfd, err := a.openDirNoLinks(dir)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if _, ok := a.dirTimes[dir]; !ok {
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return err
		}
		a.dirTimes[dir] = []unix.Timespec{st.Atim, st.Mtim}
	}
	// No layer entry can have this name: Apply takes every ".wh." name
	// for a whiteout.
	for i := 0; ; i++ {
		tmp := fmt.Sprintf("%srelink.%d", whMeta, i)
		err := unix.Linkat(tfd, "", pfd, tmp, unix.AT_EMPTY_PATH)
		if err == unix.EEXIST && i < 100 {
			continue
		}
		if err != nil {
			return err
		}
		if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
			unix.Unlinkat(pfd, tmp, 0)
			return err
		}
		return nil
	}
}
