package btrfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The btrfs ioctls hearth uses, from include/uapi/linux/btrfs.h. x/sys/unix
// does not define them, and calling them directly instead of running the
// btrfs tool keeps a snapshot at a few milliseconds rather than a fork+exec.

const (
	btrfsIoctlMagic     = 0x94
	btrfsPathNameMax    = 4087
	btrfsSubvolNameMax  = 4039
	btrfsFirstFreeObjID = 256 // inode number of every subvolume's root directory
	btrfsSubvolRdonly   = 1 << 1
	// btrfsQuotaCtlEnableSimple enables simple quotas (squota, Linux 6.7):
	// extents are charged to the subvolume that wrote them, at allocation,
	// with no backref walks, which is what a per-sandbox usage and limit
	// needs and costs nothing at snapshot time.
	btrfsQuotaCtlEnableSimple = 4
	// btrfsQgroupLimitMaxExcl marks max_excl as set in a qgroup limit;
	// max_excl = btrfsQgroupLimitClear removes it instead (qgroup.c's
	// CLEAR_VALUE): flags without the bit leave an existing limit alone.
	btrfsQgroupLimitMaxExcl = 1 << 1
	btrfsQgroupLimitClear   = ^uint64(0)
)

// ioc encodes an ioctl request number the way the kernel's _IOC macro does.
func ioc(dir, typ, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | typ<<8 | nr
}

const (
	iocWrite = 1
	iocRead  = 2
)

// btrfsVolArgs is struct btrfs_ioctl_vol_args.
type btrfsVolArgs struct {
	fd   int64
	name [btrfsPathNameMax + 1]byte
}

// btrfsVolArgsV2 is struct btrfs_ioctl_vol_args_v2.
type btrfsVolArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	unused  [4]uint64 // union { size, qgroup_inherit; unused[4] }
	name    [btrfsSubvolNameMax + 1]byte
}

// btrfsInoLookupArgs is struct btrfs_ioctl_ino_lookup_args.
type btrfsInoLookupArgs struct {
	treeid   uint64
	objectid uint64
	name     [4080]byte
}

// btrfsQuotaCtlArgs is struct btrfs_ioctl_quota_ctl_args.
type btrfsQuotaCtlArgs struct {
	cmd    uint64
	status uint64
}

// btrfsQgroupLimitArgs is struct btrfs_ioctl_qgroup_limit_args, which
// holds a struct btrfs_qgroup_limit.
type btrfsQgroupLimitArgs struct {
	qgroupid uint64
	flags    uint64
	maxRfer  uint64
	maxExcl  uint64
	rsvRfer  uint64
	rsvExcl  uint64
}

// btrfsFsInfoArgs is struct btrfs_ioctl_fs_info_args.
type btrfsFsInfoArgs struct {
	maxID          uint64
	numDevices     uint64
	fsid           [16]byte
	nodesize       uint32
	sectorsize     uint32
	cloneAlignment uint32
	csumType       uint16
	csumSize       uint16
	flags          uint64
	generation     uint64
	metadataUUID   [16]byte
	reserved       [944]byte
}

var (
	iocSubvolCreate   = ioc(iocWrite, btrfsIoctlMagic, 14, unsafe.Sizeof(btrfsVolArgs{}))
	iocSnapDestroy    = ioc(iocWrite, btrfsIoctlMagic, 15, unsafe.Sizeof(btrfsVolArgs{}))
	iocInoLookup      = ioc(iocRead|iocWrite, btrfsIoctlMagic, 18, unsafe.Sizeof(btrfsInoLookupArgs{}))
	iocSnapCreateV2   = ioc(iocWrite, btrfsIoctlMagic, 23, unsafe.Sizeof(btrfsVolArgsV2{}))
	iocSubvolGetflags = ioc(iocRead, btrfsIoctlMagic, 25, 8)
	iocSubvolSetflags = ioc(iocWrite, btrfsIoctlMagic, 26, 8)
	iocFsInfo         = ioc(iocRead, btrfsIoctlMagic, 31, unsafe.Sizeof(btrfsFsInfoArgs{}))
	iocQuotaCtl       = ioc(iocRead|iocWrite, btrfsIoctlMagic, 40, unsafe.Sizeof(btrfsQuotaCtlArgs{}))
	// _IOR in btrfs.h, although the kernel only reads the argument.
	iocQgroupLimit = ioc(iocRead, btrfsIoctlMagic, 43, unsafe.Sizeof(btrfsQgroupLimitArgs{}))
)

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return errno
		}
	}
}

// openDir opens path as a directory for ioctls.
func openDir(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

func setName(dst []byte, name string) error {
	if len(name) >= len(dst) || bytes.IndexByte([]byte(name), 0) >= 0 {
		return fmt.Errorf("subvolume name %q: %w", name, unix.ENAMETOOLONG)
	}
	copy(dst, name)
	return nil
}

// subvolCreate creates the empty subvolume name in the directory dir.
func subvolCreate(dir, name string) error {
	return nameIoctl(dir, name, iocSubvolCreate, "btrfs subvolume create")
}

// nameIoctl issues req, which takes a btrfsVolArgs naming an entry of dir,
// on dir; op names it in the error.
func nameIoctl(dir, name string, req uintptr, op string) error {
	fd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var args btrfsVolArgs
	if err := setName(args.name[:], name); err != nil {
		return err
	}
	if err := ioctl(fd, req, unsafe.Pointer(&args)); err != nil {
		return &os.PathError{Op: op, Path: dir + "/" + name, Err: err}
	}
	return nil
}

// snapshot creates name in the directory dir as a snapshot of the subvolume
// src, read-only if readonly is set.
func snapshot(src, dir, name string, readonly bool) error {
	sfd, err := openDir(src)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	args := btrfsVolArgsV2{fd: int64(sfd)}
	if readonly {
		args.flags = btrfsSubvolRdonly
	}
	if err := setName(args.name[:], name); err != nil {
		return err
	}
	if err := ioctl(dfd, iocSnapCreateV2, unsafe.Pointer(&args)); err != nil {
		return &os.PathError{Op: "btrfs subvolume snapshot", Path: dir + "/" + name, Err: err}
	}
	return nil
}

// subvolDestroy deletes the subvolume name in the directory dir. The kernel
// unlinks it at once and frees its blocks in the background. A subvolume
// that holds other subvolumes fails with ENOTEMPTY.
func subvolDestroy(dir, name string) error {
	return nameIoctl(dir, name, iocSnapDestroy, "btrfs subvolume delete")
}

// subvolFlags returns the subvolume flags of path.
func subvolFlags(path string) (uint64, error) {
	fd, err := openDir(path)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var flags uint64
	if err := ioctl(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return 0, &os.PathError{Op: "btrfs subvolume get flags", Path: path, Err: err}
	}
	return flags, nil
}

// setReadonly sets or clears the read-only flag of the subvolume path.
func setReadonly(path string, readonly bool) error {
	fd, err := openDir(path)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var flags uint64
	if err := ioctl(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return &os.PathError{Op: "btrfs subvolume get flags", Path: path, Err: err}
	}
	want := flags &^ btrfsSubvolRdonly
	if readonly {
		want |= btrfsSubvolRdonly
	}
	if want == flags {
		return nil
	}
	if err := ioctl(fd, iocSubvolSetflags, unsafe.Pointer(&want)); err != nil {
		return &os.PathError{Op: "btrfs subvolume set flags", Path: path, Err: err}
	}
	return nil
}

// subvolID returns the id of the subvolume that holds path.
func subvolID(path string) (uint64, error) {
	fd, err := openDir(path)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	args := btrfsInoLookupArgs{objectid: btrfsFirstFreeObjID}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&args)); err != nil {
		return 0, &os.PathError{Op: "btrfs inode lookup", Path: path, Err: err}
	}
	return args.treeid, nil
}

// fsid returns the filesystem UUID of the btrfs filesystem holding path,
// formatted as in /sys/fs/btrfs.
func fsid(path string) (string, error) {
	fd, err := openDir(path)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var args btrfsFsInfoArgs
	if err := ioctl(fd, iocFsInfo, unsafe.Pointer(&args)); err != nil {
		return "", &os.PathError{Op: "btrfs fs info", Path: path, Err: err}
	}
	u := args.fsid
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// enableQuota turns on simple quotas on the filesystem holding path, or
// fails (EINVAL before Linux 6.7).
func enableQuota(path string) error {
	fd, err := openDir(path)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	args := btrfsQuotaCtlArgs{cmd: btrfsQuotaCtlEnableSimple}
	if err := ioctl(fd, iocQuotaCtl, unsafe.Pointer(&args)); err != nil {
		return &os.PathError{Op: "btrfs quota enable --simple", Path: path, Err: err}
	}
	return nil
}

// limitQgroup sets the exclusive-bytes limit of the level-0 qgroup of the
// subvolume subvol (0/subvol) to bytes, or removes it if bytes is 0. The
// ioctl is issued on dir, which must be on the same filesystem but not in
// subvol: the kernel joins a transaction on the subvolume of the open
// file, and refuses that with EDQUOT for a subvolume over its limit, which
// is exactly when a caller wants to raise or remove it. It fails with
// ENOTCONN when quotas are off. The limit is durable at the next
// transaction commit.
func limitQgroup(dir string, subvol uint64, bytes int64) error {
	fd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	args := btrfsQgroupLimitArgs{qgroupid: subvol, flags: btrfsQgroupLimitMaxExcl, maxExcl: uint64(bytes)}
	if bytes == 0 {
		args.maxExcl = btrfsQgroupLimitClear
	}
	if err := ioctl(fd, iocQgroupLimit, unsafe.Pointer(&args)); err != nil {
		return &os.PathError{Op: fmt.Sprintf("btrfs qgroup limit 0/%d", subvol), Path: dir, Err: err}
	}
	return nil
}

// isSubvolume reports whether the directory at path is the root of a btrfs
// subvolume.
func isSubvolume(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Ino == btrfsFirstFreeObjID, nil
}

// isBtrfs reports whether path is on a btrfs filesystem.
func isBtrfs(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return uint32(st.Type) == unix.BTRFS_SUPER_MAGIC, nil
}

var errNotBtrfs = errors.New("not a btrfs filesystem")
