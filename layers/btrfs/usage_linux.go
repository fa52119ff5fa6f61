package btrfs

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

// qgroupUsage returns the exclusive bytes of the level-0 qgroup of the
// subvolume at path, read from sysfs (Linux 5.9+) after a filesystem sync:
// qgroup counters only move when a transaction commits.
func qgroupUsage(qgroupsDir, path string) (int64, error) {
	id, err := subvolID(path)
	if err != nil {
		return 0, err
	}
	if err := layers.Syncfs(path); err != nil {
		return 0, err
	}
	return readSysfsInt(filepath.Join(qgroupsDir, fmt.Sprintf("0_%d", id), "exclusive"))
}

// The FIEMAP ioctl (include/uapi/linux/fiemap.h), also missing from x/sys.
type fiemapExtent struct {
	logical    uint64
	physical   uint64
	length     uint64
	reserved64 [2]uint64
	flags      uint32
	reserved   [3]uint32
}

type fiemapReq struct {
	start         uint64
	length        uint64
	flags         uint32
	mappedExtents uint32
	extentCount   uint32
	reserved      uint32
	extents       [64]fiemapExtent
}

const (
	fiemapExtentLast   = 0x1
	fiemapExtentShared = 0x2000
)

var iocFiemap = ioc(iocRead|iocWrite, 'f', 11, 32) // size of the header only

// walkUsage adds up the file extents under root that no other snapshot (or
// reflink) shares, as reported by FIEMAP. It is the fallback when quotas
// are off; it ignores metadata and costs one ioctl per file.
func walkUsage(ctx context.Context, root string) (int64, error) {
	var total int64
	req := new(fiemapReq)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: p, Err: err}
		}
		defer unix.Close(fd)
		start := uint64(0)
		for {
			*req = fiemapReq{start: start, length: ^uint64(0), extentCount: uint32(len(req.extents))}
			if err := ioctl(fd, iocFiemap, unsafe.Pointer(req)); err != nil {
				return &os.PathError{Op: "fiemap", Path: p, Err: err}
			}
			if req.mappedExtents == 0 {
				return nil
			}
			for _, e := range req.extents[:req.mappedExtents] {
				if e.flags&fiemapExtentShared == 0 {
					total += int64(e.length)
				}
				if e.flags&fiemapExtentLast != 0 {
					return nil
				}
				start = e.logical + e.length
			}
		}
	})
	return total, err
}
