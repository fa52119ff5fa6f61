package lifecycle

import (
	"context"
	"errors"
	"strings"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// interruptedCreate is why a sandbox whose create a killed daemon left
// half done is gone.
const interruptedCreate = "its create was interrupted by a daemon restart, and nothing of it was kept"

// reconcile is Service.Recover.
func (s *sweeper) reconcile(ctx context.Context) error {
	rows, err := s.opts.Store.Sandboxes().List(ctx, store.Filter{})
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
		if g, err := s.opts.Store.Gone().Get(ctx, sb.Tenant, sb.Name); err == nil && g.ID == sb.ID {
			// destroy records why a sandbox goes before it releases it.
			s.log.Warn("finishing a destroy interrupted by a daemon stop", "sandbox", sb.Name, "id", sb.ID)
			if err := s.run.release(ctx, sb); err != nil {
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
			s.run.recordGone(ctx, sb, interruptedCreate)
			if err := s.run.release(ctx, sb); err != nil {
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
// daemon recorded but never snapshotted (see Checkpoints.Checkpoint), and returns sb as
// it now is.
func (s *sweeper) dropUnfinishedCheckpoints(ctx context.Context, sb sandbox.Sandbox) sandbox.Sandbox {
	cps, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
	if err != nil {
		s.log.Error("list checkpoints", "sandbox", sb.Name, "err", err)
		return sb
	}
	for _, c := range cps {
		if _, err := s.opts.Layers.Stat(ctx, checkpointKey(c.ID)); errors.Is(err, layers.ErrNotFound) {
			s.log.Warn("undoing a checkpoint interrupted by a daemon stop", "sandbox", sb.Name, "checkpoint", c.ID)
			sb = s.checkpoints.unrecord(ctx, sb, c)
		}
	}
	return sb
}

// finishRestore finishes the restore of sb to checkpoint id that a killed
// daemon left after it marked the row (see Restore): it resets the root to
// the checkpoint again, unless the sandbox runs (the restore had reached
// its start, after the reset), and records the checkpoint as the head.
func (s *sweeper) finishRestore(ctx context.Context, sb sandbox.Sandbox, id string, running bool) {
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
func (s *sweeper) removeOrphanRoots(ctx context.Context, known map[string]bool) error {
	walker, ok := s.opts.Layers.(interface {
		Walk(ctx context.Context, fn func(layers.Info) error) error
	})
	if !ok {
		return nil
	}
	checkpoints := map[string]bool{}
	for id := range known {
		cps, err := s.opts.Store.Checkpoints().List(ctx, id)
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
func (s *sweeper) removeOrphanImages(ctx context.Context, checkpoints map[string]bool) {
	lister, ok := s.run.memoryDriver().(interface {
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
			s.run.dropMemory(ctx, sandbox.Checkpoint{ID: key})
		}
	}
}
