package sockdiag

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func fileAt(t *testing.T, path string) File {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return FileOf(&st)
}

func listeners(t *testing.T) map[File]bool {
	t.Helper()
	c, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set, err := c.UnixListeners()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// A socket is reported by its file while it listens, and not before
// (bound only), nor after it is closed; a regular file never is.
func TestUnixListeners(t *testing.T) {
	dir := t.TempDir()
	listening := filepath.Join(dir, "listening.sock")
	ln, err := net.Listen("unix", listening)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	bound := filepath.Join(dir, "bound.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: bound}); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	set := listeners(t)
	if !set[fileAt(t, listening)] {
		t.Errorf("the listening socket %v is not among the %d listeners", fileAt(t, listening), len(set))
	}
	if set[fileAt(t, bound)] {
		t.Error("a socket bound and not listening is reported as listening")
	}
	if set[fileAt(t, plain)] {
		t.Error("a regular file is reported as a listener")
	}

	f := fileAt(t, listening)
	ln.Close()
	if listeners(t)[f] {
		t.Error("a closed listener is still reported")
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	if !listeners(t)[fileAt(t, bound)] {
		t.Error("the bound socket, listening now, is not reported")
	}
}

// A sock_diag socket answers for the network namespace it was opened in:
// one opened in the host's does not see a listener made in another
// namespace, and one opened there does.
func TestUnixListenersPerNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	path := filepath.Join(t.TempDir(), "other.sock")
	type result struct {
		inside map[File]bool
		err    error
	}
	done := make(chan result, 1)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{err: err}
			return
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
		}
		if err == nil {
			err = unix.Listen(fd, 1)
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		defer unix.Close(fd)
		c, err := Open()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		set, err := c.UnixListeners()
		done <- result{set, err}
		<-release
	}()
	r := <-done
	defer close(release)
	if r.err != nil {
		t.Fatal(r.err)
	}
	f := fileAt(t, path)
	if !r.inside[f] {
		t.Errorf("the listener is not seen from its own namespace (%d listeners there)", len(r.inside))
	}
	if listeners(t)[f] {
		t.Error("a listener of another network namespace is seen from the host's")
	}
}
