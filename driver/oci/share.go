package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// The driver's mount directory (Options.MountDir): a small tmpfs of the
// driver's own, private (no mount propagates in or out), that holds what
// sandboxes get from the host by bind mount and the mount points of the
// runc and crun roots while they start:
//
//	agent-<hash>         a copy of an agent binary (Spec.AgentPath), named
//	                     by the source's path, inode, size and time
//	resolv-<hash>.conf   an egress sandbox's resolv.conf, named by its content
//	roots/<id>           sandbox id's idmapped root while its runtime starts
//
// Two reasons. A bind mount shows its source's path within its filesystem
// in the sandbox's /proc/self/mountinfo (under runc), and a path here says
// nothing about the host's data dir. And under a user namespace the
// runtime reaches every mount source as the sandbox's root, an
// unprivileged host uid: the directory is mode 0711 under a path anyone may
// traverse, where the data dir is 0700.
//
// It lives under /run (gone at a reboot, like the mounts), and outlives the
// daemon: the next one reuses it. It names its state directory in a file
// "owner"; a default mount directory (one of /run/hearth/oci's) whose
// owner is gone (a data dir deleted) is unmounted by the next driver that
// mounts its own.

// mountDirOptions bound the tmpfs: a few agent binaries and small files.
const mountDirOptions = "size=256m,nr_inodes=4096,mode=0711"

// defaultMountDir is Options.MountDir's default for stateDir: one per
// state directory under /run/hearth/oci, named by a hash of its path.
func defaultMountDir(stateDir string) string {
	h := sha256.Sum256([]byte(stateDir))
	return filepath.Join("/run/hearth/oci", hex.EncodeToString(h[:8]))
}

// mountDir is the driver's mount directory (see above), mounted on first
// use (ensure).
type mountDir struct {
	path string
	// owner is the state directory the mount directory serves.
	owner string
	// sweep: the mount directory is one of defaultMountDir's, and its
	// siblings whose owner is gone are unmounted (sweepOrphans).
	sweep   bool
	mu      sync.Mutex
	mounted bool // path is mounted and private (ensure)
}

// ensure mounts the driver's tmpfs on its mount directory unless one is
// there, and makes it private.
func (m *mountDir) ensure() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mounted {
		return nil
	}
	dir := m.path
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if m.sweep {
		// Another part of hearth may have made /run/hearth first, private
		// (the instance registry under it is): the sandboxes' roots must
		// be reachable through it.
		if err := traversable(filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))); err != nil {
			return err
		}
	}
	var parent, st unix.Stat_t
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return err
	}
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Dev == parent.Dev {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, mountDirOptions); err != nil {
			return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "roots"), 0o711); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(m.owner), 0o600); err != nil {
		return err
	}
	m.mounted = true
	if m.sweep {
		sweepOrphans(filepath.Dir(dir), dir)
	}
	return nil
}

// traversable adds search permission for everyone (--x) to each of dirs
// that lacks it, leaving the rest of its mode as it is.
func traversable(dirs ...string) error {
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if mode := fi.Mode().Perm(); mode&0o011 != 0o011 {
			if err := os.Chmod(d, mode|0o011); err != nil {
				return err
			}
		}
	}
	return nil
}

// ownerFile names the file of a mount directory that holds its state
// directory's path.
const ownerFile = "owner"

// sweepOrphans unmounts and removes the mount directories in parent, but
// self, whose owner file names a state directory that no longer exists:
// no driver can use them again. One without an owner file (or whose owner
// cannot be read) is left alone. Errors are ignored: a sweep is tidying,
// and the next one tries again.
func sweepOrphans(parent, self string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		if !e.IsDir() || dir == self {
			continue
		}
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil || len(owner) == 0 || !filepath.IsAbs(string(owner)) {
			continue
		}
		if _, err := os.Lstat(string(owner)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		// A lazy unmount takes the roots mounted inside with it.
		if err := unix.Unmount(dir, unix.MNT_DETACH); err == nil {
			os.Remove(dir)
		}
	}
}

// shareAgent returns the copy of the agent binary at path in the mount
// directory, making it when there is none.
func (m *mountDir) shareAgent(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d\x00%d.%d", path, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec))
	dst := filepath.Join(m.path, "agent-"+hex.EncodeToString(h[:8]))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	return dst, writeShared(dst, 0o755, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
}

// shareFile returns the file of the mount directory named prefix, a hash
// of content and suffix, holding content, making it when there is none.
func (m *mountDir) shareFile(prefix, suffix string, content []byte) (string, error) {
	h := sha256.Sum256(content)
	dst := filepath.Join(m.path, prefix+hex.EncodeToString(h[:8])+suffix)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	return dst, writeShared(dst, 0o644, func(w io.Writer) error {
		_, err := w.Write(content)
		return err
	})
}

// writeShared writes dst with mode through a temporary file linked into
// place, so that a file there is always whole and, once there, never
// replaced: its name says what it holds, so a concurrent writer that got
// there first wrote the same, and a runtime may be bind-mounting it
// (runc's bind mount of a file through /proc/self/fd fails with ENOENT
// once the file it opened was renamed over).
func writeShared(dst string, mode fs.FileMode, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		if err = os.Link(f.Name(), dst); errors.Is(err, fs.ErrExist) {
			err = nil
		}
	}
	os.Remove(f.Name())
	if err != nil {
		return errors.Join(fmt.Errorf("write %s", dst), err)
	}
	return nil
}

// rootMount is where sandbox id's idmapped root is mounted while its
// runtime starts.
func (m *mountDir) rootMount(id string) string { return filepath.Join(m.path, "roots", id) }
