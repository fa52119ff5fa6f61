package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

// overlayOptions are set on every mount:
//   - index=off: a layer is the upper of one mount, then a lower of many
//     others, which the inodes index would refuse;
//   - metacopy=off: a copied-up file's data must be in the upper layer, so
//     that a copy of the layer (Snapshot) holds it;
//   - redirect_dir=on: a sandbox can rename directories that come from a
//     lower layer (rather than get EXDEV); the redirects name paths in the
//     layers below, and a layer always stays on the layers it was written
//     on;
//   - xino=off: inode numbers are the upper filesystem's, with no bits
//     borrowed.
const overlayOptions = "index=off,metacopy=off,redirect_dir=on,xino=off"

// mountSpec is what one overlay mount is made of.
type mountSpec struct {
	lowers      []string // topmost first
	upper, work string   // "" for a read-only mount
}

// spec is the mount of the snapshot r: an active snapshot's top layer is
// its upper dir over the others (or over the empty dir: overlayfs needs a
// lower layer); a committed snapshot's layers are all lower layers, so the
// mount is read-only (with the empty dir below a single layer: overlayfs
// needs two lower layers without an upper one).
func (s *Store) spec(r record) mountSpec {
	if r.Kind == layers.KindActive {
		m := mountSpec{upper: s.dirs.layer(r.Layers[0]), work: filepath.Join(s.dirs.work(), r.Layers[0])}
		for _, id := range r.Layers[1:] {
			m.lowers = append(m.lowers, s.dirs.layer(id))
		}
		if len(m.lowers) == 0 {
			m.lowers = []string{s.dirs.empty()}
		}
		return m
	}
	var m mountSpec
	for _, id := range r.Layers {
		m.lowers = append(m.lowers, s.dirs.layer(id))
	}
	if len(m.lowers) == 1 {
		m.lowers = append(m.lowers, s.dirs.empty())
	}
	return m
}

// mount mounts the snapshot r at its path, creating the mount point.
func (s *Store) mount(r record) error {
	target := s.dirs.mount(r.ID)
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := mountOverlay(target, s.spec(r), s.appendLowers); err != nil {
		os.Remove(target)
		return err
	}
	return nil
}

// unmountOrLog detaches the mount of the snapshot whose record has ID id
// and removes its mount point, logging a failure: Open unmounts what no
// record names.
func (s *Store) unmountOrLog(id string) {
	if err := unmount(s.dirs.mount(id), unix.MNT_DETACH); err != nil {
		s.log.Error("layers/overlay: unmounting", "path", s.dirs.mount(id), "err", err)
	}
}

// unmount unmounts target with flags, if it is mounted, and removes the
// mount point.
func unmount(target string, flags int) error {
	// EINVAL: not a mount point.
	if err := unix.Unmount(target, flags|unix.UMOUNT_NOFOLLOW); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return &os.PathError{Op: "umount", Path: target, Err: err}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// mountOverlay mounts m at target: with fsopen(2) and one "lowerdir+" per
// layer if appendLowers, else with mount(2).
func mountOverlay(target string, m mountSpec, appendLowers bool) error {
	if !appendLowers {
		return legacyMount(target, m)
	}
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return &os.PathError{Op: "fsopen overlay", Path: target, Err: err}
	}
	defer unix.Close(fd)
	var params [][2]string
	for _, l := range m.lowers {
		params = append(params, [2]string{"lowerdir+", l})
	}
	if m.upper != "" {
		params = append(params, [2]string{"upperdir", m.upper}, [2]string{"workdir", m.work})
	}
	for _, o := range strings.Split(overlayOptions, ",") {
		k, v, _ := strings.Cut(o, "=")
		params = append(params, [2]string{k, v})
	}
	for _, p := range params {
		if err := unix.FsconfigSetString(fd, p[0], p[1]); err != nil {
			return fsError(fd, target, "fsconfig "+p[0]+"="+p[1], err)
		}
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return fsError(fd, target, "fsconfig create", err)
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fsError(fd, target, "fsmount", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return &os.PathError{Op: "move_mount", Path: target, Err: err}
	}
	return nil
}

// fsError is err from op on the filesystem context fd, with the messages
// the kernel left in it (e.g. "Bad value for 'redirect_dir'"), if any:
// overlayfs prints others only to the kernel log.
func fsError(fd int, target, op string, err error) error {
	var msgs []string
	buf := make([]byte, 512)
	for range 8 {
		n, rerr := unix.Read(fd, buf)
		if rerr != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return &os.PathError{Op: op, Path: target, Err: err}
	}
	return fmt.Errorf("%s %s: %w (%s)", op, target, err, strings.Join(msgs, "; "))
}

// legacyMount mounts m at target with mount(2), for kernels before 6.8.
// Its options must fit in a page, which bounds the number of layers (about
// 4096 / (len(Dir) + 25)).
func legacyMount(target string, m mountSpec) error {
	opts := "lowerdir=" + strings.Join(m.lowers, ":")
	if m.upper != "" {
		opts += ",upperdir=" + m.upper + ",workdir=" + m.work
	}
	opts += "," + overlayOptions
	if len(opts) >= os.Getpagesize() {
		return fmt.Errorf("mount %s: %d layers need %d bytes of options, more than mount(2) takes (%d); Linux 6.8 has no such limit", target, len(m.lowers), len(opts), os.Getpagesize()-1)
	}
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay on %s (%s): %w", target, opts, err)
	}
	return nil
}

// probe checks, in the fresh directory dir, that overlayfs works on the
// store's filesystem: trusted.* xattrs (whiteouts, opaque directories and
// redirects live in them) and a mount with a writable upper layer over two
// lower ones. It reports whether the kernel takes "lowerdir+" (Linux 6.8+)
// and removes dir. Errors wrap ErrUnsupported.
func probe(dir string) (appendLowers bool, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("layers/overlay: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = fmt.Errorf("layers/overlay: %w", rerr)
		}
	}()
	m := mountSpec{
		lowers: []string{filepath.Join(dir, "l1"), filepath.Join(dir, "l2")},
		upper:  filepath.Join(dir, "upper"),
		work:   filepath.Join(dir, "work"),
	}
	merged := filepath.Join(dir, "merged")
	for _, d := range []string{m.lowers[0], m.lowers[1], m.upper, m.work, merged} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return false, fmt.Errorf("layers/overlay: %w", err)
		}
	}
	if err := unix.Lsetxattr(m.upper, "trusted.hearth-probe", []byte("y"), 0); err != nil {
		return false, fmt.Errorf("%w: layers/overlay: the filesystem of %s does not take trusted.* xattrs, which overlayfs needs: %v", layers.ErrUnsupported, dir, err)
	}
	if appendLowers, err = supportsAppend(m.lowers[0]); err != nil {
		return false, err
	}
	if err := mountOverlay(merged, m, appendLowers); err != nil {
		return false, fmt.Errorf("%w: layers/overlay: overlayfs does not work on %s: %v", layers.ErrUnsupported, dir, err)
	}
	if err := unix.Unmount(merged, 0); err != nil {
		return false, fmt.Errorf("layers/overlay: umount %s: %w", merged, err)
	}
	return appendLowers, nil
}

// supportsAppend reports whether the kernel has fsopen(2) and overlayfs's
// "lowerdir+" parameter, trying it with the directory lower.
func supportsAppend(lower string) (bool, error) {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	switch {
	case err == unix.ENOSYS:
		return false, nil
	case err == unix.ENODEV:
		return false, fmt.Errorf("%w: layers/overlay: the kernel has no overlayfs", layers.ErrUnsupported)
	case err != nil:
		return false, fmt.Errorf("layers/overlay: fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	switch err := unix.FsconfigSetString(fd, "lowerdir+", lower); err {
	case nil:
		return true, nil
	case unix.EINVAL:
		return false, nil
	default:
		return false, fsError(fd, lower, "fsconfig lowerdir+", err)
	}
}
