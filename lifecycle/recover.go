package lifecycle

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/hearth/hearth/node"
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
	inv, err := s.opts.Node.Recover(ctx)
	if err != nil {
		return err
	}
	live := inv.Sandboxes
	states := map[string]node.State{}
	for _, st := range live {
		states[st.ID] = st
	}
	// What the rows own, as they stand before the loop: what a release
	// below removes is owned (and gone by the end), not an orphan.
	owned, err := s.ownedCheckpoints(ctx, rows)
	if err != nil {
		return err
	}
	snapped := setOf(inv.Checkpoints)
	known := map[string]bool{}
	for _, sb := range rows {
		known[sb.ID] = true // another node's too: never an orphan here
	}
	mine, leftovers := s.adopt(ctx, rows, states, setOf(inv.Roots))
	s.removeLeftovers(ctx, leftovers, snapped)
	for _, sb := range mine {
		s.reconcileOne(ctx, sb, states, snapped, owned, inv.Listed)
	}
	for _, st := range live {
		if !known[st.ID] {
			s.log.Warn("removing a runtime sandbox no row owns", "id", st.ID)
			if err := s.opts.Node.Delete(ctx, st.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
				s.log.Error("remove orphan", "id", st.ID, "err", err)
			}
		}
	}
	s.removeOrphans(ctx, inv, known, owned)
	if inv.Listed {
		// What a killed pull, import or build left, and the layers of
		// images removed before a crash.
		s.images.collect(ctx, inv.ImageKeys)
	}
	return nil
}

// reconcileOne brings sb, a row this node reconciles (see adopt), in line
// with what the node holds (states, its runtime's; snapped, its
// checkpoint snapshots, listed when it could list them; owned, the rows'
// checkpoints): a destroy or create a stop cut short is finished or
// undone, a restore finished, and the row's status set from the runtime.
func (s *sweeper) reconcileOne(ctx context.Context, sb sandbox.Sandbox, states map[string]node.State, snapped, owned map[string]bool, listed bool) {
	st, inRuntime := states[sb.ID]
	running := inRuntime && st.Status == node.StatusRunning
	if sb.Status != sandbox.StatusCreating && listed {
		sb = s.dropUnfinishedCheckpoints(ctx, sb, snapped, owned)
	}
	restoring, isRestoring := strings.CutPrefix(sb.Reason, restoringTo)
	if g, err := s.opts.Store.Gone().Get(ctx, sb.Tenant, sb.Name); err == nil && g.ID == sb.ID {
		// destroy records why a sandbox goes before it releases it.
		s.log.Warn("finishing a destroy interrupted by a daemon stop", "sandbox", sb.Name, "id", sb.ID)
		if err := s.run.release(ctx, sb); err != nil {
			s.log.Error("finish interrupted destroy", "sandbox", sb.Name, "err", err)
		}
		return
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
	case sb.Status == sandbox.StatusStopped && isRestoring:
		s.finishRestore(ctx, sb, restoring, running)
	case running && sb.Status == sandbox.StatusSleeping && sb.Head != "" && sb.Reason == asleepSince+sb.Head:
		// A checkpoint that was to leave it asleep was taken (its
		// snapshot is whole): the sleep is finished.
		s.finishSleep(ctx, sb)
	case running:
		s.setStatus(ctx, sb, sandbox.StatusRunning, "adopted after daemon restart")
	case sb.Status == sandbox.StatusSleeping && strings.HasPrefix(sb.Reason, movingTo("")):
		// Its move was cut short before the row switched: it is
		// here, whole, asleep.
		s.setStatus(ctx, sb, sandbox.StatusSleeping, "asleep: its move was cut short by a daemon stop")
	case sb.Status == sandbox.StatusSleeping:
		// Asleep on purpose: nothing runs, and the next call wakes it.
	case inRuntime:
		s.setStatus(ctx, sb, sandbox.StatusStopped, stoppedReason(st))
	default:
		s.setStatus(ctx, sb, sandbox.StatusStopped, "vanished from the runtime (host restart?)")
	}
}

// finishSleep stops sb, whose row says it sleeps since its head
// checkpoint though it still runs; one that will not stop is adopted as
// running.
func (s *sweeper) finishSleep(ctx context.Context, sb sandbox.Sandbox) {
	if err := s.opts.Node.Stop(ctx, sb.ID); err != nil {
		s.log.Error("finish a sleep a daemon stop cut short", "sandbox", sb.Name, "err", err)
		s.setStatus(ctx, sb, sandbox.StatusRunning, "adopted after daemon restart")
		return
	}
	s.log.Warn("finished a checkpoint's sleep interrupted by a daemon stop", "sandbox", sb.Name, "checkpoint", sb.Head)
}

// adopt returns the rows this node reconciles: its own, and those its
// runtime or layer store holds though the row names another node or none
// (a row from before nodes, or this node under a former name), which it
// makes its own. A row of no node that nothing here holds is adopted too:
// before nodes, a store had one daemon. The other nodes' rows are theirs
// to reconcile; those of them this node holds something of are returned
// as leftovers: this node moved it there and stopped after the row
// switched, or received it from there in a move that failed, and the
// row's node has the sandbox whole. What this node holds of a sandbox
// whose row says it is moving here is kept as it is: that move may still
// be under way, and its node, not this one, ends it.
func (s *sweeper) adopt(ctx context.Context, rows []sandbox.Sandbox, states map[string]node.State, roots map[string]bool) (mine, leftovers []sandbox.Sandbox) {
	others := map[string]bool{} // node → another data dir's
	for _, sb := range rows {
		_, held := states[sb.ID]
		held = held || roots[sb.ID]
		switch {
		case s.mine(sb):
		case held && sb.Node != "" && s.movingHere(sb):
			continue
		case held && s.another(ctx, sb.Node, others):
			leftovers = append(leftovers, sb)
			continue
		case held || sb.Node == "":
			s.log.Info("adopting a sandbox", "sandbox", sb.Name, "id", sb.ID, "node_was", sb.Node, "node", s.opts.NodeName)
			sb.Node = s.opts.NodeName
			if err := s.opts.Store.Sandboxes().Update(ctx, sb); err != nil {
				s.log.Error("adopt sandbox", "sandbox", sb.Name, "err", err)
				continue
			}
		default:
			continue
		}
		mine = append(mine, sb)
	}
	return mine, leftovers
}

// another reports whether node is another daemon's, as the store's node
// rows say: known, from a data dir other than this one's. A node the
// store does not know, or that this data dir ran under a former name, is
// not; nor is any without Options.Instance. seen caches the answers.
func (s *sweeper) another(ctx context.Context, node string, seen map[string]bool) bool {
	if node == "" || s.opts.Instance == "" {
		return false
	}
	if v, ok := seen[node]; ok {
		return v
	}
	n, err := s.opts.Store.Nodes().Get(ctx, node)
	seen[node] = err == nil && n.Instance != s.opts.Instance
	return seen[node]
}

// removeLeftovers removes what this node holds of the leftovers, other
// nodes' sandboxes (see adopt): their runtime objects, roots and the
// checkpoint snapshots of theirs that are here (snapped).
func (s *sweeper) removeLeftovers(ctx context.Context, leftovers []sandbox.Sandbox, snapped map[string]bool) {
	for _, sb := range leftovers {
		s.log.Warn("removing the copy of a sandbox that moved to or stayed on another node", "sandbox", sb.Name, "id", sb.ID, "node", sb.Node)
		cks, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
		if err != nil {
			s.log.Error("list a moved sandbox's checkpoints", "id", sb.ID, "err", err)
		}
		s.dropCopy(ctx, sb.ID, slices.DeleteFunc(cks, func(ck sandbox.Checkpoint) bool { return !snapped[ck.ID] }))
	}
}

// ownedCheckpoints returns the ids of the checkpoints that rows' sandboxes
// have.
func (s *sweeper) ownedCheckpoints(ctx context.Context, rows []sandbox.Sandbox) (map[string]bool, error) {
	owned := map[string]bool{}
	for _, sb := range rows {
		cps, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		for _, c := range cps {
			owned[c.ID] = true
		}
	}
	return owned, nil
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// dropUnfinishedCheckpoints deletes the checkpoints of sb that a killed
// daemon recorded but never snapshotted (see Checkpoints.Checkpoint): those
// not in snapped, the node's, which it takes out of owned too (a memory
// image the killed daemon began for one is an orphan). It returns sb as it
// now is.
func (s *sweeper) dropUnfinishedCheckpoints(ctx context.Context, sb sandbox.Sandbox, snapped, owned map[string]bool) sandbox.Sandbox {
	cps, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
	if err != nil {
		s.log.Error("list checkpoints", "sandbox", sb.Name, "err", err)
		return sb
	}
	for _, c := range cps {
		if !snapped[c.ID] {
			delete(owned, c.ID)
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
		if err := s.opts.Node.Stop(ctx, sb.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
			s.log.Error("finish interrupted restore: stop", "sandbox", sb.Name, "err", err)
		}
		if err := s.opts.Node.Rollback(ctx, sb.ID, id); err != nil {
			s.log.Error("finish interrupted restore", "sandbox", sb.Name, "checkpoint", id, "err", err)
			return
		}
	}
	sb.Head = id
	s.setStatus(ctx, sb, status, "restored to checkpoint "+id+" after a daemon restart")
}

// removeOrphans removes what the node holds and no row owns (inv, as the
// node reported it; known the sandboxes with rows, owned their
// checkpoints): sandbox roots and checkpoint snapshots that a destroy, a
// failed create's cleanup or a checkpoint delete had not removed yet when
// the daemon was killed (see release), a checkpoint a killed daemon
// snapshotted but never recorded, and memory images of checkpoints that
// are gone. A node that could not list its snapshots has none removed.
func (s *sweeper) removeOrphans(ctx context.Context, inv node.Inventory, known, owned map[string]bool) {
	for _, id := range inv.Roots {
		if !known[id] {
			s.log.Warn("removing a sandbox root no row owns", "id", id)
			if err := s.opts.Node.RemoveRoot(ctx, id); err != nil {
				s.log.Error("remove orphan root", "id", id, "err", err)
			}
		}
	}
	for _, id := range inv.Checkpoints {
		if !owned[id] {
			s.log.Warn("removing a checkpoint no row owns", "checkpoint", id)
			s.run.dropCheckpoint(ctx, id)
		}
	}
	for _, id := range inv.MemoryImages {
		if !owned[id] {
			s.log.Warn("removing a memory image no checkpoint owns", "image", id)
			s.run.dropCheckpoint(ctx, id)
		}
	}
}
