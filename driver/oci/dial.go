package oci

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxSocketPath is the longest unix socket path dialed directly: sun_path
// holds 108 bytes with the terminating NUL, and some libcs count less.
const maxSocketPath = 100

// dialUnix connects to the unix socket at path. A path too long for
// sun_path is reached through an O_PATH descriptor of its directory, as
// /proc/self/fd/<n>/<name>, which the kernel resolves at connect time; the
// descriptor is closed once the connection is made.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= maxSocketPath {
		return d.DialContext(ctx, "unix", path)
	}
	dir, name := filepath.Split(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("open %s: %w", dir, err)}
	}
	defer unix.Close(fd)
	short := fmt.Sprintf("/proc/self/fd/%d/%s", fd, name)
	if len(short) > maxSocketPath {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("socket name %q too long", name)}
	}
	return d.DialContext(ctx, "unix", short)
}
