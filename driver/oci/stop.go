package oci

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hearth/hearth/driver"
)

// Stop kills every process of sandbox id and deletes its runtime container
// and cgroups, keeping its directory and its network attachment: the
// sandbox stays known as stopped and Start wakes it, with the same address. It returns once the cgroups are gone, which the kernel
// allows only when no task is left in them. Stopping a stopped sandbox does
// nothing; an unknown id is driver.ErrNotFound.
func (d *Driver) Stop(ctx context.Context, id string) error {
	if validID(id) != nil {
		return driver.ErrNotFound
	}
	defer d.locks.lock(id)()
	ok, err := d.dir.known(id)
	if err != nil {
		return err
	}
	if !ok {
		return driver.ErrNotFound
	}
	if d.dir.stopped(id) {
		return nil
	}
	return d.stopLocked(ctx, id)
}

// stopLocked is Stop of known sandbox id, not stopped yet, whose lock the
// caller holds.
func (d *Driver) stopLocked(ctx context.Context, id string) error {
	if err := d.teardown(ctx, id, true); err != nil {
		return fmt.Errorf("oci: stop %s: %w", id, err)
	}
	if err := d.dir.markStopped(id); err != nil {
		return fmt.Errorf("oci: stop %s: %w", id, err)
	}
	d.log.Info("sandbox stopped", "sandbox", id)
	return nil
}

// Delete stops sandbox id if needed and removes its runtime container,
// cgroups, network attachment and directory. It fails, keeping the
// directory so that a retry can finish, when a cgroup of the sandbox or its
// attachment cannot be removed. It also removes runtime and network
// leftovers of an id the driver has no directory for (an interrupted Start
// or Delete); only when there is nothing at all does it return
// driver.ErrNotFound.
func (d *Driver) Delete(ctx context.Context, id string) error {
	if validID(id) != nil {
		return driver.ErrNotFound
	}
	defer d.locks.lock(id)()
	ok, err := d.dir.known(id)
	if err != nil {
		return err
	}
	d.rt.stopStrayRun(ctx, id)
	st, err := d.rt.container(ctx, id)
	if err != nil {
		// The runtime lists a container it cannot describe (one whose
		// create was cut short), or runsc's root cannot be read.
		// Force-delete it by id all the same.
		d.log.Warn("deleting a container the runtime cannot describe", "sandbox", id, "err", err)
		st = &specs.State{ID: id, Status: "unknown"}
	}
	attached := d.net.attached(id)
	if !ok && st == nil && !attached && len(d.cg.leftovers(id)) == 0 {
		return driver.ErrNotFound
	}
	if err := d.teardownState(ctx, id, st, false); err != nil {
		return fmt.Errorf("oci: delete %s: %w", id, err)
	}
	d.channels.forget(id)
	// After the runtime is gone: nothing holds the namespace any more.
	if attached {
		if err := d.net.detach(ctx, id); err != nil {
			return fmt.Errorf("oci: delete %s: %w", id, err)
		}
	}
	if err := os.RemoveAll(d.dir.sandboxDir(id)); err != nil {
		return fmt.Errorf("oci: delete %s: %w", id, err)
	}
	d.log.Info("sandbox deleted", "sandbox", id)
	return nil
}

// teardown removes id's runtime container: it records an OOM the cgroup
// saw when keepOOM is set, force-deletes the container (which kills its
// processes), then removes whatever cgroups the runtime left, killing any
// task still in them. It succeeds only when no cgroup of the sandbox is
// left, and does nothing for a sandbox that has no container.
func (d *Driver) teardown(ctx context.Context, id string, keepOOM bool) error {
	st, err := d.rt.container(ctx, id)
	if err != nil {
		return err
	}
	return d.teardownState(ctx, id, st, keepOOM)
}

// teardownState is teardown with the runtime's state of id (nil: no
// container) already known.
//
// A frozen sandbox is thawed first: a v1-frozen task does not die of
// SIGKILL until it is thawed, and runsc kills through its sentry, which
// must be running to answer.
func (d *Driver) teardownState(ctx context.Context, id string, st *specs.State, keepOOM bool) error {
	if thawed, err := d.freezer.thawFrozen(id); err != nil {
		d.log.Warn("thaw before teardown", "sandbox", id, "err", err)
	} else if thawed {
		d.log.Debug("thawed a frozen sandbox before teardown", "sandbox", id)
	}
	if keepOOM && d.cg.oom(id) {
		if err := os.WriteFile(d.dir.oomMarker(id), nil, 0o600); err != nil {
			return err
		}
	}
	if st != nil {
		if d.runtime != RuntimeRunsc && st.Pid > 0 && st.Status != "stopped" {
			// runc's `delete --force` of a live container sleeps 100 ms
			// after its SIGKILL before it looks again; killing first and
			// watching the pid ourselves makes a stop take ~20 ms. (runsc
			// tears its sandbox down at once.)
			if _, err := d.rt.run(ctx, id, "kill", id, "KILL"); err == nil {
				waitExit(ctx, st.Pid, 2*time.Second)
			}
		}
		if _, err := d.rt.run(ctx, id, "delete", "--force", id); err != nil {
			// Kill every process and delete once more; it counts as
			// done when the runtime no longer knows the container.
			d.rt.run(ctx, id, "kill", "--all", id, "KILL")
			if _, err2 := d.rt.run(ctx, id, "delete", "--force", id); err2 != nil {
				// Still there only if the runtime can say so: a container
				// whose create was cut short it can neither describe nor
				// delete, and its files go below with its cgroups' tasks.
				if st2, serr := d.rt.state(ctx, id); serr == nil && st2 != nil {
					return fmt.Errorf("runtime delete: %w", err)
				}
			}
		}
	}
	if err := d.cg.remove(ctx, id); err != nil {
		return err
	}
	if err := d.rt.removeLeftovers(id); err != nil {
		return err
	}
	if d.runtime == RuntimeRunsc {
		// The shared directory's tmpfs, and with it whatever the
		// sandbox left there.
		return d.channels.unmount(id)
	}
	// No process of the sandbox is left: its id range is free again, and
	// its root's mount, if a start was cut short, goes too.
	if err := unmountAll(d.mounts.rootMount(id)); err != nil {
		return err
	}
	return d.ids.release(id)
}

// waitExit waits until process pid is gone or a zombie, ctx ends, or
// timeout passes.
func waitExit(ctx context.Context, pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for delay := 500 * time.Microsecond; processAlive(pid) && time.Now().Before(deadline) && ctx.Err() == nil; delay = min(2*delay, 20*time.Millisecond) {
		time.Sleep(delay)
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}
