package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// User namespaces (runc and crun). Without one, root in a container is root
// on the host: a setuid binary in the image (or one the sandbox makes) is
// a way to host root. So every runc or crun sandbox runs in a user
// namespace of its own that maps its uids and gids 0–65535 onto a host
// range no other running sandbox uses, of this daemon or of any other
// hearth daemon on the host (each claims its ranges in one host-wide
// directory, Options.IDClaimDir): root inside is an unprivileged host uid
// that owns nothing outside.
//
// The root filesystem keeps its ownership on disk exactly as runsc
// sandboxes, images, checkpoints and forks have it (root 0, the sandbox
// user 1000): the runtime gets it through an idmapped mount
// (open_tree(OPEN_TREE_CLONE), mount_setattr(MOUNT_ATTR_IDMAP) with a user
// namespace of the same mapping, move_mount), which shows host uid 0 as the
// range's first uid, so that root inside sees its files as its own and
// writes them as uid 0 on disk. A range is claimed at each Start and
// released when the container is gone (Stop, Delete, a failed Start, or
// Recover for a sandbox that is not running), so a stopped sandbox holds
// none.
//
// A root whose filesystem cannot be idmapped is refused (errNoIdmap): an
// overlayfs mount cannot be (the kernel idmaps its layers, not the mount),
// and overlaying the layers again from idmapped mounts would give the root
// a second overlay over the upper directory the layer store's own mount
// uses, which the kernel documents as undefined.

// Defaults of the user namespace ranges (Options.IDBase, IDRanges,
// IDClaimDir). The base sits above the ranges systemd assigns to
// containers (524288–1879048191) and below 2^31, which some tools take
// for negative: 4096 ranges of 65536.
const (
	DefaultIDBase     = 0x70000000
	DefaultIDRanges   = 4096
	DefaultIDClaimDir = "/run/hearth/ids"
	idRangeSize       = 65536
)

// errNoIdmap is returned by Start under runc and crun for a root
// filesystem that cannot be idmapped.
var errNoIdmap = errors.New("its filesystem cannot be idmapped, and runc and crun sandboxes run in a user namespace; use the btrfs layer store (--layers btrfs) or runsc")

// idRange is a claimed host range: host uids and gids base to
// base+idRangeSize-1.
type idRange struct {
	slot int
	base uint32
}

// idClaims are the claims of user namespace ranges of this driver's
// sandboxes: range n is host ids base+n*idRangeSize on, for n below
// ranges, and a sandbox claims one with a file in dir, which every hearth
// daemon on the host shares, holding the claimant's state directory and
// sandbox id (owner); the sandbox's own directory records the slot.
type idClaims struct {
	base   uint32
	ranges int
	dir    string // Options.IDClaimDir
	state  stateDir
	log    *slog.Logger
}

// file is the host-wide claim of slot.
func (c *idClaims) file(slot int) string { return filepath.Join(c.dir, strconv.Itoa(slot)) }

// owner is what a claim file of sandbox id holds.
func (c *idClaims) owner(id string) string { return c.state.path + "\n" + id + "\n" }

// claim claims a free range for sandbox id: the first slot, from a
// random one on, whose claim file it creates (O_EXCL), and records it in
// the sandbox's directory.
func (c *idClaims) claim(id string) (idRange, error) {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return idRange{}, err
	}
	start := rand.IntN(c.ranges)
	for i := range c.ranges {
		slot := (start + i) % c.ranges
		f, err := os.OpenFile(c.file(slot), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return idRange{}, err
		}
		_, err = f.WriteString(c.owner(id))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.WriteFile(c.state.idsFile(id), []byte(strconv.Itoa(slot)), 0o600)
		}
		if err != nil {
			os.Remove(c.file(slot))
			return idRange{}, err
		}
		return idRange{slot: slot, base: c.base + uint32(slot)*idRangeSize}, nil
	}
	return idRange{}, fmt.Errorf("all %d user namespace ranges of %s are in use", c.ranges, c.dir)
}

// release drops sandbox id's claim, if it has one, once its processes
// are gone.
func (c *idClaims) release(id string) error {
	b, err := os.ReadFile(c.state.idsFile(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if slot, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		if owner, err := os.ReadFile(c.file(slot)); err == nil && string(owner) == c.owner(id) {
			if err := os.Remove(c.file(slot)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if err := os.Remove(c.state.idsFile(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// recover removes the claims of this driver's state directory whose
// sandbox has no container (running lists those that have one): what a
// daemon killed between a claim and its release left.
func (c *idClaims) recover(running map[string]bool) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(c.dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		dir, id, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
		if !ok || dir != c.state.path || running[id] {
			continue
		}
		c.log.Warn("releasing a user namespace range no running sandbox uses", "sandbox", id, "claim", p)
		os.Remove(p)
		if validID(id) == nil {
			os.Remove(c.state.idsFile(id))
		}
	}
}

// usernsFD returns an open descriptor of a new user namespace that maps
// 0–65535 onto r, as the runtime will map the container's, for
// mount_setattr. The namespace needs a process to be made: a child of this
// process created in it, stopped at its exec by ptrace before its first
// instruction (so that no program of the host runs in it) and killed once
// its namespace is open.
func usernsFD(r idRange) (int, error) {
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.base), Size: idRangeSize}}
	cmd := exec.Command(self)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m, Ptrace: true, Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread() // ptrace's tracer is a thread
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("make a user namespace: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the user namespace: %w", err)
	}
	return fd, nil
}

// mountIdmapped mounts an idmapped clone of the directory src (see
// usernsFD) on target, which it creates.
func mountIdmapped(src, target string, r idRange) error {
	ns, err := usernsFD(r)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		if err == unix.EINVAL || err == unix.EPERM || err == unix.EOPNOTSUPP {
			return fmt.Errorf("root filesystem %s (%s): %w", src, fsType(src), errNoIdmap)
		}
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount on %s: %w", target, err)
	}
	return nil
}

// fsType names the filesystem of path, for a message.
func fsType(path string) string {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return "unknown filesystem"
	}
	switch st.Type {
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	}
	return fmt.Sprintf("filesystem type %#x", st.Type)
}

// unmountAll detaches every mount on path, and removes the directory.
func unmountAll(path string) error {
	if err := unmountEvery(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
