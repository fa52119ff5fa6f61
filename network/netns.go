package network

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// isNamespace reports whether path is a mounted namespace (what
// `ip netns add` leaves), not a bare file.
func isNamespace(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// InNamespace runs fn on an OS thread that has joined the network namespace
// at path: sysctls under /proc/sys/net and netlink sockets then belong to
// that namespace. The thread never runs anything else: its goroutine ends
// locked to it, so the Go runtime ends the thread instead of reusing it.
func InNamespace(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see above
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("join network namespace %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// prepareNamespace turns IPv6 off in the namespace at path, for every
// interface in it and every one made or moved there later, and reports
// whether it has an eth0.
func prepareNamespace(path string) (hasEth0 bool, err error) {
	err = InNamespace(path, func() error {
		for _, dev := range []string{"all", "default"} {
			if err := disableIPv6(dev); err != nil {
				return err
			}
		}
		ifaces, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifc := range ifaces {
			if err := disableIPv6(ifc.Name); err != nil {
				return err
			}
			hasEth0 = hasEth0 || ifc.Name == "eth0"
		}
		return nil
	})
	return hasEth0, err
}

// disableIPv6 turns IPv6 off on interface dev ("all", "default" or a name)
// of the calling thread's network namespace; a kernel without IPv6 has
// nothing to turn off.
func disableIPv6(dev string) error {
	p := filepath.Join("/proc/sys/net/ipv6/conf", dev, "disable_ipv6")
	if _, err := os.Stat(filepath.Dir(p)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return writeSysctl(p, "1")
}
