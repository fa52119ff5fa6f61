package layertar

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Apply unpacks the uncompressed layer tar r onto the directory root,
// applying its whiteouts. root is an open descriptor (O_PATH or
// O_DIRECTORY) of the layer's directory, which already holds the lower
// layers' content (a snapshot of the parent layer, say); Apply does not
// close it.
//
// Apply returns what it did. It stops at the first entry it refuses or
// cannot apply with an *Error naming that entry, matching ErrHostile when
// the entry is refused (see the package doc for what is refused), and
// returns ctx's error when ctx is done; either way the root holds part of
// the layer and should be discarded. Nothing outside the root is ever
// created, changed or removed.
func Apply(ctx context.Context, root *os.File, r io.Reader, lim Limits) (Stats, error) {
	defer runtime.KeepAlive(root)
	fd, err := openat2(int(root.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return Stats{}, &Error{Path: ".", Reason: "opening the root", Err: err}
	}
	defer unix.Close(fd)
	a := &applier{
		ctx:      ctx,
		t:        tree{fd: fd},
		lim:      lim.withDefaults(),
		added:    map[string]bool{},
		dirTimes: map[string][]unix.Timespec{},
		moved:    map[inode]inode{},
		buf:      make([]byte, 1<<20),
	}
	err = a.run(r)
	if err == nil {
		err = a.repairLinks()
	}
	if err == nil {
		err = a.setDirTimes()
	}
	return a.st.done(), err
}

// applier is one Apply's state.
type applier struct {
	ctx context.Context
	t   tree
	lim Limits
	st  Stats
	// added holds the paths this layer has put in place, with their
	// parents: what whiteouts and opaque markers leave alone.
	added map[string]bool
	// dirTimes holds the times of the directories this layer has, set when
	// their contents are in place.
	dirTimes map[string][]unix.Timespec
	// relink says the layer removed a name of a file with others, or
	// linked to one, which a root on overlayfs may leave inconsistent;
	// moved maps the inode such a link's target had to the one it went
	// to (see repairLinks).
	relink bool
	moved  map[inode]inode
	buf    []byte // file content on its way to disk
}

// run applies every entry of the tar r.
func (a *applier) run(r io.Reader) error {
	tr := tar.NewReader(&boundedReader{r: r, max: a.lim.MaxBytes})
	last := "" // the last entry read, for errors of the stream
	for {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, tar.ErrInsecurePath) && h != nil {
			// Only with GODEBUG tarinsecurepath=0, not the default: then
			// the reader also stops at the next entry. Absolute names are
			// taken relative to the root, and ".." is refused by cleanName.
			err = nil
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return a.streamError(last, "reading the next header", err)
		}
		last = h.Name
		a.st.Entries++
		if a.st.Entries > a.lim.MaxEntries {
			return refuse(h.Name, "more than %d entries (MaxEntries)", a.lim.MaxEntries)
		}
		if err := a.entry(h, tr); err != nil {
			return err
		}
	}
}

// streamError returns the error for reading the tar stream failing with
// err around the entry name.
func (a *applier) streamError(name, what string, err error) error {
	switch {
	case errors.Is(err, errTooBig):
		return refuse(name, "the layer is over %d bytes (MaxBytes)", a.lim.MaxBytes)
	case errors.Is(err, tar.ErrHeader), errors.Is(err, tar.ErrFieldTooLong):
		return refuse(name, "%s: malformed tar: %v", what, err)
	case a.ctx.Err() != nil:
		return a.ctx.Err()
	}
	return &Error{Path: name, Reason: what, Err: err}
}

// entry applies one entry; r reads its content.
func (a *applier) entry(h *tar.Header, r io.Reader) error {
	rel, why := cleanName(h.Name)
	if why != "" {
		return refuse(h.Name, "%s", why)
	}
	dir, base := split(rel)
	if strings.HasPrefix(base, whPrefix) {
		return a.whiteout(h.Name, dir, base)
	}
	if rel == "" && h.Typeflag != tar.TypeDir {
		return refuse(h.Name, "the root can only be a directory, not type %q", h.Typeflag)
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return a.file(h, rel, r)
	case tar.TypeDir:
		return a.dir(h, rel)
	case tar.TypeSymlink:
		return a.symlink(h, rel)
	case tar.TypeLink:
		return a.hardlink(h, rel)
	case tar.TypeChar, tar.TypeBlock:
		a.st.note(rel, "device node skipped")
	case tar.TypeFifo:
		a.st.note(rel, "FIFO skipped")
	case tar.TypeXGlobalHeader:
		// PAX global records: nothing in them applies to a file.
	default:
		a.st.note(rel, fmt.Sprintf("entry of type %q skipped", h.Typeflag))
	}
	return nil
}

// markAdded records that this layer put rel in place, and so its parents.
func (a *applier) markAdded(rel string) {
	for !a.added[rel] {
		a.added[rel] = true
		if rel == "" {
			return
		}
		rel, _ = split(rel)
	}
}

// prepare opens the directory an entry rel goes into (creating what is
// missing of it) and clears the entry's name: whatever is there is
// removed, unless keep says to keep it (kept is then true). It returns
// the directory's descriptor, which the caller closes, and the name in it.
func (a *applier) prepare(name, rel string, keep func(*unix.Stat_t) bool) (pfd int, base string, kept bool, err error) {
	dir, base := split(rel)
	pfd, err = a.t.mkdirs(dir, a.markAdded)
	if err != nil {
		return -1, "", false, fsError(name, "opening its directory inside the root", err)
	}
	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == unix.ENOENT:
		return pfd, base, false, nil
	case err != nil:
		unix.Close(pfd)
		return -1, "", false, fsError(name, "examining what has its name", err)
	case keep != nil && keep(&st):
		return pfd, base, true, nil
	case base == ".":
		unix.Close(pfd)
		return -1, "", false, refuse(name, "the root cannot be replaced")
	}
	if err := removeAll(pfd, base, a.noteRemoval); err != nil {
		unix.Close(pfd)
		return -1, "", false, fsError(name, "removing what had its name", err)
	}
	return pfd, base, false, nil
}

// isDir reports whether st is a directory's.
func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
