package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/network"
)

// Start creates and starts the sandbox and returns once its agent answers a
// ping, bounded by ctx (or Options.StartTimeout when ctx has no deadline).
//
// A new id gets a directory, a bundle and a runtime container; an id whose
// sandbox is stopped gets a fresh container on the same directory and root
// (a wake). Starting a running sandbox is an error. On any error the
// runtime's container, its processes and cgroups are removed again, and for
// a new id so is its directory (unless a cgroup could not be removed: then
// the sandbox stays known, stopped, for Delete to finish); the error names
// the step that failed and ends with the tail of the sandbox's logs.
//
// An egress sandbox (Spec.Network) is attached to the host's network
// before the runtime starts and runs in the attachment's namespace; a
// driver with no network host (Options.Network) refuses it before doing
// anything. The attachment outlives Stop (a wake reuses it, with the same
// address) and goes with Delete, or with a failed start of a new id. A
// sandbox woken with no network loses the attachment it had.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) error {
	return d.start(ctx, spec, "")
}

// start is Start, from the memory image at image when it is not "" (see
// RestoreMemory).
func (d *Driver) start(ctx context.Context, spec driver.Spec, image string) (err error) {
	if err := d.checkSpec(spec); err != nil {
		return err
	}
	id := spec.ID
	defer d.locks.lock(id)()
	log := d.log.With("sandbox", id)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.startTimeout)
		defer cancel()
	}
	began := time.Now()

	existed, err := d.dir.known(id)
	if err != nil {
		return fmt.Errorf("oci: start %s: %w", id, err)
	}
	if existed {
		d.rt.stopStrayRun(ctx, id)
	}
	if existed && !d.dir.stopped(id) {
		if err := d.clearStale(ctx, id); err != nil {
			return err
		}
	}
	defer func() {
		if err != nil {
			err = d.undoStart(ctx, id, existed, err)
		}
	}()

	att, err := d.attach(ctx, spec)
	if err != nil {
		return fmt.Errorf("oci: start %s: network: %w", id, err)
	}
	b, err := d.prepare(spec, att)
	if err != nil {
		return fmt.Errorf("oci: start %s: %w", id, err)
	}
	if err := d.writeBundle(b); err != nil {
		return fmt.Errorf("oci: start %s: %w", id, err)
	}
	err = d.create(ctx, id, spec.Network, image)
	if b.ids != nil {
		// The runtime's mount namespace holds the root now; the host's
		// mount of it was only the way in.
		if uerr := unmountAll(b.root); uerr != nil {
			log.Error("unmount the idmapped root", "err", uerr)
		}
	}
	if err != nil {
		return d.startError(id, "run", err)
	}
	if image != "" {
		// The restored agent is quiet (it was for the checkpoint) until
		// the resume marker appears.
		if err := d.channels.mark(id, resumeName); err != nil {
			return fmt.Errorf("oci: restore %s: %w", id, err)
		}
	}
	if err := d.waitAgent(ctx, id); err != nil {
		return d.startError(id, "wait for the agent", err)
	}
	log.Info("sandbox started", "wake", existed, "memory", image != "", "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// clearStale clears the container of known sandbox id, which Stop did not
// stop: one that died on its own is torn down, keeping what its cgroup
// knows about an OOM; one that runs is an error.
func (d *Driver) clearStale(ctx context.Context, id string) error {
	st, err := d.rt.state(ctx, id)
	if err != nil {
		return fmt.Errorf("oci: start %s: %w", id, err)
	}
	if st != nil && (st.Status == "running" || st.Status == "paused") {
		return fmt.Errorf("oci: start %s: already running", id)
	}
	if err := d.teardownState(ctx, id, st, true); err != nil {
		return fmt.Errorf("oci: start %s: clear the old container: %w", id, err)
	}
	return nil
}

// undoStart removes what a start of sandbox id that failed with err made,
// and returns err, with what the cleanup could not do. A sandbox that
// existed before stays known and stopped; a new one goes, directory and
// network attachment. When the runtime's teardown fails the directory
// stays, so that the sandbox stays known and a Delete can finish the job.
func (d *Driver) undoStart(ctx context.Context, id string, existed bool, err error) error {
	log := d.log.With("sandbox", id)
	// Undo with a context of its own: ctx may be what ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if terr := d.teardown(ctx, id, false); terr != nil {
		log.Error("cleanup after a failed start", "err", terr)
		return fmt.Errorf("%w (and cleanup: %v)", err, terr)
	}
	if existed {
		if err2 := d.dir.markStopped(id); err2 != nil {
			log.Error("cleanup after a failed start", "err", err2)
		}
		return err
	}
	if d.net != nil {
		// Without a directory, only Recover would find it.
		if err2 := d.net.Detach(ctx, id); err2 != nil {
			log.Error("cleanup after a failed start", "err", err2)
			err = fmt.Errorf("%w (and cleanup: %v)", err, err2)
		}
	}
	if err2 := os.RemoveAll(d.dir.sandboxDir(id)); err2 != nil {
		log.Error("cleanup after a failed start", "err", err2)
	}
	return err
}

// checkSpec rejects a spec the runtime would fail on later, before anything
// is made.
func (d *Driver) checkSpec(spec driver.Spec) error {
	if err := validID(spec.ID); err != nil {
		return err
	}
	if fi, err := os.Stat(spec.RootFS); err != nil || !fi.IsDir() || !filepath.IsAbs(spec.RootFS) {
		return fmt.Errorf("oci: start %s: root filesystem %q is not an absolute path to a directory", spec.ID, spec.RootFS)
	}
	if fi, err := os.Stat(spec.AgentPath); err != nil || !fi.Mode().IsRegular() || !filepath.IsAbs(spec.AgentPath) {
		return fmt.Errorf("oci: start %s: agent %q is not an absolute path to a file", spec.ID, spec.AgentPath)
	}
	switch spec.Network {
	case "", driver.NetworkNone:
	case driver.NetworkEgress:
		if d.net == nil {
			return fmt.Errorf("oci: start %s: network %q: %w", spec.ID, spec.Network, ErrNoEgress)
		}
		if err := egressOf(spec.Egress).Validate(); err != nil {
			return fmt.Errorf("oci: start %s: %w", spec.ID, err)
		}
	default:
		return fmt.Errorf("oci: start %s: unknown network mode %q (want %q or %q)", spec.ID, spec.Network, driver.NetworkNone, driver.NetworkEgress)
	}
	return nil
}

// attach gives an egress sandbox its network attachment, under the
// network caps of its Resources and its own egress rules (Spec.Egress; at
// every start: a wake may bring other ones), and returns it. For any other it returns the zero Attachment (a
// new empty namespace) and removes an attachment the sandbox kept from an
// egress run before, so that a sandbox's network is only ever what its
// spec asks for.
func (d *Driver) attach(ctx context.Context, spec driver.Spec) (network.Attachment, error) {
	if spec.Network != driver.NetworkEgress {
		if d.net != nil {
			return network.Attachment{}, d.net.Detach(ctx, spec.ID)
		}
		return network.Attachment{}, nil
	}
	a, err := d.net.Attach(ctx, spec.ID, network.Limits{BitsPerSec: spec.Resources.NetBitsPerSec, Conns: spec.Resources.NetConns}, egressOf(spec.Egress))
	if err != nil {
		return network.Attachment{}, err
	}
	d.log.Debug("sandbox attached to the network", "sandbox", spec.ID, "addr", a.Addr, "gateway", a.Gateway, "netns", a.Namespace)
	return a, nil
}

// prepare makes what sandbox spec's bundle names, in the network
// namespace of att (a new empty one for the zero Attachment): the sandbox's
// directory, the driver's mount directory with the agent binary and the
// resolv.conf (see writeResolvConf), and under runc and crun a claimed
// user namespace range with the root's idmapped mount (see userns.go),
// which the caller unmounts once the runtime has started.
func (d *Driver) prepare(spec driver.Spec, att network.Attachment) (bundle, error) {
	id := spec.ID
	b := bundle{runtime: d.runtime, spec: spec, root: spec.RootFS, cgroupParent: d.cg.parent, netns: att.Namespace}
	if err := os.MkdirAll(d.dir.sandboxDir(id), 0o700); err != nil {
		return b, err
	}
	if err := d.mounts.ensure(); err != nil {
		return b, err
	}
	var err error
	if b.agent, err = d.mounts.shareAgent(spec.AgentPath); err != nil {
		return b, fmt.Errorf("agent: %w", err)
	}
	if b.resolvConf, err = d.writeResolvConf(spec, att); err != nil {
		return b, err
	}
	if d.runtime == RuntimeRunsc {
		b.socketDir = d.dir.socketDir(id)
		return b, nil
	}
	if err := d.ids.release(id); err != nil { // a claim of an earlier run, never released
		return b, err
	}
	r, err := d.ids.claim(id)
	if err != nil {
		return b, fmt.Errorf("user namespace: %w", err)
	}
	b.ids = &r
	b.root = d.mounts.rootMount(id)
	if err := unmountAll(b.root); err != nil { // a mount an earlier start left
		return b, err
	}
	if err := mountIdmapped(spec.RootFS, b.root, r); err != nil {
		return b, err
	}
	return b, nil
}

// writeBundle writes sandbox b's config.json in its directory; it also
// forgets the previous run's stopped marker, OOM, pid and socket, and
// keeps its console log as console.log.1.
func (d *Driver) writeBundle(b bundle) error {
	id := b.spec.ID
	spec := b.spec
	if d.runtime == RuntimeRunsc {
		// The shared directory starts empty: a new tmpfs, or the one a
		// sandbox that died on its own left, emptied of what the daemon
		// ever looks at (the socket of the last boot, a marker).
		if err := d.channels.mount(id); err != nil {
			return err
		}
		for _, name := range []string{SocketName, resumeName} {
			if err := d.channels.remove(id, name); err != nil {
				return err
			}
		}
		if err := ensureTmp(spec.RootFS); err != nil {
			return err
		}
	}
	for _, p := range []string{d.dir.stoppedMarker(id), d.dir.oomMarker(id), d.dir.pidFile(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(d.dir.consoleLog(id), d.dir.consoleLog(id)+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cfg, err := json.MarshalIndent(bundleSpec(b), "", "\t")
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.dir.sandboxDir(id), "config.json.tmp")
	if err := os.WriteFile(tmp, cfg, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.dir.sandboxDir(id), "config.json"))
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

// writeResolvConf returns the resolv.conf of an egress sandbox whose
// network host serves DNS, a file of the driver's mount directory, for
// bundleSpec to mount on /etc/resolv.conf: its gateway as its only name
// server, which the host's rules redirect to the forwarder (see
// network.Host.ServeDNS), with glibc's retries shortened so that a
// resolver that does not answer fails a lookup in seconds. Any other
// sandbox keeps its image's file: it returns "".
func (d *Driver) writeResolvConf(spec driver.Spec, att network.Attachment) (string, error) {
	if att.Namespace == "" || d.net == nil || !d.net.ServesDNS() {
		return "", nil
	}
	if err := ensureResolvConf(spec.RootFS); err != nil {
		return "", err
	}
	content := "nameserver " + att.Gateway.String() + "\noptions timeout:2 attempts:2\n"
	return d.mounts.shareFile("resolv-", ".conf", []byte(content))
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

// create makes sandbox id's container (runner.create), under runc and
// crun with the agent's listening socket made here first, in the sandbox's
// directory (see channel.go); the daemon's descriptor of it is closed once
// the container has inherited it.
func (d *Driver) create(ctx context.Context, id, network, image string) error {
	var listener *os.File
	if d.runtime != RuntimeRunsc {
		var err error
		if listener, err = d.channels.listen(id); err != nil {
			return fmt.Errorf("agent socket: %w", err)
		}
		defer listener.Close()
	}
	return d.rt.create(ctx, id, network, image, listener)
}

// startError wraps a failed start step with the tail of the sandbox's logs.
func (d *Driver) startError(id, step string, err error) error {
	tail := d.rt.logTail(id)
	if tail != "" {
		tail = "\n" + tail
	}
	return fmt.Errorf("oci: start %s: %s: %w%s", id, step, err, tail)
}

// waitAgent pings the agent until it answers, the container stops, or ctx
// ends.
func (d *Driver) waitAgent(ctx context.Context, id string) error {
	var lastDial error
	client := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		c, err := d.channels.dial(ctx, id)
		if err != nil {
			lastDial = err
		}
		return c, err
	})
	delay := 250 * time.Microsecond
	lastCheck := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Since(lastCheck) > 200*time.Millisecond {
			lastCheck = time.Now()
			st, serr := d.rt.state(ctx, id)
			if serr == nil && (st == nil || st.Status != "running") {
				return errors.New("the sandbox stopped before its agent answered")
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if lastDial != nil {
				return fmt.Errorf("agent did not answer: %w (last dial: %v)", ctx.Err(), lastDial)
			}
			return fmt.Errorf("agent did not answer: %w (last ping: %v)", ctx.Err(), err)
		case <-t.C:
		}
		// A dial of a socket that is not there yet costs microseconds:
		// polling often keeps what a start waits after the agent listens
		// under a millisecond.
		delay = min(2*delay, 2*time.Millisecond)
	}
}
