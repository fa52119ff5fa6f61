// Package sockdiag asks the kernel which unix sockets listen, named by the
// file each is bound to (NETLINK_SOCK_DIAG with UDIAG_SHOW_VFS, see
// sock_diag(7)), without connecting to any: a connection wakes whatever
// accepts it, a look at the socket table wakes nothing.
package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// File names a file as stat(2) does: its device (st_dev) and inode
// number, of which sock_diag reports the lower 32 bits only.
type File struct {
	Dev, Ino uint64
}

// FileOf is the File that st describes.
func FileOf(st *unix.Stat_t) File { return File{Dev: st.Dev, Ino: uint64(uint32(st.Ino))} }

// Conn is a sock_diag socket. It answers for the network namespace of the
// thread that opened it, whichever thread uses it later.
type Conn struct {
	fd int
}

// Open opens a sock_diag socket in the calling thread's network namespace.
func Open() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	return &Conn{fd: fd}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// From linux/unix_diag.h and linux/net.h.
const (
	udiagShowVFS = 0x2 // UDIAG_SHOW_VFS
	unixDiagVFS  = 1   // UNIX_DIAG_VFS, the attribute
	stateListen  = 10  // TCP_LISTEN, as unix sockets' states count
	reqLen       = 24  // sizeof(struct unix_diag_req)
	msgLen       = 16  // sizeof(struct unix_diag_msg)
)

// UnixListeners returns the files that the listening unix sockets of the
// socket's network namespace are bound to (sockets without a file, bound
// to an abstract name or to none, are left out).
func (c *Conn) UnixListeners() (map[File]bool, error) {
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[unix.NLMSG_HDRLEN:]
	r[0] = unix.AF_UNIX
	ne.PutUint32(r[4:], 1<<stateListen)
	ne.PutUint32(r[12:], udiagShowVFS)
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}
	out := map[File]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(ne.Uint32(m.Data)); errno != 0 {
						return nil, fmt.Errorf("sock_diag: %w", unix.Errno(-errno))
					}
				}
				return nil, errors.New("sock_diag: error message")
			}
			if f, ok := vfsOf(m.Data); ok {
				out[f] = true
			}
		}
	}
}

// vfsOf returns the file of a unix_diag_msg's UNIX_DIAG_VFS attribute, if
// it has one. The kernel reports the device as its own dev_t (major in
// the upper 12 bits, minor in the lower 20), which it turns into st_dev.
func vfsOf(msg []byte) (File, bool) {
	if len(msg) < msgLen {
		return File{}, false
	}
	ne := binary.NativeEndian
	for a := msg[msgLen:]; len(a) >= unix.SizeofRtAttr; {
		l := int(ne.Uint16(a))
		if l < unix.SizeofRtAttr || l > len(a) {
			return File{}, false
		}
		if ne.Uint16(a[2:]) == unixDiagVFS && l >= unix.SizeofRtAttr+8 {
			ino, dev := ne.Uint32(a[4:]), ne.Uint32(a[8:])
			return File{Dev: unix.Mkdev(dev>>20, dev&(1<<20-1)), Ino: uint64(ino)}, true
		}
		step := (l + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1)
		if step >= len(a) {
			break
		}
		a = a[step:]
	}
	return File{}, false
}
