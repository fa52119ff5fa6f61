package oci

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/sockdiag"
)

// The agent's channel: a unix socket the daemon connects to as root.
//
// Under runc and crun the daemon makes the listening socket itself, in the
// sandbox's directory, which is never mounted into the sandbox, and hands
// it to the agent as an open descriptor (see channels.listen): there is no
// host directory the two share, so nothing the sandbox does can change
// what the daemon's paths name.
//
// Under runsc the agent must be able to close its socket and make it again
// (gVisor cannot save a host socket in a memory checkpoint: see
// agent.QuiesceSignal), so the agent creates it in a host directory shared
// with the sandbox, <dir>/run, mounted at SocketDir (runsc --host-uds=create
// creates it on the host through the gofer). Root in the sandbox owns that
// directory: it can put there any name as a symlink (to any host path), a
// FIFO, a hard link to a file of the same mount, a directory, or a socket
// of its own, and swap them at any moment. So every daemon-side operation
// there goes through sharedDir, which never resolves a name the sandbox
// controls as a path: one O_PATH descriptor of the directory, opened with
// O_NOFOLLOW from the daemon's own sandbox directory; names under it
// resolved by openat2 with RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS,
// RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV; markers created with
// O_CREAT|O_EXCL|O_NOFOLLOW (never opening what is there); removal by
// unlinkat (which removes a link, never its target); existence by fstatat
// with AT_SYMLINK_NOFOLLOW; and the connect through an O_PATH descriptor of
// the socket whose type was checked (S_IFSOCK), as /proc/self/fd/N, so that
// the inode checked is the inode connected to. The directory is a small
// tmpfs of its own (see channels.mount): what the sandbox writes there cannot
// fill the host's disk, and no hard link can reach a file of the data dir.
// Nothing on the host depends on the directory's mode or owner, which root
// in the sandbox may change.

// resolveBeneath confines openat2 to the directory it starts from, with no
// symlink (magic or not) and no mount crossing on the way.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Limits of the shared directory's tmpfs: the agent keeps a socket and,
// for a moment, the resume marker there.
const sharedMountOptions = "size=64k,nr_inodes=64,mode=0700"

// resumeName is the marker that resumes a quiet agent, beside its socket
// (agent.ResumeMarker).
const resumeName = "resume"

// errNotSocket is returned by a dial of a name that is not a unix socket.
var errNotSocket = errors.New("not a unix socket")

// openDir opens path, a directory the daemon owns, as an O_PATH
// descriptor; a symlink there is refused.
func openDir(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// sharedDir is an open descriptor of a directory the sandbox can write
// (or of the daemon's own sandbox directory, for the runc socket: the
// same code reaches both). Its methods take one name, never a path.
type sharedDir struct {
	fd   int
	path string // for messages only
}

// channels are the ends the daemon holds of its sandboxes' agent
// channels: the shared directory of each runsc sandbox (its tmpfs, its
// socket and markers), and the listening socket the daemon makes for each
// runc and crun sandbox, in its sandbox directory.
type channels struct {
	runtime string
	dir     stateDir
	log     *slog.Logger
	// calls counts each sandbox's dials of its agent (id → *atomic.Uint64),
	// one per call the daemon makes to it: quiet neighbours tell a
	// sandbox driven by calls from one whose processes saturate the CPU.
	calls sync.Map
	// reserve hears of each call (see reserve.go); nil hears none.
	reserve *cpuReserve
}

// called returns how many times sandbox id's agent was dialed since the
// driver started (or since forget).
func (c *channels) called(id string) uint64 {
	if n, ok := c.calls.Load(id); ok {
		return n.(*atomic.Uint64).Load()
	}
	return 0
}

// forget drops sandbox id's count of calls.
func (c *channels) forget(id string) { c.calls.Delete(id) }

// open opens sandbox id's shared run directory (runsc), or, for the
// other runtimes, its sandbox directory, where the daemon keeps the socket.
func (c *channels) open(id string) (*sharedDir, error) {
	fd, err := openDir(c.dir.sandboxDir(id))
	if err != nil {
		return nil, err
	}
	if c.runtime != RuntimeRunsc {
		return &sharedDir{fd: fd, path: c.dir.sandboxDir(id)}, nil
	}
	defer unix.Close(fd)
	rfd, err := unix.Openat(fd, "run", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: c.dir.socketDir(id), Err: err}
	}
	return &sharedDir{fd: rfd, path: c.dir.socketDir(id)}, nil
}

// Close closes the descriptor.
func (s *sharedDir) Close() error { return unix.Close(s.fd) }

// open opens name under s with openat2 (see resolveBeneath), never
// following a link; a rename in the directory meanwhile (EAGAIN) is
// retried a few times.
func (s *sharedDir) open(name string, flags uint64, mode uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_NOFOLLOW | unix.O_CLOEXEC, Mode: mode, Resolve: resolveBeneath}
	for range 8 {
		fd, err := unix.Openat2(s.fd, name, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: filepath.Join(s.path, name), Err: err}
		}
		return fd, nil
	}
	return -1, &os.PathError{Op: "openat2", Path: filepath.Join(s.path, name), Err: unix.EAGAIN}
}

// exists reports whether anything is called name in s (a link counts as
// itself).
func (s *sharedDir) exists(name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(s.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "fstatat", Path: filepath.Join(s.path, name), Err: err}
	}
	return true, nil
}

// remove removes the entry name of s, whatever it is (a link, never its
// target; an empty directory); one that is not there is no error.
func (s *sharedDir) remove(name string) error {
	err := unix.Unlinkat(s.fd, name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(s.fd, name, unix.AT_REMOVEDIR)
	}
	if err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "unlinkat", Path: filepath.Join(s.path, name), Err: err}
	}
	return nil
}

// mark creates the empty file name in s, or finds something there already
// and leaves it: a marker's meaning is that the name exists (the agent
// removes whatever it finds). An existing entry is never opened, so a
// link or a FIFO planted there is never followed or blocked on.
func (s *sharedDir) mark(name string) error {
	fd, err := s.open(name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// dial connects to the unix socket called name in s: it opens the name
// O_PATH (a link opens as itself), checks that it is a socket, and
// connects through the descriptor (/proc/self/fd/N), so that what is
// connected to is the inode checked, whatever happens to the name
// meanwhile.
func (s *sharedDir) dial(ctx context.Context, name string) (net.Conn, error) {
	fd, _, err := s.socket(name)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	defer unix.Close(fd)
	var dl net.Dialer
	return dl.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

// socket opens name in s as an O_PATH descriptor (see open) and returns it
// with its stat, once checked to be a unix socket (errNotSocket if not).
func (s *sharedDir) socket(name string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := s.open(name, unix.O_PATH, 0)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, st, fmt.Errorf("%s: %w (mode %#o)", filepath.Join(s.path, name), errNotSocket, st.Mode)
	}
	return fd, st, nil
}

// listen makes a listening unix socket called name in s (removing what
// was there) and returns it, for the agent to inherit. It binds through
// /proc/self/fd/N/name, so the directory's path may be of any length.
func (s *sharedDir) listen(name string) (*os.File, error) {
	if err := s.remove(name); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	addr := &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(s.fd) + "/" + name}
	if err := unix.Bind(fd, addr); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "bind", Path: filepath.Join(s.path, name), Err: err}
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen: %w", err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(s.path, name)), nil
}

// dial connects to sandbox id's agent socket (see sharedDir.dial).
func (c *channels) dial(ctx context.Context, id string) (net.Conn, error) {
	n, _ := c.calls.LoadOrStore(id, new(atomic.Uint64))
	n.(*atomic.Uint64).Add(1)
	c.reserve.called(id)
	s, err := c.open(id)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	defer s.Close()
	return s.dial(ctx, SocketName)
}

// socketFile is the file of sandbox id's agent socket, found as dial
// finds it.
func (c *channels) socketFile(id string) (sockdiag.File, error) {
	s, err := c.open(id)
	if err != nil {
		return sockdiag.File{}, err
	}
	defer s.Close()
	fd, st, err := s.socket(SocketName)
	if err != nil {
		return sockdiag.File{}, err
	}
	unix.Close(fd)
	return sockdiag.FileOf(&st), nil
}

// mount gives runsc sandbox id's shared directory a tmpfs of its own
// (sharedMountOptions), unless it has one. The tmpfs bounds what the
// sandbox can store there, and keeps links of the data dir's files out.
func (c *channels) mount(id string) error {
	dir := c.dir.socketDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	var parent, st unix.Stat_t
	if err := unix.Lstat(c.dir.sandboxDir(id), &parent); err != nil {
		return err
	}
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st.Dev != parent.Dev {
		return nil // mounted already
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, sharedMountOptions); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmount detaches every mount on sandbox id's shared directory.
func (c *channels) unmount(id string) error { return unmountEvery(c.dir.socketDir(id)) }

// unmountEvery detaches every mount on path (never following a link
// there); a path with no mount is no error.
func unmountEvery(path string) error {
	for range 16 {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err == unix.EINVAL || err == unix.ENOENT {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: mounts keep coming back", path)
}

// mark creates the marker name in sandbox id's shared directory
// (see sharedDir.mark).
func (c *channels) mark(id, name string) error {
	s, err := c.open(id)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.mark(name)
}

// remove removes name from sandbox id's shared directory, if the
// directory is there.
func (c *channels) remove(id, name string) error {
	s, err := c.open(id)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer s.Close()
	return s.remove(name)
}

// agentListenFD is the descriptor the agent inherits its listening socket
// on under runc and crun: the first after stdio (`run --preserve-fds 1`).
const agentListenFD = 3

// listen makes the listening socket of sandbox id's agent in its
// sandbox directory (runc and crun), replacing the one of its last boot.
func (c *channels) listen(id string) (*os.File, error) {
	s, err := c.open(id)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.listen(SocketName)
}

// resumeLeftQuiet lets the agent of sandbox id listen again if a daemon
// died while it was quiet (its socket gone, and no resume marker yet), or
// while a memory checkpoint was quieting it (the quiet marker there): then
// the checkpoint's signal may still be on its way, from a `runsc kill` that
// outlived the daemon, and the agent ignores a signal that finds the resume
// marker (see agent.QuiesceSignal). A marker that nothing consumes is
// removed by the next memory checkpoint before its signal.
//
// Under runc and crun, which have no memory checkpoints, it does nothing.
func (c *channels) resumeLeftQuiet(id string) {
	if c.runtime != RuntimeRunsc {
		return
	}
	quieting := os.Remove(c.dir.quietMarker(id)) == nil
	sd, err := c.open(id)
	if err != nil {
		return // no shared directory: never started
	}
	defer sd.Close()
	if there, err := sd.exists(SocketName); err == nil && there && !quieting {
		return
	}
	if err := sd.mark(resumeName); err != nil {
		c.log.Error("recover: resume a quiet agent", "sandbox", id, "err", err)
	}
}
