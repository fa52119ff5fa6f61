package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/tracing"
)

// Checkpoints takes, lists, deletes and restores the checkpoints of
// sandboxes, and forks new sandboxes from them. It is safe for concurrent
// use.
type Checkpoints struct {
	*core
	run       *runner
	sandboxes *Sandboxes
	// usage is Sandboxes' cache of measured disk usage, which a restore
	// makes stale.
	usage *usageCache
}

// asleepSince, followed by a checkpoint id, is the reason of a sandbox a
// checkpoint left asleep (see CheckpointRequest.Sleep): Recover finishes
// the sleep of one a daemon stop left running after the snapshot.
const asleepSince = "asleep since checkpoint "

// restoringTo, followed by a checkpoint id, is the reason of a stopped
// sandbox that Restore is restoring: Recover finishes what it finds.
const restoringTo = "restoring to checkpoint "

// newCheckpointID returns a fresh checkpoint id.
func newCheckpointID() string { return "c" + newID()[1:] }

// Checkpoint saves the current content of the sandbox ref names for p
// (see Sandboxes.Get), live: a
// running sandbox is frozen for the few milliseconds of a snapshot and
// thawed, its processes never stop. A sleeping or stopped sandbox is
// checkpointed as it lies, without waking it: it has no processes to keep
// consistent. The checkpoint's parent is the sandbox's head, and it becomes
// the new head.
//
// With req.Memory, the processes' memory is saved too, by a node whose
// runtime can (gVisor: node.Capabilities.MemoryCheckpoint), at the
// instant of the snapshot:
// a restore resumes them where they were. It needs a running sandbox with
// no command running (a command's stream to its caller would be cut:
// unavailable, retry once it ends), and a runtime that can
// (invalid_argument otherwise).
//
// With req.Sleep, a running sandbox is left asleep: with req.Memory at
// the checkpoint's instant, never resumed, so that a restore of the
// checkpoint (here, or on another node after a move) resumes its
// processes with nothing lost or repeated between; without, it is put to
// sleep just before its files are saved.
func (s *Checkpoints) Checkpoint(ctx context.Context, p sandbox.Principal, ref string, req sandbox.CheckpointRequest) (_ sandbox.Checkpoint, err error) {
	ctx, span := tracer.Start(ctx, "lifecycle.checkpoint")
	defer func() { tracing.End(span, err) }()
	if err := sandbox.ValidateLabel(req.Label); err != nil {
		return sandbox.Checkpoint{}, err
	}
	sb, unlock, err := s.locked(ctx, p, ref)
	if err != nil {
		return sandbox.Checkpoint{}, err
	}
	defer unlock()
	return s.take(ctx, sb, ref, req)
}

// take is Checkpoint of sb, found and checked already, whose name's lock
// the caller holds; ref is sb as the caller wrote it, for messages. req's
// label is valid.
func (s *Checkpoints) take(ctx context.Context, sb sandbox.Sandbox, ref string, req sandbox.CheckpointRequest) (sandbox.Checkpoint, error) {
	if sb.Status == sandbox.StatusCreating {
		return sandbox.Checkpoint{}, stillCreating(ref)
	}
	if err := s.canSaveMemory(sb, req.Memory); err != nil {
		return sandbox.Checkpoint{}, err
	}
	s.leases.touch(sb.ID, s.now())
	if req.Memory { // saving memory is heavy work; a snapshot of the files is not
		release, err := s.slot(ctx, sb)
		if err != nil {
			return sandbox.Checkpoint{}, err
		}
		defer release()
	}
	// The rows and the snapshot outlive a caller that goes away.
	ctx, cancel := detached(ctx)
	defer cancel()
	// SizeBytes is the root's usage just before the snapshot (a snapshot
	// just taken is charged nothing of its own; see node.Node.Usage).
	// The measure also writes out the root's dirty data, which the
	// snapshot would otherwise do.
	size, err := s.opts.Node.Usage(ctx, sb.ID)
	if err != nil {
		return sandbox.Checkpoint{}, s.internal("measure "+sb.ID, err)
	}
	c := sandbox.Checkpoint{
		ID:        newCheckpointID(),
		SandboxID: sb.ID,
		Sandbox:   sb.Name,
		Label:     req.Label,
		Parent:    sb.Head,
		CreatedAt: s.now().UTC(),
		SizeBytes: size,
	}
	if err := s.snapshot(ctx, sb, c, req); err != nil {
		return sandbox.Checkpoint{}, err
	}
	// The row says memory once the image is whole: a daemon killed
	// before leaves a checkpoint of the files only (its image, if any, is
	// deleted with it).
	if req.Memory {
		s.crash("checkpoint: memory saved")
		if err := s.opts.Store.Checkpoints().SetMemory(ctx, c.ID, true); err != nil {
			return sandbox.Checkpoint{}, s.internal("record the checkpoint's memory", err)
		}
		c.Memory = true
	}
	s.log.Info("checkpoint taken", "sandbox", sb.Name, "checkpoint", c.ID, "label", c.Label, "parent", c.Parent, "memory", c.Memory)
	return c, nil
}

// snapshot is take's durable part: it records checkpoint c of sb (its
// row, then sb's head on it, and with req.Sleep a running sb's sleep)
// and has the node take it. On failure nothing of c is left, and sb is as
// it was.
func (s *Checkpoints) snapshot(ctx context.Context, sb sandbox.Sandbox, c sandbox.Checkpoint, req sandbox.CheckpointRequest) error {
	// The rows go first and the snapshot last: a checkpoint exists once
	// its snapshot does. A daemon killed before leaves a row without a
	// snapshot, which Recover deletes, moving the head back to the row's
	// parent (see unrecord). Snapshot first, a kill between the row and
	// the head would leave a checkpoint that is not the head, which
	// Recover cannot tell from one that a restore moved the head off.
	if err := s.opts.Store.Checkpoints().Create(ctx, c); err != nil {
		return s.internal("create checkpoint row", err)
	}
	s.crash("checkpoint: row inserted")
	prev := sb
	sb.Head, sb.UpdatedAt = c.ID, s.now().UTC()
	// A running sandbox that is to sleep says so first, as a sleep does
	// (a daemon killed before the node stops it leaves a sleeping row
	// over a running sandbox, which Recover adopts as running).
	sleeps := req.Sleep && sb.Status == sandbox.StatusRunning
	if sleeps {
		sb.Status, sb.Reason = sandbox.StatusSleeping, asleepSince+c.ID
	}
	if err := s.opts.Store.Sandboxes().Update(ctx, sb); err != nil {
		s.unrecord(ctx, prev, c)
		return s.internal("update head", err)
	}
	s.crash("checkpoint: head moved")
	// The node holds the sandbox still around the snapshot as it needs
	// (see node.Node.Checkpoint), and leaves nothing of a failed one.
	opts := node.CheckpointOptions{Running: prev.Status == sandbox.StatusRunning, Memory: req.Memory, Stop: sleeps}
	if err := s.opts.Node.Checkpoint(ctx, sb.ID, c.ID, opts); err != nil {
		if sb = s.unrecord(ctx, sb, c); sleeps {
			// Running as it was, as the node leaves it; a sandbox a
			// failure stopped anyway is found so by the sweep.
			s.setStatus(ctx, sb, prev.Status, prev.Reason)
		}
		return s.internal("checkpoint "+sb.ID, err)
	}
	if sleeps {
		s.log.Info("sandbox asleep", "sandbox", sb.Name, "reason", sb.Reason)
		if s.opts.Asleep != nil {
			s.opts.Asleep(ctx, sb, true)
		}
	}
	return nil
}

// canSaveMemory is nil when a checkpoint of sb may save its memory (or
// asks for none), else why not.
func (s *Checkpoints) canSaveMemory(sb sandbox.Sandbox, memory bool) error {
	if !memory {
		return nil
	}
	if caps := s.opts.Node.Capabilities(); !caps.MemoryCheckpoint {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "the runtime %s cannot checkpoint memory", caps.Runtime).
			WithHint("checkpoint without memory (the files only), or run hearth with gVisor (runsc)")
	}
	if sb.Status != sandbox.StatusRunning {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "sandbox %q is %s: it has no processes whose memory to save", sb.Name, sb.Status).
			WithHint("checkpoint without memory, or wake it first")
	}
	if n := s.leases.running(sb.ID); n > 0 {
		return sandbox.Errorf(sandbox.CodeUnavailable, "%d command(s) running in sandbox %q: a memory checkpoint would cut their output", n, sb.Name).
			WithHint("retry once they end").With("running", n)
	}
	return nil
}

// unrecord deletes the row of checkpoint c of sb, whose snapshot was never
// taken, and moves sb's head back to c's parent if c is its head. It
// returns sb as it now is.
func (s *Checkpoints) unrecord(ctx context.Context, sb sandbox.Sandbox, c sandbox.Checkpoint) sandbox.Sandbox {
	if err := s.opts.Store.Checkpoints().Delete(ctx, c.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("delete the row of an unfinished checkpoint", "sandbox", sb.Name, "checkpoint", c.ID, "err", err)
		return sb
	}
	if sb.Head != c.ID {
		return sb
	}
	head := sb
	head.Head, head.UpdatedAt = c.Parent, s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(ctx, head); err != nil {
		s.log.Error("move the head back from an unfinished checkpoint", "sandbox", sb.Name, "checkpoint", c.ID, "err", err)
		return sb
	}
	return head
}

// ListCheckpoints returns the checkpoints of the sandbox ref names for p,
// oldest first; Parent links make the tree.
func (s *Checkpoints) ListCheckpoints(ctx context.Context, p sandbox.Principal, ref string) ([]sandbox.Checkpoint, error) {
	sb, err := s.access(p).get(ctx, ref)
	if err != nil {
		return nil, err
	}
	cps, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
	if err != nil {
		return nil, s.internal("list checkpoints", err)
	}
	if cps == nil {
		cps = []sandbox.Checkpoint{}
	}
	return cps, nil
}

// DeleteCheckpoint deletes checkpoint id of the sandbox ref names for p
// and reclaims the data only it held. Its children keep their content and
// stay in the tree (their parent link names a checkpoint that is gone). A
// checkpoint of another sandbox is not_found.
func (s *Checkpoints) DeleteCheckpoint(ctx context.Context, p sandbox.Principal, ref, id string) error {
	sb, unlock, err := s.locked(ctx, p, ref)
	if err != nil {
		return err
	}
	defer unlock()
	c, err := s.access(p).checkpoint(ctx, sb, id)
	if err != nil {
		return err
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	// The row goes first: a daemon killed after it leaves a snapshot no
	// row owns, which Recover removes.
	if err := s.opts.Store.Checkpoints().Delete(ctx, id); err != nil {
		return s.internal("delete checkpoint row", err)
	}
	s.crash("delete checkpoint: row deleted")
	s.run.dropCheckpoint(ctx, c.ID)
	s.log.Info("checkpoint deleted", "sandbox", sb.Name, "checkpoint", id)
	return nil
}

// Restore makes checkpoint id the content of the sandbox ref names for p
// (a checkpoint of another sandbox is not_found): its
// processes are stopped, its root is replaced by a writable snapshot of the
// checkpoint, and it runs again: with the checkpoint's processes where
// they were when it holds their memory (if that fails, afresh, which the
// reason says), afresh otherwise. The checkpoint stays, so restore can be
// repeated; it becomes the sandbox's head. A sleeping sandbox is woken,
// on another node when its own has no room for it (unavailable with
// moved_to, as a wake: the call is then that node's).
func (s *Checkpoints) Restore(ctx context.Context, p sandbox.Principal, ref, id string) (_ sandbox.Sandbox, err error) {
	ctx, span := tracer.Start(ctx, "lifecycle.restore")
	defer func() { tracing.End(span, err) }()
	sb, unlock, err := s.locked(ctx, p, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer unlock()
	c, err := s.access(p).checkpoint(ctx, sb, id)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if sb.Status == sandbox.StatusCreating {
		return sandbox.Sandbox{}, stillCreating(ref)
	}
	// A sleeping sandbox its node has no room for moves, checkpoints and
	// all, and the call goes after it (see moveIfFull).
	if err := s.moveIfFull(ctx, sb); err != nil {
		return sandbox.Sandbox{}, err
	}
	// The whole restore waits its turn, so that a caller that gives up
	// waiting leaves the sandbox as it was.
	release, err := s.slot(ctx, sb)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer release()
	ctx, cancel := detached(ctx)
	defer cancel()
	if err := s.opts.Node.Stop(ctx, sb.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
		return sandbox.Sandbox{}, s.internal("stop "+sb.ID, err)
	}
	s.crash("restore: stopped")
	// The row says where the sandbox is going before its root changes: a
	// daemon killed from here until the row says running leaves this
	// mark, and Recover finishes the restore (Reset is atomic, so the root
	// is the old one or the new one, and repeating it is harmless).
	sb.Status, sb.Reason, sb.UpdatedAt = sandbox.StatusStopped, restoringTo+id, s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(ctx, sb); err != nil {
		return sandbox.Sandbox{}, s.internal("update sandbox row", err)
	}
	s.crash("restore: row marked")
	if err := s.opts.Node.Rollback(ctx, sb.ID, id); err != nil {
		s.setStatus(ctx, sb, sandbox.StatusStopped, "restore to checkpoint "+id+" failed")
		return sandbox.Sandbox{}, s.internal("reset root to "+id, err)
	}
	s.crash("restore: root reset")
	s.usage.forget(sb.ID)
	sb.Head = id
	reason, resumed := "restored to checkpoint "+id, false
	if c.Memory {
		if resumed = s.run.startFrom(ctx, sb, id) == nil; resumed {
			reason += " with its processes"
		} else {
			reason += " (its processes started afresh: their memory could not be restored)"
		}
	}
	if !resumed {
		if err := s.run.start(ctx, sb); err != nil {
			sb.Reason = "restored to checkpoint " + id + " but failed to start"
			s.opts.Store.Sandboxes().Update(ctx, sb)
			return sandbox.Sandbox{}, err
		}
	}
	s.crash("restore: started")
	if sb, err = s.run.setRunning(ctx, sb, reason); err != nil {
		return sandbox.Sandbox{}, err
	}
	s.log.Info("sandbox restored", "sandbox", sb.Name, "checkpoint", id)
	return sb, nil
}

// Fork creates a new sandbox for p, called newName, whose root starts as
// checkpoint id of the sandbox ref names for p (a checkpoint of another
// sandbox is not_found); the two are independent from then on. The new
// sandbox is p's, in p's tenant, with the same image and size, the
// default TTL, and a checkpoint tree of its own. A checkpoint that holds
// memory brings its processes along, resumed where they were, when the
// source has no network (on another node of a fleet too: the memory
// image follows the fork's root there); otherwise, or if they cannot be
// restored, the fork's processes start afresh, and its reason says which
// and why.
func (s *Checkpoints) Fork(ctx context.Context, p sandbox.Principal, ref, id, newName string) (sandbox.Sandbox, error) {
	a := s.access(p)
	src, err := a.get(ctx, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	c, err := a.checkpoint(ctx, src, id)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if newName == "" {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "a fork needs a new name").WithHint("name the new sandbox")
	}
	reason := fmt.Sprintf("forked from %s at checkpoint %s", src.Name, id)
	from := origin{checkpoint: id, of: src.ID, image: imageOf(src), memory: c.Memory}
	if c.Memory && src.Network != sandbox.NetworkNone {
		// A fork has no network, and runsc restores a sandbox's memory
		// only into a spec with the same mounts and namespaces: an
		// egress sandbox's has its resolv.conf and its network namespace.
		from.memory = false
		reason += " (its processes started afresh: their memory holds a network, and a fork has none)"
	}
	sb, created, err := s.sandboxes.create(ctx, p, sandbox.CreateRequest{Name: newName, Image: src.Image, Size: src.Size},
		from, reason)
	if err == nil && !created {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeAlreadyExists, "sandbox name %q is taken", sb.Name).WithHint("fork into a new name")
	}
	return sb, err
}
