package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/internal/kernfile"
)

var _ driver.Freezer = (*Driver)(nil)

// freezeTimeout bounds Freeze when its context has no deadline: a cgroup
// that is still freezing by then is thawed again rather than left half
// frozen.
const freezeTimeout = 5 * time.Second

// Cgroup freezer states (v1 freezer.state; see the kernel's
// Documentation/admin-guide/cgroup-v1/freezer-subsystem.rst).
const (
	v1Frozen   = "FROZEN"
	v1Freezing = "FREEZING"
	v1Thawed   = "THAWED"
)

// Freeze freezes every process of sandbox id. Under runc and crun it writes
// the sandbox's cgroup directly, not through the runtime (`runc pause`
// costs ≈110 ms; this costs 1–2): on a host with a v1 freezer hierarchy (v1
// and hybrid hosts) it writes FROZEN to the freezer.state of
// <freezer>/<CgroupParent>/<id> and reads it back until it says FROZEN
// (FREEZING may last a while: the write is repeated, as runc does, for
// tasks that appeared meanwhile); on a cgroup v2 host it writes 1 to
// cgroup.freeze and waits until cgroup.events says "frozen 1". Under runsc
// it is gVisor's own pause (see freezer.pause).
//
// It is bounded by ctx, or by 5 seconds when ctx has no deadline; when the
// cgroup has not frozen by then, Freeze thaws it again and fails. It
// returns driver.ErrNotFound for an unknown id and an error saying so for a
// stopped sandbox. Freezing a frozen sandbox returns at once.
//
// While it is frozen, State reports the sandbox running without asking the
// runtime (see runner.state); Stop and Delete thaw it before they kill it,
// and Recover thaws it when a daemon died with it frozen.
func (d *Driver) Freeze(ctx context.Context, id string) error {
	if validID(id) != nil {
		return driver.ErrNotFound
	}
	defer d.locks.lock(id)()
	return d.freezer.freeze(ctx, id)
}

// Thaw lets every process of sandbox id run again: it writes THAWED to the
// v1 freezer.state, or 0 to the v2 cgroup.freeze, of whichever of the
// sandbox's cgroups is frozen (both kinds are checked on a hybrid host, so a
// sandbox frozen by other means is thawed too). Thawing a running sandbox
// does nothing. It returns driver.ErrNotFound for an unknown id and an
// error saying so for a stopped sandbox.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	if validID(id) != nil {
		return driver.ErrNotFound
	}
	defer d.locks.lock(id)()
	return d.freezer.thaw(id)
}

// freezer freezes and thaws sandboxes: under runc and crun through their
// cgroup's freezer, under runsc with gVisor's own pause (pause, resume),
// whose marker (stateDir.pausedMarker) says the sandbox is paused. The
// caller holds the sandbox's lock.
type freezer struct {
	runtime string
	dir     stateDir
	cg      *cgroups
	rt      *runner
	log     *slog.Logger
}

// freeze is Freeze, under id's lock.
func (f *freezer) freeze(ctx context.Context, id string) error {
	dir, v2, err := f.live(id)
	if err != nil {
		return fmt.Errorf("oci: freeze %s: %w", id, err)
	}
	if f.runtime == RuntimeRunsc {
		return f.pause(ctx, id, dir)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, freezeTimeout)
		defer cancel()
	}
	began := time.Now()
	if v2 {
		err = freezeV2(ctx, dir)
	} else {
		err = freezeV1(ctx, dir)
	}
	if err != nil {
		return fmt.Errorf("oci: freeze %s: %w", id, err)
	}
	// A container that died on its own leaves its cgroup, empty, until it
	// is deleted: freezing that froze nothing.
	if !hasTasks(dir) {
		thaw(dir, v2)
		return fmt.Errorf("oci: freeze %s: sandbox is stopped (its cgroup has no process)", id)
	}
	f.log.Debug("sandbox frozen", "sandbox", id, "took", time.Since(began).Round(time.Microsecond))
	return nil
}

// thaw is Thaw, under id's lock.
func (f *freezer) thaw(id string) error {
	dir, _, err := f.live(id)
	if err != nil {
		return fmt.Errorf("oci: thaw %s: %w", id, err)
	}
	if _, err := f.thawFrozen(id); err != nil {
		return fmt.Errorf("oci: thaw %s: %w", id, err)
	}
	if !hasTasks(dir) {
		return fmt.Errorf("oci: thaw %s: sandbox is stopped (its cgroup has no process)", id)
	}
	return nil
}

// live returns the cgroup that freezes sandbox id, and whether it is a v2
// one, after checking that the sandbox is known (driver.ErrNotFound) and
// not stopped.
func (f *freezer) live(id string) (dir string, v2 bool, err error) {
	ok, err := f.dir.known(id)
	if err != nil {
		return "", false, err
	}
	if !ok {
		return "", false, driver.ErrNotFound
	}
	if f.dir.stopped(id) {
		return "", false, errors.New("sandbox is stopped")
	}
	dir, v2 = f.cg.freezer(id)
	if dir == "" {
		return "", false, errors.New("the host has no cgroup freezer (neither a v1 freezer hierarchy nor cgroup v2)")
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return "", false, errors.New("sandbox is stopped (it has no cgroup)")
	} else if err != nil {
		return "", false, err
	}
	return dir, v2, nil
}

// freezer returns the cgroup directory whose freezer freezes sandbox
// id, and whether it is a v2 one: in the v1 freezer hierarchy when the host
// mounts one, because on a hybrid host runsc does not use the unified
// hierarchy at all (runc uses both, and either freezes it); else in the
// unified hierarchy. It returns "" when the host has neither.
func (c *cgroups) freezer(id string) (dir string, v2 bool) {
	switch {
	case c.mounts.freezer != "":
		return filepath.Join(c.mounts.freezer, c.rel(id)), false
	case c.mounts.v2 != "":
		return filepath.Join(c.mounts.v2, c.rel(id)), true
	}
	return "", false
}

// thawFrozen thaws sandbox id if runsc has it paused (see pause) or any of
// its cgroups is frozen (see cgroups.thaw), and reports whether it was
// either.
func (f *freezer) thawFrozen(id string) (bool, error) {
	var paused bool
	var errs []error
	if exists(f.dir.pausedMarker(id)) {
		paused = true
		errs = append(errs, f.resume(id))
	}
	frozen, err := f.cg.thaw(id)
	return paused || frozen, errors.Join(append(errs, err)...)
}

// thaw thaws sandbox id's cgroups, v1 freezer and v2, that are frozen or
// freezing, and reports whether there was one. Cgroups that do not exist
// are skipped.
func (c *cgroups) thaw(id string) (bool, error) {
	var thawed bool
	var errs []error
	if c.mounts.freezer != "" {
		dir := filepath.Join(c.mounts.freezer, c.rel(id))
		if st, err := readTrimmed(filepath.Join(dir, "freezer.state")); err == nil && st != v1Thawed {
			thawed = true
			errs = append(errs, thaw(dir, false))
		}
	}
	if c.mounts.v2 != "" {
		dir := filepath.Join(c.mounts.v2, c.rel(id))
		if st, err := readTrimmed(filepath.Join(dir, "cgroup.freeze")); err == nil && st != "0" {
			thawed = true
			errs = append(errs, thaw(dir, true))
		}
	}
	return thawed, errors.Join(errs...)
}

// freezeV1 freezes the v1 freezer cgroup dir. Reading freezer.state is what
// makes the kernel notice that the last task froze, so it is polled, from
// 50µs apart up to 1ms; FROZEN is written again each time, because a v1
// cgroup can stay FREEZING when tasks appear in it while it freezes (runc
// does the same). When ctx ends first, dir is thawed again.
func freezeV1(ctx context.Context, dir string) error {
	state := filepath.Join(dir, "freezer.state")
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		if err := os.WriteFile(state, []byte(v1Frozen), 0); err != nil {
			thaw(dir, false)
			return err
		}
		st, err := readTrimmed(state)
		if err != nil {
			thaw(dir, false)
			return err
		}
		switch st {
		case v1Frozen:
			return nil
		case v1Freezing:
		default:
			thaw(dir, false)
			return fmt.Errorf("%s: %q while freezing", state, st)
		}
		if err := sleep(ctx, delay); err != nil {
			if terr := thaw(dir, false); terr != nil {
				return fmt.Errorf("still %s when %w, and thawing it again failed: %v", v1Freezing, err, terr)
			}
			return fmt.Errorf("still %s when %w; thawed it again", v1Freezing, err)
		}
	}
}

// freezeV2 freezes the v2 cgroup dir: it writes 1 to cgroup.freeze and
// polls cgroup.events until it says "frozen 1", from 50µs apart up to 1ms.
// When ctx ends first, dir is thawed again.
func freezeV2(ctx context.Context, dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		thaw(dir, true)
		return err
	}
	events := filepath.Join(dir, "cgroup.events")
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		n, ok := readKeyed(events, "frozen")
		if !ok {
			thaw(dir, true)
			return fmt.Errorf("%s: no frozen key", events)
		}
		if n == 1 {
			return nil
		}
		if err := sleep(ctx, delay); err != nil {
			if terr := thaw(dir, true); terr != nil {
				return fmt.Errorf("not frozen when %w, and thawing it again failed: %v", err, terr)
			}
			return fmt.Errorf("not frozen when %w; thawed it again", err)
		}
	}
}

// thaw thaws the cgroup dir, v1 freezer or v2. Both take effect at once:
// the kernel wakes every task before the write returns.
func thaw(dir string, v2 bool) error {
	if v2 {
		return os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
	}
	return os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(v1Thawed), 0)
}

// hasTasks reports whether the cgroup dir or one below it has a process.
func hasTasks(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return nil
		}
		if procs, err := readTrimmed(filepath.Join(path, "cgroup.procs")); err == nil && procs != "" {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// readTrimmed returns the content of a small file of the kernel's or the
// driver's own (a cgroup knob, a pid file) without surrounding white space:
// the driver's one reader of such files (through package kernfile).
func readTrimmed(path string) (string, error) {
	b, err := kernfile.Read(path)
	return strings.TrimSpace(string(b)), err
}

// sleep waits for d, or returns ctx's error when it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// thawLeft thaws sandbox id if it is frozen, for Recover, logging what
// it did.
func (f *freezer) thawLeft(id string) {
	thawed, err := f.thawFrozen(id)
	switch {
	case err != nil:
		f.log.Error("thaw a sandbox left frozen", "sandbox", id, "err", err)
	case thawed:
		f.log.Warn("thawed a sandbox left frozen (the daemon died between Freeze and Thaw?)", "sandbox", id)
	}
}

// frozenState returns the state runner.state reports for sandbox id while
// it is frozen or freezing, without asking the runtime, or nil when it is
// not (or when its cgroup has no process left to be frozen: then the
// runtime can answer).
func (c *cgroups) frozenState(id string) *specs.State {
	dir, v2 := c.freezer(id)
	if dir == "" {
		return nil
	}
	if v2 {
		if st, err := readTrimmed(filepath.Join(dir, "cgroup.freeze")); err != nil || st != "1" {
			return nil
		}
	} else if st, err := readTrimmed(filepath.Join(dir, "freezer.state")); err != nil || st == v1Thawed {
		return nil
	}
	if !hasTasks(dir) {
		return nil
	}
	st := &specs.State{Version: specs.Version, ID: id, Status: "paused"}
	if pid, err := c.dir.pid(id); err == nil {
		st.Pid = pid
	}
	return st
}

// pause is Freeze under runsc: gVisor's own pause (`runsc pause`),
// which stops every task inside the sentry at a safe point. The cgroup
// freezer is not safe there: freezing a systrap stub that waits in a
// seccomp user notification aborts the notification, and the sentry then
// finds the stub dead and kills the sandbox (seen after some twenty
// freezes). The pause costs ≈14 ms and the resume as much, against ≈1 ms
// for a cgroup freeze, so Capabilities says the freeze is not cheap. A
// marker file says the sandbox is paused, for a Thaw, a teardown or the
// next daemon's Recover.
func (f *freezer) pause(ctx context.Context, id, dir string) error {
	if !hasTasks(dir) {
		return fmt.Errorf("oci: freeze %s: sandbox is stopped (its cgroup has no process)", id)
	}
	if _, err := os.Stat(f.dir.pausedMarker(id)); err == nil {
		return nil // paused already
	}
	if err := os.WriteFile(f.dir.pausedMarker(id), nil, 0o600); err != nil {
		return fmt.Errorf("oci: freeze %s: %w", id, err)
	}
	if _, err := f.rt.run(ctx, id, "pause", id); err != nil {
		if rerr := f.resume(id); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("oci: freeze %s: %w", id, err)
	}
	return nil
}

// ended drops the marker of a sandbox pause paused and that is to be
// torn down as it lies, never resumed (see CheckpointMemory's Stop).
func (f *freezer) ended(id string) error {
	if err := os.Remove(f.dir.pausedMarker(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// resume resumes a sandbox pause paused and drops its marker. A
// sandbox that is not paused (the pause failed, or a resume already ran)
// is left as it is.
func (f *freezer) resume(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), freezeTimeout)
	defer cancel()
	if st, err := f.rt.state(ctx, id); err == nil && st != nil && st.Status == "paused" {
		if _, err := f.rt.run(ctx, id, "resume", id); err != nil {
			return err
		}
	}
	return os.Remove(f.dir.pausedMarker(id))
}
