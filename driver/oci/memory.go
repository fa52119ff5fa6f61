package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hearth/hearth/driver"
)

var _ driver.MemoryCheckpointer = (*Driver)(nil)

// quietTimeout bounds the wait for the agent to close its socket.
const quietTimeout = 5 * time.Second

// errNoMemory is returned by the memory calls of a runtime that cannot
// save a sandbox's memory (runc and crun here: their checkpoints need
// CRIU).
var errNoMemory = errors.New("this runtime cannot checkpoint memory (runsc can)")

// CheckpointMemory saves running sandbox id's memory and processes as image
// key, with gVisor's own checkpoint, and leaves it running (or, with
// opts.Stop, stopped). gVisor cannot save a socket to the host, so the
// agent is quieted first (its socket closed: see agent.QuiesceSignal);
// then the sandbox is paused (gVisor's pause, as Freeze does),
// opts.Paused runs, and `runsc checkpoint` writes the image into a tmpfs.
// With --leave-running the sandbox resumes and the agent is told to listen
// again, and CheckpointMemory returns once it answers; with opts.Stop runsc
// ends the sandbox at the image's instant and it is torn down as Stop
// does. The image is sealed to disk meanwhile and after (seal.go), and a
// key names a whole sealed image or none. A daemon killed in between
// leaves the sandbox paused or its agent quiet, or an image unsealed:
// Recover resumes the first two and seals the last.
func (d *Driver) CheckpointMemory(ctx context.Context, id, key string, opts driver.MemoryOptions) (err error) {
	if validID(id) != nil {
		return driver.ErrNotFound
	}
	if validID(key) != nil {
		return fmt.Errorf("oci: checkpoint memory %s: image key %q: want lowercase letters and digits", id, key)
	}
	if d.runtime != RuntimeRunsc {
		return fmt.Errorf("oci: checkpoint memory %s: %w", id, errNoMemory)
	}
	defer d.locks.lock(id)()
	// The last image's seal lowers the memory limit this one raises.
	if err := d.images.seals.waitSandbox(ctx, id); err != nil {
		return fmt.Errorf("oci: checkpoint memory %s: wait for the last image's seal: %w", id, err)
	}
	dir, _, err := d.freezer.live(id)
	if err != nil {
		return fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.startTimeout)
		defer cancel()
	}
	began := time.Now()
	ended, err := d.checkpointMemory(ctx, id, key, dir, opts)
	if ended {
		// Nothing of the sandbox runs any more: what is left of it goes
		// as a Stop's does, and the image stays (it is whole).
		if err = d.stopLocked(ctx, id); err != nil {
			err = fmt.Errorf("oci: checkpoint memory %s: stop after the image: %w", id, err)
		}
	}
	if err == nil {
		d.log.Info("sandbox memory checkpointed", "sandbox", id, "image", key, "stopped", ended, "took", time.Since(began).Round(time.Millisecond))
	}
	return err
}

// checkpointMemory is CheckpointMemory once its checks are done, on live
// sandbox id whose freezer cgroup is dir: it quiets the agent, pauses the
// sandbox, runs opts.Paused, takes the image, and hands it to its seal.
// Then it resumes the sandbox and the agent; or, when opts.Stop and the
// image was taken, it reports that runsc ended the sandbox (ended), which
// the caller then tears down.
func (d *Driver) checkpointMemory(ctx context.Context, id, key, dir string, opts driver.MemoryOptions) (ended bool, err error) {
	sd, err := d.channels.open(id)
	if err != nil {
		return false, fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	defer sd.Close()
	// A marker left from before would make the agent ignore the signal
	// (see agent.QuiesceSignal).
	if err := sd.remove(resumeName); err != nil {
		return false, fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	d.quieting.Lock() // no dial is between its look and its connect
	err = os.WriteFile(d.dir.quietMarker(id), nil, 0o600)
	d.quieting.Unlock()
	if err != nil {
		return false, fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	defer os.Remove(d.dir.quietMarker(id))
	if _, err := d.rt.run(ctx, id, "kill", id, "USR1"); err != nil {
		return false, fmt.Errorf("oci: checkpoint memory %s: quiet the agent: %w", id, err)
	}
	var taken *takenImage
	defer func() { // after the agent answers, or not
		switch {
		case taken == nil:
		case err != nil:
			taken.discard(d.images)
		default:
			d.images.sealInBackground(taken)
		}
	}()
	defer func() { // tell the agent to listen again, and wait until it answers
		if ended {
			return
		}
		rerr := sd.mark(resumeName)
		if rerr == nil {
			rerr = waitAgent(ctx, d.channels, d.rt, id)
		}
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("oci: checkpoint memory %s: resume the agent: %w", id, rerr))
		}
	}()
	if err := waitGone(ctx, sd, SocketName); err != nil {
		return false, fmt.Errorf("oci: checkpoint memory %s: the agent did not go quiet: %w", id, err)
	}
	if err := d.freezer.pause(ctx, id, dir); err != nil {
		return false, err
	}
	taken, err = d.images.take(ctx, id, key, opts)
	if err == nil && opts.Stop {
		// Never resumed: the teardown that follows kills it as it lies.
		return true, d.freezer.ended(id)
	}
	if rerr := d.freezer.resume(id); rerr != nil {
		err = errors.Join(err, fmt.Errorf("oci: checkpoint memory %s: resume: %w", id, rerr))
	}
	return false, err
}

// waitGone waits until nothing is called name in sd, at most
// quietTimeout.
func waitGone(ctx context.Context, sd *sharedDir, name string) error {
	deadline := time.Now().Add(quietTimeout)
	for {
		there, err := sd.exists(name)
		if err != nil {
			return err
		}
		if !there {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still there after %v", name, quietTimeout)
		}
		if err := sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

// RestoreMemory starts stopped sandbox spec.ID as Start does, but with
// `runsc restore` from image key instead of `runsc run`: its processes go
// on from the image, opened into a private tmpfs first (see images.go; an
// image that does not open is ErrImageSealed). The restored agent is
// quiet, as it was when the image was taken; the resume marker makes it
// listen.
func (d *Driver) RestoreMemory(ctx context.Context, spec driver.Spec, key string) error {
	if validID(key) != nil {
		return fmt.Errorf("oci: restore %s: image key %q: want lowercase letters and digits", spec.ID, key)
	}
	if d.runtime != RuntimeRunsc {
		return fmt.Errorf("oci: restore %s: %w", spec.ID, errNoMemory)
	}
	if err := d.images.seals.waitKey(ctx, key); err != nil {
		return fmt.Errorf("oci: restore %s: wait for memory image %s's seal: %w", spec.ID, key, err)
	}
	began := time.Now()
	plain, err := d.images.load(key)
	if err != nil {
		return fmt.Errorf("oci: restore %s: memory image %s: %w", spec.ID, key, err)
	}
	d.log.Debug("memory image opened", "sandbox", spec.ID, "image", key, "took", time.Since(began).Round(time.Millisecond))
	defer d.images.unmountPlain(plain)
	return d.start(ctx, spec, plain)
}

// DeleteMemory removes image key, stopping its seal if it is being
// sealed, and what a checkpoint of it that failed half way may have left.
func (d *Driver) DeleteMemory(ctx context.Context, key string) error {
	if validID(key) != nil {
		return fmt.Errorf("oci: delete memory image %q: want lowercase letters and digits", key)
	}
	return d.images.delete(key)
}

// MemoryImages lists the keys of the memory images the driver keeps, for
// a caller that removes those no checkpoint owns.
func (d *Driver) MemoryImages(ctx context.Context) ([]string, error) {
	return d.images.list()
}
