package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
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
// A host with too few task ids or too little memory left for one more
// sandbox and a reserve refuses the start before anything is made (a
// *driver.HostLimitError; see hostlimit.go).
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
	if err := checkSpec(spec, d.net.host != nil); err != nil {
		return err
	}
	if err := d.room.check(); err != nil {
		return fmt.Errorf("oci: start %s: %w", spec.ID, err)
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

	att, err := d.net.attach(ctx, spec)
	if err != nil {
		return fmt.Errorf("oci: start %s: network: %w", id, err)
	}
	b, err := d.bundles.prepare(spec, att)
	if err != nil {
		return fmt.Errorf("oci: start %s: %w", id, err)
	}
	if err := d.bundles.write(b); err != nil {
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
		return startError(id, "run", err, d.rt.logTail(id))
	}
	if image != "" {
		// The restored agent is quiet (it was for the checkpoint) until
		// the resume marker appears.
		if err := d.channels.mark(id, resumeName); err != nil {
			return fmt.Errorf("oci: restore %s: %w", id, err)
		}
	}
	if err := waitAgent(ctx, d.channels, d.rt, id); err != nil {
		return startError(id, "wait for the agent", err, d.rt.logTail(id))
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
	// Without a directory, only Recover would find it.
	if err2 := d.net.detach(ctx, id); err2 != nil {
		log.Error("cleanup after a failed start", "err", err2)
		err = fmt.Errorf("%w (and cleanup: %v)", err, err2)
	}
	if err2 := os.RemoveAll(d.dir.sandboxDir(id)); err2 != nil {
		log.Error("cleanup after a failed start", "err", err2)
	}
	return err
}

// checkSpec rejects a spec the runtime would fail on later, before anything
// is made; egress says whether the driver has a network host.
func checkSpec(spec driver.Spec, egress bool) error {
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
		if !egress {
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

// startError wraps a failed start step of sandbox id with tail, the tail
// of its logs (runner.logTail).
func startError(id, step string, err error, tail string) error {
	if tail != "" {
		tail = "\n" + tail
	}
	return fmt.Errorf("oci: start %s: %s: %w%s", id, step, err, tail)
}

// waitAgent pings sandbox id's agent, dialled through ch, until it
// answers, rt finds the container stopped, or ctx ends.
func waitAgent(ctx context.Context, ch *channels, rt *runner, id string) error {
	var lastDial error
	client := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		c, err := ch.dial(ctx, id)
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
		if time.Since(lastCheck) > 100*time.Millisecond {
			lastCheck = time.Now()
			if rt.stoppedEarly(ctx, id) {
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
