package lifecycle

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Recover reconciles the store with what the runtime really runs, once at
// start-up: it adopts live sandboxes, marks vanished or dead ones stopped
// with the reason, finishes what a killed daemon left half done (undoing
// creates and checkpoints, completing restores), and removes runtime
// containers, roots and checkpoint snapshots that no row owns. It kills
// nothing that a row owns.
func (s *Service) Recover(ctx context.Context) error {
	rows, err := s.opts.Store.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return err
	}
	live, err := s.opts.Driver.Recover(ctx)
	if err != nil {
		return err
	}
	states := map[string]driver.State{}
	for _, st := range live {
		states[st.ID] = st
	}
	known := map[string]bool{}
	for _, sb := range rows {
		known[sb.ID] = true
		st, inRuntime := states[sb.ID]
		running := inRuntime && st.Status == driver.StatusRunning
		if sb.Status != sandbox.StatusCreating {
			sb = s.dropUnfinishedCheckpoints(ctx, sb)
		}
		restoring, isRestoring := strings.CutPrefix(sb.Reason, restoringTo)
		if g, err := s.opts.Store.GetGone(ctx, sb.Tenant, sb.Name); err == nil && g.ID == sb.ID {
			// destroy records why a sandbox goes before it releases it.
			s.log.Warn("finishing a destroy interrupted by a daemon stop", "sandbox", sb.Name, "id", sb.ID)
			if err := s.release(ctx, sb); err != nil {
				s.log.Error("finish interrupted destroy", "sandbox", sb.Name, "err", err)
			}
			continue
		}
		switch {
		case sb.Status == sandbox.StatusCreating:
			s.log.Warn("undoing a create interrupted by a daemon stop", "sandbox", sb.Name, "id", sb.ID)
			// Its creator got no answer: a get of the name says what
			// happened instead of a bare not_found. Recorded before the
			// release, as destroy does, so a second interruption finishes
			// the same way.
			s.recordGone(ctx, sb, interruptedCreate)
			if err := s.release(ctx, sb); err != nil {
				s.log.Error("undo interrupted create", "sandbox", sb.Name, "err", err)
			}
			continue
		case sb.Status == sandbox.StatusStopped && isRestoring:
			s.finishRestore(ctx, sb, restoring, running)
		case running:
			s.setStatus(ctx, sb, sandbox.StatusRunning, "adopted after daemon restart")
		case sb.Status == sandbox.StatusSleeping:
			// Asleep on purpose: nothing runs, and the next call wakes it.
		case inRuntime:
			s.setStatus(ctx, sb, sandbox.StatusStopped, stoppedReason(st))
		default:
			s.setStatus(ctx, sb, sandbox.StatusStopped, "vanished from the runtime (host restart?)")
		}
	}
	for _, st := range live {
		if !known[st.ID] {
			s.log.Warn("removing a runtime sandbox no row owns", "id", st.ID)
			if err := s.opts.Driver.Delete(ctx, st.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
				s.log.Error("remove orphan", "id", st.ID, "err", err)
			}
		}
	}
	return s.removeOrphanRoots(ctx, known)
}

// dropUnfinishedCheckpoints deletes the checkpoints of sb that a killed
// daemon recorded but never snapshotted (see Checkpoint), and returns sb as
// it now is.
func (s *Service) dropUnfinishedCheckpoints(ctx context.Context, sb sandbox.Sandbox) sandbox.Sandbox {
	cps, err := s.opts.Store.ListCheckpoints(ctx, sb.ID)
	if err != nil {
		s.log.Error("list checkpoints", "sandbox", sb.Name, "err", err)
		return sb
	}
	for _, c := range cps {
		if _, err := s.opts.Layers.Stat(ctx, checkpointKey(c.ID)); errors.Is(err, layers.ErrNotFound) {
			s.log.Warn("undoing a checkpoint interrupted by a daemon stop", "sandbox", sb.Name, "checkpoint", c.ID)
			sb = s.unrecord(ctx, sb, c)
		}
	}
	return sb
}

// finishRestore finishes the restore of sb to checkpoint id that a killed
// daemon left after it marked the row (see Restore): it resets the root to
// the checkpoint again, unless the sandbox runs (the restore had reached
// its start, after the reset), and records the checkpoint as the head.
func (s *Service) finishRestore(ctx context.Context, sb sandbox.Sandbox, id string, running bool) {
	s.log.Warn("finishing a restore interrupted by a daemon stop", "sandbox", sb.Name, "checkpoint", id)
	status := sandbox.StatusRunning
	if !running {
		status = sandbox.StatusStopped
		// A start the killed daemon began may have left a container
		// created on the root about to be replaced: remove it first.
		if err := s.opts.Driver.Stop(ctx, sb.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
			s.log.Error("finish interrupted restore: stop", "sandbox", sb.Name, "err", err)
		}
		if _, err := s.opts.Layers.Reset(ctx, rootKey(sb.ID), checkpointKey(id)); err != nil {
			s.log.Error("finish interrupted restore", "sandbox", sb.Name, "checkpoint", id, "err", err)
			return
		}
	}
	sb.Head = id
	s.setStatus(ctx, sb, status, "restored to checkpoint "+id+" after a daemon restart")
}

// removeOrphanRoots removes sandbox roots and checkpoint snapshots whose
// row is gone: what a destroy, a failed create's cleanup or a checkpoint
// delete had not removed yet when the daemon was killed (see release).
func (s *Service) removeOrphanRoots(ctx context.Context, known map[string]bool) error {
	walker, ok := s.opts.Layers.(interface {
		Walk(ctx context.Context, fn func(layers.Info) error) error
	})
	if !ok {
		return nil
	}
	checkpoints := map[string]bool{}
	for id := range known {
		cps, err := s.opts.Store.ListCheckpoints(ctx, id)
		if err != nil {
			return err
		}
		for _, c := range cps {
			checkpoints[c.ID] = true
		}
	}
	var orphans []string
	if err := walker.Walk(ctx, func(info layers.Info) error {
		if id, isRoot := strings.CutPrefix(info.Key, "sb-"); isRoot && info.Kind == layers.KindActive && !known[id] {
			orphans = append(orphans, info.Key)
		}
		// A checkpoint a killed daemon snapshotted but never recorded, or
		// whose row it deleted but not its snapshot.
		if id, isCk := isCheckpointKey(info.Key); isCk && info.Kind == layers.KindCommitted && !checkpoints[id] {
			orphans = append(orphans, info.Key)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, key := range orphans {
		s.log.Warn("removing a sandbox root no row owns", "key", key)
		if err := s.opts.Layers.Remove(ctx, key); err != nil {
			s.log.Error("remove orphan root", "key", key, "err", err)
		}
	}
	s.removeOrphanImages(ctx, checkpoints)
	return nil
}

// removeOrphanImages removes the memory images of checkpoints that are
// gone (a delete or a destroy a killed daemon had not finished), when the
// driver can list its images.
func (s *Service) removeOrphanImages(ctx context.Context, checkpoints map[string]bool) {
	lister, ok := s.memoryDriver().(interface {
		MemoryImages(ctx context.Context) ([]string, error)
	})
	if !ok {
		return
	}
	keys, err := lister.MemoryImages(ctx)
	if err != nil {
		s.log.Error("list memory images", "err", err)
		return
	}
	for _, key := range keys {
		if !checkpoints[key] {
			s.log.Warn("removing a memory image no checkpoint owns", "image", key)
			s.dropMemory(ctx, sandbox.Checkpoint{ID: key})
		}
	}
}

// setStatus records a status change when it is one.
func (s *Service) setStatus(ctx context.Context, sb sandbox.Sandbox, status sandbox.Status, reason string) {
	if sb.Status == status && sb.Reason == reason {
		return
	}
	sb.Status, sb.Reason, sb.UpdatedAt = status, reason, s.now().UTC()
	if err := s.opts.Store.UpdateSandbox(ctx, sb); err != nil {
		s.log.Error("update status", "sandbox", sb.Name, "err", err)
		return
	}
	s.log.Info("sandbox status", "sandbox", sb.Name, "status", status, "reason", reason)
}

// Run reaps expired sandboxes and notices dead ones every SweepInterval
// until ctx ends, and keeps the warm pool filled.
func (s *Service) Run(ctx context.Context) {
	go s.refiller(ctx)
	s.refillSoon()
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

// sweep destroys sandboxes past their expiry, marks running sandboxes
// whose runtime says otherwise as stopped, and tends the warm pool.
func (s *Service) sweep(ctx context.Context) {
	rows, err := s.opts.Store.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		s.log.Error("sweep: list", "err", err)
		return
	}
	now := s.now()
	if err := s.opts.Store.ForgetGone(ctx, "", "", now.Add(-s.opts.GoneRetention)); err != nil {
		s.log.Error("sweep: forget old records of destroyed sandboxes", "err", err)
	}
	var members []sandbox.Sandbox
	for _, sb := range rows {
		if isPoolMember(sb) {
			members = append(members, sb)
			continue
		}
		if !sb.ExpiresAt.IsZero() && !now.Before(sb.ExpiresAt) {
			s.log.Info("reaping expired sandbox", "sandbox", sb.Name, "expired_at", sb.ExpiresAt)
			if err := s.reap(ctx, sb.Tenant, sb.Name); err != nil {
				s.log.Error("reap", "sandbox", sb.Name, "err", err)
			}
			continue
		}
		if sb.Status != sandbox.StatusRunning {
			continue
		}
		st, err := s.opts.Driver.State(ctx, sb.ID)
		switch {
		case errors.Is(err, driver.ErrNotFound):
			s.markStopped(ctx, sb, "vanished from the runtime")
		case err == nil && st.Status != driver.StatusRunning:
			s.markStopped(ctx, sb, stoppedReason(st))
		case err == nil && s.reachable(ctx, sb):
			s.sleepIdle(ctx, sb)
		}
	}
	s.tendPool(ctx, members)
}

// unreachableReason is the status reason of a sandbox stopped because
// nothing listened for its agent.
const unreachableReason = "its agent could not be reached (nothing listened on its socket), so it was stopped; the next call starts it again"

// reachable reports whether running sandbox sb's agent can be connected
// to; one that cannot (driver.ErrUnreachable) is stopped on the spot, so
// that its status says so and the next call starts it again rather than
// fail. A dial that fails otherwise (a full backlog, a memory checkpoint
// taking longer than the probe) proves nothing and counts as reachable.
func (s *Service) reachable(ctx context.Context, sb sandbox.Sandbox) bool {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := s.opts.Driver.Dial(pctx, sb.ID)
	if err == nil {
		conn.Close()
		return true
	}
	if !errors.Is(err, driver.ErrUnreachable) {
		return true
	}
	s.stopUnreachable(ctx, sb, err)
	return false
}

// probeTimeout bounds the sweep's dial of one sandbox's agent.
const probeTimeout = time.Second

// stopUnreachable stops sb, whose runtime runs it but whose agent nothing
// reaches (cause), and records why, unless a concurrent call changed it
// since it was read. Its root and everything on it stay; the next call
// starts it again.
func (s *Service) stopUnreachable(ctx context.Context, sb sandbox.Sandbox, cause error) {
	s.ifUnchanged(ctx, sb, func(cur sandbox.Sandbox) {
		s.log.Warn("stopping a sandbox whose agent cannot be reached", "sandbox", cur.Name, "tenant", cur.Tenant, "id", cur.ID, "err", cause)
		if err := s.opts.Driver.Stop(ctx, cur.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
			s.log.Error("stop a sandbox whose agent cannot be reached", "sandbox", cur.Name, "err", err)
			return
		}
		s.setStatus(ctx, cur, sandbox.StatusStopped, unreachableReason)
	})
}

// markStopped records that a running sandbox died, unless a concurrent
// destroy or wake changed it since the sweep read it.
func (s *Service) markStopped(ctx context.Context, sb sandbox.Sandbox, reason string) {
	s.ifUnchanged(ctx, sb, func(cur sandbox.Sandbox) { s.setStatus(ctx, cur, sandbox.StatusStopped, reason) })
}

// ifUnchanged runs fn with sb's row, under its lock, if it still says
// running as it did when sb was read: a concurrent destroy, wake or
// update since then wins.
func (s *Service) ifUnchanged(ctx context.Context, sb sandbox.Sandbox, fn func(cur sandbox.Sandbox)) {
	cur, unlock, err := s.current(ctx, sb)
	if err != nil {
		return
	}
	defer unlock()
	if cur.Status == sandbox.StatusRunning && cur.UpdatedAt == sb.UpdatedAt {
		fn(cur)
	}
}

// stoppedReason says why the runtime reports a sandbox stopped.
func stoppedReason(st driver.State) string {
	if st.OOMKilled {
		return "oom"
	}
	return "exited"
}
