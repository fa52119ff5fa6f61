package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/network"
)

// bundles lay out sandboxes' OCI bundles on the host: each sandbox's
// directory and config.json (bundleSpec), and what the configuration
// names there: the agent binary and resolv.conf in the driver's mount
// directory, under runc and crun a claimed user namespace range and the
// root's idmapped mount, under runsc the shared directory's tmpfs.
type bundles struct {
	runtime      string
	cgroupParent string
	dir          stateDir
	mounts       *mountDir
	ids          *idClaims
	channels     *channels
	net          *networks
}

// prepare makes what sandbox spec's bundle names, in the network
// namespace of att (a new empty one for the zero Attachment): the sandbox's
// directory, the driver's mount directory with the agent binary and the
// resolv.conf (see resolvConf), and under runc and crun a claimed
// user namespace range with the root's idmapped mount (see userns.go),
// which the caller unmounts once the runtime has started.
func (bs *bundles) prepare(spec driver.Spec, att network.Attachment) (bundle, error) {
	id := spec.ID
	b := bundle{runtime: bs.runtime, spec: spec, root: spec.RootFS, cgroupParent: bs.cgroupParent, netns: att.Namespace}
	if err := os.MkdirAll(bs.dir.sandboxDir(id), 0o700); err != nil {
		return b, err
	}
	if err := bs.mounts.ensure(); err != nil {
		return b, err
	}
	var err error
	if b.agent, err = bs.mounts.shareAgent(spec.AgentPath); err != nil {
		return b, fmt.Errorf("agent: %w", err)
	}
	if b.resolvConf, err = bs.resolvConf(spec, att); err != nil {
		return b, err
	}
	if bs.runtime == RuntimeRunsc {
		b.socketDir = bs.dir.socketDir(id)
		return b, nil
	}
	if err := bs.ids.release(id); err != nil { // a claim of an earlier run, never released
		return b, err
	}
	r, err := bs.ids.claim(id)
	if err != nil {
		return b, fmt.Errorf("user namespace: %w", err)
	}
	b.ids = &r
	b.root = bs.mounts.rootMount(id)
	if err := unmountAll(b.root); err != nil { // a mount an earlier start left
		return b, err
	}
	if err := mountIdmapped(spec.RootFS, b.root, r); err != nil {
		return b, err
	}
	return b, nil
}

// write writes sandbox b's config.json in its directory; it also
// forgets the previous run's stopped marker, OOM, pid and socket, and
// keeps its console log as console.log.1.
func (bs *bundles) write(b bundle) error {
	id := b.spec.ID
	spec := b.spec
	if bs.runtime == RuntimeRunsc {
		// The shared directory starts empty: a new tmpfs, or the one a
		// sandbox that died on its own left, emptied of what the daemon
		// ever looks at (the socket of the last boot, a marker).
		if err := bs.channels.mount(id); err != nil {
			return err
		}
		for _, name := range []string{SocketName, resumeName} {
			if err := bs.channels.remove(id, name); err != nil {
				return err
			}
		}
		if err := ensureTmp(spec.RootFS); err != nil {
			return err
		}
	}
	for _, p := range []string{bs.dir.stoppedMarker(id), bs.dir.oomMarker(id), bs.dir.pidFile(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(bs.dir.consoleLog(id), bs.dir.consoleLog(id)+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cfg, err := json.MarshalIndent(bundleSpec(b), "", "\t")
	if err != nil {
		return err
	}
	tmp := bs.dir.config(id) + ".tmp"
	if err := os.WriteFile(tmp, cfg, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, bs.dir.config(id))
}

// ensureTmp makes sure the root's /tmp is a directory (mode 1777 when it
// has to be made), since it is the source of the /tmp bind mount (see
// mounts). Anything else there, a symlink included, is refused: the mount
// source is resolved on the host.
func ensureTmp(rootfs string) error {
	tmp := filepath.Join(rootfs, "tmp")
	fi, err := os.Lstat(tmp)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(tmp, 0o777); err != nil {
			return err
		}
		return os.Chmod(tmp, 0o777|fs.ModeSticky)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("the root's /tmp is a %v, not a directory", fi.Mode().Type())
	}
	return nil
}

// resolvConf returns the resolv.conf of an egress sandbox whose
// network host serves DNS, a file of the driver's mount directory, for
// bundleSpec to mount on /etc/resolv.conf: its gateway as its only name
// server, which the host's rules redirect to the forwarder (see
// network.Host.ServeDNS), with glibc's retries shortened so that a
// resolver that does not answer fails a lookup in seconds. Any other
// sandbox keeps its image's file: it returns "".
func (bs *bundles) resolvConf(spec driver.Spec, att network.Attachment) (string, error) {
	if att.Namespace == "" || !bs.net.servesDNS() {
		return "", nil
	}
	if err := ensureResolvConf(spec.RootFS); err != nil {
		return "", err
	}
	content := "nameserver " + att.Gateway.String() + "\noptions timeout:2 attempts:2\n"
	return bs.mounts.shareFile("resolv-", ".conf", []byte(content))
}

// ensureResolvConf makes sure the root's /etc/resolv.conf is a regular
// file, the mount point of the generated one, creating an empty one (and
// /etc) when missing. Anything else there, a symlink included (as
// systemd-resolved images have), is refused, and so is an /etc that is not
// a directory: the path is resolved on the host, where a symlink would
// lead out of the root.
func ensureResolvConf(rootfs string) error {
	etc := filepath.Join(rootfs, "etc")
	fi, err := os.Lstat(etc)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(etc, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("the root's /etc is a %v, not a directory", fi.Mode().Type())
	}
	path := filepath.Join(etc, "resolv.conf")
	fi, err = os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("the root's /etc/resolv.conf is a %v, not a regular file: hearth mounts the sandbox's own on it", fi.Mode().Type())
	}
	return nil
}
