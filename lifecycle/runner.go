package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// runner is the runtime side of sandboxes that every noun service shares:
// it starts, wakes, dials, stops and releases a sandbox on the node, and
// records in its row what it did. Its methods take a sandbox already
// found through access; the callers hold or take its
// name's lock as each method says.
type runner struct {
	*core
	egress *egress
	room   *roomMaker // makes room when a start is refused for memory
}

// start starts sb on its root, preparing the root from its image (capped
// at its disk size) if it has none yet.
func (s *runner) start(ctx context.Context, sb sandbox.Sandbox) error {
	return s.startSpec(ctx, sb, imageSource(sb), "")
}

// imageSource is where sb's root comes from when it has none: the layer
// key of its image's version (its image's name, for a sandbox from before
// image versions, when the name was the key).
func imageSource(sb sandbox.Sandbox) node.Source {
	return node.Source{Image: cmp.Or(sb.ImageKey, sb.Image)}
}

// startFrom starts sb from the memory image of checkpoint ck when ck is
// not "" (see node.Spec.Memory: its processes resume), afresh on its root
// otherwise.
func (s *runner) startFrom(ctx context.Context, sb sandbox.Sandbox, ck string) error {
	return s.startSpec(ctx, sb, imageSource(sb), ck)
}

// startSpec starts sb on the node: its root from root if it has none
// yet, from checkpoint memory's image when memory is not "". A root the
// node could not prepare is internal; a start that failed, or that the
// host had no room for (node.HostLimitError, with the numbers), is
// unavailable; one refused for memory also has idle sandboxes put to
// sleep to make room for a retry (see roomMaker).
// The caller holds a slot of the heavy queue (see core.slot).
func (s *runner) startSpec(ctx context.Context, sb sandbox.Sandbox, root node.Source, memory string) error {
	spec := node.Spec{ID: sb.ID, Root: root, Resources: sb.Resources, Network: sb.Network, Memory: memory, Config: sb.ImageConfig}
	if sb.Network == sandbox.NetworkEgress {
		var err error
		if spec.Egress, err = s.egress.rules(ctx, sb); err != nil {
			return err
		}
	}
	err := s.opts.Node.Start(ctx, spec)
	if errors.Is(err, node.ErrRoot) {
		return s.internal("prepare root", err)
	}
	if hl := (*node.HostLimitError)(nil); errors.As(err, &hl) {
		s.log.Warn("sandbox start refused: the host is at a limit", "sandbox", sb.Name, "err", err)
		hint := "destroy or sleep sandboxes to free the host, or retry once others have; an operator can raise the host's limit (sysctl kernel.pid_max)"
		if hl.What == node.LimitMemory {
			s.room.kick(ctx, sb.Tenant)
			hint = "retry in a moment: sandboxes idle for a minute or more are being put to sleep to make room (none may be); or destroy or sleep sandboxes to free the host. An operator can add memory, or lower hearth serve --memory-reserve"
		}
		return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q cannot start: the host has %d %s free of %d, and a sandbox needs %d", sb.Name, hl.Free, hl.What, hl.Limit, hl.Need).
			With("resource", hl.What).With("free", hl.Free).With("needed", hl.Need).With("limit", hl.Limit).
			WithHint("%s", hint)
	}
	if err != nil {
		s.log.Error("sandbox start failed", "sandbox", sb.Name, "id", sb.ID, "memory", memory, "err", err)
		return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q failed to start", sb.Name).
			WithHint("retry; if it keeps failing, `hearth serve`'s log has the runtime's error")
	}
	return nil
}

// release removes everything a sandbox holds: runtime, row (its
// checkpoints' rows with it), root and checkpoint snapshots, in that order.
// Each step tolerates what is already gone. A creating row that another
// node took over meanwhile is left to it, with its Pod and checkpoints
// (see deleteRow and keepTakenOver): the result is then a takenOver error.
//
// The runtime goes first, and the row outlives it: a sandbox whose runtime
// would not go away is still listed, so a retry (or Recover) finishes the
// job, and a daemon killed right after leaves a stopped sandbox with all
// its content. The row goes before the disk: from then on the disk is
// garbage no row owns, which Recover removes if the daemon is killed (or a
// removal fails) before this does. With the disk first, a killed daemon
// left a row whose root was gone, which the next call woke on a fresh
// image.
func (s *runner) release(ctx context.Context, sb sandbox.Sandbox) error {
	if err := s.opts.Node.Delete(ctx, sb.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
		return fmt.Errorf("node delete: %w", err)
	}
	s.crash("release: runtime deleted")
	cps, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
	if err != nil {
		return fmt.Errorf("list checkpoints: %w", err)
	}
	if err := s.deleteRow(ctx, sb); err != nil {
		var taken takenOver
		if errors.As(err, &taken) {
			s.keepTakenOver(ctx, taken.row)
			return err
		}
		return fmt.Errorf("delete row: %w", err)
	}
	s.leases.forget(sb.ID)
	s.crash("release: row deleted")
	s.unplace(ctx, sb)
	if err := s.opts.Node.RemoveRoot(ctx, sb.ID); err != nil {
		s.log.Error("remove a released sandbox's root; the next start removes it", "sandbox", sb.Name, "err", err)
	}
	s.crash("release: snapshot removed")
	for _, c := range cps {
		s.dropCheckpoint(ctx, c.ID)
		s.crash("release: snapshot removed")
	}
	return nil
}

// deleteRow deletes sb's row, if it is there. A row read creating goes
// only while it is as read (Sandboxes.DeleteIf): one that another node
// has taken over since (StartPlaced: a control plane's create, or a fork
// sent there, whose placement this daemon gave up on) is that node's
// sandbox now, and the result is a takenOver error holding its row.
func (s *runner) deleteRow(ctx context.Context, sb sandbox.Sandbox) error {
	if sb.Status == sandbox.StatusCreating {
		gone, err := s.opts.Store.Sandboxes().DeleteIf(ctx, sb)
		if err != nil || gone {
			return err
		}
		cur, err := s.opts.Store.Sandboxes().ByID(ctx, sb.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case err != nil:
			return err
		case cur.Node != sb.Node:
			return takenOver{cur}
		}
	}
	if err := s.opts.Store.Sandboxes().Delete(ctx, sb.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// takenOver is release's error for a creating row another node took over
// before the release could remove it: row is the row as it is now.
type takenOver struct{ row sandbox.Sandbox }

func (e takenOver) Error() string {
	return fmt.Sprintf("sandbox %s was taken over by node %s before its create could be undone", e.row.ID, e.row.Node)
}

// keepTakenOver leaves row, which another node took over while this
// daemon released it, to that node: its Pod and checkpoints are that
// node's, and a record of why it went (an undone create records one
// first) would have its node destroy it at its next start. What this
// node held of it locally (a fork's root it sent) goes.
func (s *runner) keepTakenOver(ctx context.Context, row sandbox.Sandbox) {
	s.log.Warn("a create this daemon gave up on runs on the node that took it over", "sandbox", row.Name, "id", row.ID, "node", row.Node)
	s.forgetGone(ctx, row)
	if err := s.opts.Node.RemoveRoot(ctx, row.ID); err != nil {
		s.log.Error("remove the root of a sandbox another node took over", "sandbox", row.Name, "err", err)
	}
}

// undoCreate releases sb, the new row of a create that failed, trying
// again for a few seconds when the store or the node fails (a store
// restarting): a row left creating would count against its tenant and
// answer a retry of the create until the sweep removed it (see
// sweeper.staleCreates). The caller holds sb's lock. When another node
// took the row over first (see deleteRow), nothing of it is undone, and
// the result is its row and true.
func (s *runner) undoCreate(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, bool) {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := s.release(ctx, sb)
		var taken takenOver
		if err == nil {
			return sandbox.Sandbox{}, false
		}
		if errors.As(err, &taken) {
			return taken.row, true
		}
		if attempt == undoAttempts || ctx.Err() != nil {
			s.log.Error("undo a failed create: its row stays creating until the sweep removes it", "sandbox", sb.Name, "id", sb.ID, "err", err)
			return sandbox.Sandbox{}, false
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// undoAttempts is how often undoCreate tries: about 7 s in all.
const undoAttempts = 8

// destroy releases sb, having first recorded why it goes (see Gone): the
// record is written before the release so that a sandbox a killed daemon
// half released still says why. The caller holds sb's lock.
func (s *runner) destroy(ctx context.Context, sb sandbox.Sandbox, reason string) error {
	ctx, cancel := detached(ctx)
	defer cancel()
	s.crash("destroy: begun")
	s.recordGone(ctx, sb, reason)
	// The commit point: a restart finishes a destroy whose record is there
	// (see Service.Recover).
	s.crash("destroy: reason recorded")
	if err := s.release(ctx, sb); err != nil {
		return s.internal("destroy "+sb.ID, err)
	}
	s.log.Info("sandbox destroyed", "sandbox", sb.Name, "id", sb.ID, "reason", reason)
	return nil
}

// recordGone records why sb goes, for a get of its name (see Gone); a
// failure is logged, and only costs that answer.
func (s *runner) recordGone(ctx context.Context, sb sandbox.Sandbox, reason string) {
	gone := sandbox.Gone{Name: sb.Name, ID: sb.ID, Tenant: sb.Tenant, Owner: sb.Owner, Reason: reason, Last: sb.Reason, At: s.now().UTC()}
	if err := s.opts.Store.Gone().Record(ctx, gone); err != nil {
		s.log.Error("record why a sandbox goes", "sandbox", sb.Name, "err", err)
	}
}

// forgetGone drops the record of why an earlier sandbox of sb's name in
// its tenant went: the name is sb's now.
func (s *runner) forgetGone(ctx context.Context, sb sandbox.Sandbox) {
	if _, err := s.opts.Store.Gone().Get(ctx, sb.Tenant, sb.Name); errors.Is(err, store.ErrNotFound) {
		return // the common case, and a read: no write (and fsync) for it
	}
	if err := s.opts.Store.Gone().Forget(ctx, sb.Tenant, sb.Name, time.Time{}); err != nil {
		s.log.Error("forget why an earlier sandbox went", "sandbox", sb.Name, "tenant", sb.Tenant, "err", err)
	}
}

// running returns the sandbox ref names for p and an agent client for it,
// starting the sandbox again first if it is stopped.
func (s *runner) running(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, *agent.Client, error) {
	sb, err := s.access(p).get(ctx, ref)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	if sb.Status != sandbox.StatusRunning {
		if sb, err = s.wake(ctx, sb); err != nil {
			return sandbox.Sandbox{}, nil, err
		}
	}
	s.leases.touch(sb.ID, s.now())
	return sb, s.agentOf(sb), nil
}

// agentOf is the client of running sandbox sb's agent.
func (s *runner) agentOf(sb sandbox.Sandbox) *agent.Client {
	return agent.NewClient(func(ctx context.Context) (net.Conn, error) { return s.dial(ctx, sb) })
}

// dial connects to the sandbox's agent. When that fails because the runtime
// lost the sandbox since its row said running (a host OOM under gVisor, a
// host reboot), or because nothing listens for its agent any more
// (node.ErrUnreachable: its agent died, or its root removed the socket),
// it records why and starts it again instead of failing until the next
// sweep notices.
func (s *runner) dial(ctx context.Context, sb sandbox.Sandbox) (net.Conn, error) {
	conn, err := s.opts.Node.Dial(ctx, sb.ID)
	if err == nil {
		return conn, nil
	}
	st, serr := s.opts.Node.State(ctx, sb.ID)
	switch {
	case serr == nil && st.Status == node.StatusRunning && errors.Is(err, node.ErrUnreachable):
		// Running, and nothing listens for its agent: no call can use it
		// until it starts again.
		s.stopUnreachable(ctx, sb, err)
	case serr == nil && st.Status == node.StatusRunning:
		return nil, err // alive, and may answer yet (busy, frozen)
	case errors.Is(serr, node.ErrNotFound):
		s.markStopped(ctx, sb, "vanished from the runtime")
	case serr == nil:
		s.markStopped(ctx, sb, stoppedReason(st))
	default:
		return nil, err
	}
	if _, err := s.wake(ctx, sb); err != nil {
		return nil, err
	}
	return s.opts.Node.Dial(ctx, sb.ID)
}

// wake starts a stopped sandbox again on its root.
func (s *runner) wake(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, error) {
	cur, unlock, err := s.current(ctx, sb)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer unlock()
	if cur.Status == sandbox.StatusRunning {
		return cur, nil
	}
	if cur.Status == sandbox.StatusCreating {
		return sandbox.Sandbox{}, stillCreating(sb.Name)
	}
	if err := s.moveIfFull(ctx, cur); err != nil {
		return sandbox.Sandbox{}, err
	}
	release, err := s.slot(ctx, cur)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer release()
	// A caller that goes away mid-wake must not leave the runtime running
	// under a row that says stopped: both steps outlive the caller.
	ctx, cancel := detached(ctx)
	defer cancel()
	// A runtime sandbox still running under a row that says it is not is
	// stale: a daemon killed mid-restore can leave one started on a root
	// that Recover has since replaced. Its processes go; the start below
	// runs on the root the row describes.
	if st, err := s.opts.Node.State(ctx, cur.ID); err == nil && st.Status == node.StatusRunning {
		s.log.Warn("restarting a runtime sandbox its row says is not running", "sandbox", cur.Name, "status", cur.Status, "reason", cur.Reason)
		if err := s.opts.Node.Stop(ctx, cur.ID); err != nil {
			return sandbox.Sandbox{}, s.internal("stop stale "+cur.ID, err)
		}
	}
	err = s.start(ctx, cur)
	release()
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	s.crash("wake: started")
	if cur, err = s.setRunning(ctx, cur, "woken by a call after: "+cur.Reason); err != nil {
		return sandbox.Sandbox{}, err
	}
	s.log.Info("sandbox woken", "sandbox", cur.Name, "id", cur.ID)
	if s.opts.Asleep != nil {
		s.opts.Asleep(ctx, cur, false)
	}
	return cur, nil
}

// setRunning records that sb, just started (a create, a wake, a restore),
// runs: its idle lease starts afresh and its row says running, with
// reason. It returns sb as it now is. The caller holds sb's lock.
func (s *runner) setRunning(ctx context.Context, sb sandbox.Sandbox, reason string) (sandbox.Sandbox, error) {
	s.leases.touch(sb.ID, s.now())
	sb.Status, sb.Reason, sb.UpdatedAt = sandbox.StatusRunning, reason, s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(ctx, sb); err != nil {
		return sandbox.Sandbox{}, s.internal("update sandbox row", err)
	}
	return sb, nil
}

// dropCheckpoint removes checkpoint id's snapshot and memory image from
// the node, whatever its row says (a daemon killed between the image and
// the row leaves one the row does not mention); a failure is logged, and
// the next start's Recover removes what is left.
func (s *runner) dropCheckpoint(ctx context.Context, id string) {
	if err := s.opts.Node.DeleteCheckpoint(ctx, id); err != nil {
		s.log.Error("remove a checkpoint from the node", "checkpoint", id, "err", err)
	}
}

// unreachableReason is the status reason of a sandbox stopped because
// nothing listened for its agent.
const unreachableReason = "its agent could not be reached (nothing listened on its socket), so it was stopped; the next call starts it again"

// stopUnreachable stops sb, whose runtime runs it but whose agent nothing
// reaches (cause), and records why, unless a concurrent call changed it
// since it was read. Its root and everything on it stay; the next call
// starts it again.
func (s *runner) stopUnreachable(ctx context.Context, sb sandbox.Sandbox, cause error) {
	s.ifUnchanged(ctx, sb, func(cur sandbox.Sandbox) {
		s.log.Warn("stopping a sandbox whose agent cannot be reached", "sandbox", cur.Name, "tenant", cur.Tenant, "id", cur.ID, "err", cause)
		if err := s.opts.Node.Stop(ctx, cur.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
			s.log.Error("stop a sandbox whose agent cannot be reached", "sandbox", cur.Name, "err", err)
			return
		}
		s.setStatus(ctx, cur, sandbox.StatusStopped, unreachableReason)
	})
}

// markStopped records that a running sandbox died, unless a concurrent
// destroy or wake changed it since the sweep read it.
func (s *runner) markStopped(ctx context.Context, sb sandbox.Sandbox, reason string) {
	s.ifUnchanged(ctx, sb, func(cur sandbox.Sandbox) { s.setStatus(ctx, cur, sandbox.StatusStopped, reason) })
}

// ifUnchanged runs fn with sb's row, under its lock, if it still says
// running as it did when sb was read: a concurrent destroy, wake or
// update since then wins.
func (s *runner) ifUnchanged(ctx context.Context, sb sandbox.Sandbox, fn func(cur sandbox.Sandbox)) {
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
func stoppedReason(st node.State) string {
	if st.OOMKilled {
		return "oom"
	}
	return "exited"
}
