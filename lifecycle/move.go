package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"io"
	"strings"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Move moves the sleeping sandbox ref names to the node target, another
// daemon of the store, or the one Options.PickNode chooses when target is
// "" (operators only): its checkpoints and then its root go there as
// what they hold beyond its image (node.Node.SendSnapshot, Options.Move),
// then its row names target, then what this node held of it goes and the
// fleet is told (Options.Moved). It runs on the sandbox's node, under its
// name's lock, so no call wakes it meanwhile. A move cut short before the
// row changed leaves the sandbox here, whole; the target keeps no root of
// it, and the checkpoints it received wait there for the move's retry,
// which reuses them. A checkpoint that holds memory takes its memory
// image along, sealed as it is at rest; a target whose runtime keeps
// none refuses it (failed_precondition), and the move fails whole.
func (s *Sandboxes) Move(ctx context.Context, p sandbox.Principal, ref, target string) (sandbox.Sandbox, error) {
	if p.Role != sandbox.RoleOperator {
		return sandbox.Sandbox{}, operatorOnly("move sandboxes")
	}
	if s.opts.Move == nil {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeFailedPrecondition, "this daemon moves no sandbox: it is not a node of a fleet").
			WithHint("moves are between the nodes of a store (hearth node)")
	}
	if target != "" {
		if err := sandbox.ValidateNodeName(target); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	sb, err := s.Get(ctx, p, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	cur, unlock, err := s.current(ctx, sb)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer unlock()
	if target == "" {
		if target, err = s.pickNode(ctx, cur); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	return s.moveLocked(ctx, cur, target)
}

// moveLocked moves cur, whose name's lock the caller holds, to target
// (see Move), and returns it as it now is.
func (s *core) moveLocked(ctx context.Context, cur sandbox.Sandbox, target string) (sandbox.Sandbox, error) {
	if err := movable(cur, target); err != nil {
		return sandbox.Sandbox{}, err
	}
	from, reason := cur.Node, cur.Reason
	// The row says where it is going while it goes: a target that
	// recovers meanwhile keeps what it received (see sweeper.adopt).
	cur.Reason = movingTo(target)
	if err := s.opts.Store.Sandboxes().Update(ctx, cur); err != nil {
		return sandbox.Sandbox{}, s.internal("mark the sandbox moving", err)
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	cks, err := s.sendAll(ctx, cur, target)
	s.crash("move: sent")
	if err != nil {
		cur.Reason = reason
		if uerr := s.opts.Store.Sandboxes().Update(dctx, cur); uerr != nil {
			s.log.Error("unmark a sandbox whose move failed", "sandbox", cur.Name, "id", cur.ID, "err", uerr)
		}
		return sandbox.Sandbox{}, sandbox.AsError(err).WithHint("the sandbox stays on node %s, whole; retry, or move it to another node", from)
	}
	cur.Node, cur.Reason, cur.UpdatedAt = target, "moved from node "+from, s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(dctx, cur); err != nil {
		return sandbox.Sandbox{}, s.internal("set the moved sandbox's node", err)
	}
	s.crash("move: row switched")
	s.log.Info("sandbox moved", "sandbox", cur.Name, "id", cur.ID, "tenant", cur.Tenant, "from", from, "to", target)
	s.dropCopy(dctx, cur.ID, cks)
	if s.opts.Moved != nil {
		s.opts.Moved(dctx, cur, from)
	}
	return cur, nil
}

// dropCopy removes what this node holds of sandbox id, which another node
// has whole: its runtime objects, its root and the snapshots of its
// checkpoints cks. What fails is logged: the copy is no longer the
// sandbox, and the next Recover removes what is left of it.
func (s *core) dropCopy(ctx context.Context, id string, cks []sandbox.Checkpoint) {
	if err := s.opts.Node.Delete(ctx, id); err != nil && !errors.Is(err, node.ErrNotFound) {
		s.log.Error("delete a moved sandbox's runtime objects", "id", id, "err", err)
	}
	if err := s.opts.Node.RemoveRoot(ctx, id); err != nil {
		s.log.Error("remove a moved sandbox's root", "id", id, "err", err)
	}
	for _, ck := range cks {
		if err := s.opts.Node.DeleteCheckpoint(ctx, ck.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
			s.log.Error("remove a moved sandbox's checkpoint", "id", id, "checkpoint", ck.ID, "err", err)
		}
	}
}

// movingTo is the reason of a sandbox's row while it moves to node
// target; a fork sent there carries, after ": ", the reason it runs with
// there.
func movingTo(target string) string { return "moving to node " + target }

// movingWithMemory is movingTo(target) for a fork whose processes go
// with it: from the memory image of checkpoint ck of sandbox src (an id),
// which follows its root there.
func movingWithMemory(target, src, ck string) string {
	return movingTo(target) + withMemory + ck + ofSandbox + src
}

const (
	withMemory = " with the memory of checkpoint "
	ofSandbox  = " of sandbox "
)

// moveMark is what a row's reason says of its move to a node.
type moveMark struct {
	// then is the reason a fork runs with there ("" for none).
	then string
	// memory and memoryOf are the checkpoint and the sandbox (an id)
	// whose memory image a fork resumes from there ("" for none).
	memory, memoryOf string
}

// movingToNode says whether reason is that of a row moving to node, and
// what it says of the move.
func movingToNode(reason, node string) (m moveMark, ok bool) {
	rest, ok := strings.CutPrefix(reason, movingTo(node))
	if !ok {
		return m, false
	}
	if mem, found := strings.CutPrefix(rest, withMemory); found {
		ck, after, _ := strings.Cut(mem, ofSandbox)
		src, then, more := strings.Cut(after, ": ")
		if ck == "" || src == "" || strings.ContainsAny(ck+src, " :") {
			return moveMark{}, false
		}
		m.memory, m.memoryOf, rest = ck, src, ""
		if more {
			rest = ": " + then
		}
	}
	if rest == "" {
		return m, true
	}
	m.then, ok = strings.CutPrefix(rest, ": ")
	return m, ok
}

// moveIfFull moves sleeping sb, whose name's lock the caller holds, to
// another node when it does not fit on this one awake (Options.Fits), and
// then answers the moved error: the call that woke it goes there. It
// answers nil when sb stays (it fits, or no node can take it, or the move
// failed: the sandbox is whole here, and wakes here).
func (s *core) moveIfFull(ctx context.Context, sb sandbox.Sandbox) error {
	if s.opts.Fits == nil || s.opts.Move == nil || s.opts.PickNode == nil || sb.Status != sandbox.StatusSleeping || s.opts.Fits(ctx, sb) {
		return nil
	}
	target, err := s.opts.PickNode(ctx, sb)
	if err != nil {
		s.log.Warn("a sandbox that does not fit on its node wakes there: no node can take it", "sandbox", sb.Name, "id", sb.ID, "err", err)
		return nil
	}
	from := sb.Node
	if _, err := s.moveLocked(ctx, sb, target); err != nil {
		s.log.Warn("a sandbox that does not fit on its node wakes there: its move failed", "sandbox", sb.Name, "id", sb.ID, "to", target, "err", err)
		return nil
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q moved to node %s to wake: node %s has no room for it", sb.Name, target, from).
		WithHint("retry the call: it reaches node %s now", target).With("node", target).With(sandbox.DetailMovedTo, target).With("retry_after_seconds", 0)
}

// WakeToStream wakes the sandbox ref names for p if it sleeps, when this
// daemon may move a sandbox to wake it (Options.Fits): for a door about
// to start a stream on it (an exec's WebSocket), so that a move is
// answered before the stream starts, where a control plane that
// forwarded the call can send it on to the sandbox's new node. Elsewhere
// it does nothing (the stream's call wakes the sandbox).
func (s *Sandboxes) WakeToStream(ctx context.Context, p sandbox.Principal, ref string) error {
	if s.opts.Fits == nil {
		return nil
	}
	sb, err := s.Get(ctx, p, ref)
	if err != nil || sb.Status != sandbox.StatusSleeping {
		return nil // the call answers what is wrong
	}
	_, err = s.run.wake(ctx, sb)
	return err
}

// sendAll sends sb's checkpoints, oldest first, each against the one
// before it (the first against sb's image) and followed by its memory
// image if it has one, then its root against its image, to target, and
// returns the checkpoints.
func (s *core) sendAll(ctx context.Context, sb sandbox.Sandbox, target string) ([]sandbox.Checkpoint, error) {
	cks, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
	if err != nil {
		return nil, s.internal("list checkpoints", err)
	}
	image := imageSource(sb).Image
	prev := ""
	for _, ck := range cks {
		if err := s.send(ctx, target, sb, node.Transfer{ID: sb.ID, Checkpoint: ck.ID, Image: image, Prev: prev}); err != nil {
			return nil, err
		}
		if ck.Memory {
			if err := s.send(ctx, target, sb, node.Transfer{ID: sb.ID, Checkpoint: ck.ID, Memory: true}); err != nil {
				return nil, err
			}
		}
		prev = ck.ID
	}
	return cks, s.send(ctx, target, sb, node.Transfer{ID: sb.ID, Image: image, DiskBytes: sb.Resources.DiskBytes})
}

// send streams the snapshot t names from this node to target. It returns
// once the node's sender is done too (its cleanup included), so that no
// work of the call outlives it: a receiver may be done before the stream's
// end.
func (s *core) send(ctx context.Context, target string, sb sandbox.Sandbox, t node.Transfer) error {
	pr, pw := io.Pipe()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		pw.CloseWithError(s.opts.Node.SendSnapshot(ctx, t, pw))
	}()
	err := s.opts.Move(ctx, target, sb, t.Checkpoint, t.Memory, pr)
	pr.CloseWithError(errors.New("the move ended")) // a sender still writing stops
	<-sent
	return err
}

// pickNode is the node Options.PickNode chooses for sb.
func (s *core) pickNode(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	if s.opts.PickNode == nil {
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "name the node to move sandbox %q to", sb.Name).WithHint(`send {"node":"<name>"}`)
	}
	return s.opts.PickNode(ctx, sb)
}

// movable says why sb, under its lock, cannot move to target now.
func movable(sb sandbox.Sandbox, target string) error {
	switch {
	case target == sb.Node:
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "sandbox %q is on node %s already", sb.Name, target)
	case sb.Status != sandbox.StatusSleeping:
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %q is %s: only a sleeping sandbox moves", sb.Name, sb.Status).
			WithHint("sleep it first (hearth sleep %s)", sb.Name).With("status", string(sb.Status))
	}
	return nil
}

// ReceiveSnapshot keeps r, the root of sandbox id that node from is
// moving here (its Move), or its checkpoint ck when ck is not "", or,
// with memory, that checkpoint's memory image, on this node: as what it
// holds beyond the sandbox's image or the checkpoint before ck, which
// this node must hold, a root capped at the sandbox's disk size; all of
// it as the rows say. Only a call that node made and proved reaches it
// (door.AuthNode); a stream for a sandbox that is not from's, or not
// asleep, or a checkpoint it does not have (or one without memory, for a
// memory image), is refused before a byte of it is read.
func (s *Sandboxes) ReceiveSnapshot(ctx context.Context, from, id, ck string, memory bool, r io.Reader) error {
	sb, err := s.opts.Store.Sandboxes().ByID(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sandbox.Errorf(sandbox.CodeNotFound, "no sandbox has id %q", id)
	case err != nil:
		return s.internal("get sandbox by id", err)
	}
	mark, ok := s.movesHere(sb, ck, memory)
	if sb.Node != from || from == s.opts.NodeName || !ok {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %s is %s on node %s: node %s may not move it here", id, sb.Status, sb.Node, from)
	}
	t := node.Transfer{ID: sb.ID, Image: imageSource(sb).Image, DiskBytes: sb.Resources.DiskBytes}
	var fork moveMark // a fork's move, when it receives its memory image
	switch {
	case sb.Status == sandbox.StatusCreating && memory:
		fork = mark
		if t, err = s.forkMemory.transfer(ctx, sb.ID, mark, from); err != nil {
			return err
		}
	case ck != "":
		if t, err = s.checkpointTransfer(ctx, t, ck, memory); err != nil {
			return err
		}
	}
	if t.Memory {
		return s.receiveMemory(ctx, sb, t, r, fork)
	}
	if err := s.images.peers.fetch(ctx, t.Image); err != nil {
		return err
	}
	if ok, err := s.opts.Node.HasImage(ctx, t.Image); err != nil {
		return s.internal("look for the image", err)
	} else if !ok {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "node %s does not hold the image %s of sandbox %s", s.opts.NodeName, cmp.Or(sb.Image, t.Image), sb.Name).
			WithHint("move it to a node that holds the image, or pull the image there first").With("node", s.opts.NodeName)
	}
	if ck == "" {
		// The row is from's: a root of it here is what an earlier move,
		// cut short before the row switched, left, which this one
		// replaces.
		if err := s.opts.Node.RemoveRoot(ctx, sb.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
			return s.internal("remove the root an earlier move left", err)
		}
	}
	if err := s.receive(ctx, t, r, "receive a moved snapshot"); err != nil {
		return err
	}
	s.log.Info("moved snapshot received", "sandbox", sb.Name, "id", sb.ID, "checkpoint", ck, "tenant", sb.Tenant, "from", from)
	return nil
}

// receive keeps r, the snapshot t names, on this node
// (node.Node.ReceiveSnapshot): a refusal of the node's is answered as it
// is coded, anything else is what (internal).
func (s *core) receive(ctx context.Context, t node.Transfer, r io.Reader, what string) error {
	err := s.opts.Node.ReceiveSnapshot(ctx, t, r)
	if se := (*sandbox.Error)(nil); err != nil && errors.As(err, &se) {
		return se
	}
	if err != nil {
		return s.internal(what, err)
	}
	return nil
}

// receiveMemory keeps r, the memory image t names of a checkpoint: of
// sb, which this node must hold the snapshot of already (Move sends it
// first), or, with fork (sb's move as its row says it) naming an image,
// the one sb, a fork moving here, resumes from (see forkMemory.transfer),
// which it then holds. It holds the image's lock (see
// forkMemory.release).
func (s *Sandboxes) receiveMemory(ctx context.Context, sb sandbox.Sandbox, t node.Transfer, r io.Reader, fork moveMark) error {
	if !s.opts.Node.Capabilities().MemoryCheckpoint {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "node %s's runtime keeps no memory image: sandbox %s's checkpoint %s holds one", s.opts.NodeName, sb.Name, t.Checkpoint).
			WithHint("move it to a node of a runtime with memory checkpoints (runsc), or delete that checkpoint first").With("node", s.opts.NodeName)
	}
	unlock := s.locks.lock(memoryImageLock(t.Checkpoint))
	defer unlock()
	if err := s.receive(ctx, t, r, "receive a moved memory image"); err != nil {
		return err
	}
	if fork.memory != "" {
		s.forkMemory.hold(sb.ID, fork)
	}
	s.log.Info("moved memory image received", "sandbox", sb.Name, "id", sb.ID, "checkpoint", t.Checkpoint, "tenant", sb.Tenant)
	return nil
}

// movesHere says whether sb's row lets its node send this node what
// ReceiveSnapshot is asked to keep: anything of a sleeping sandbox (a
// move); of a sandbox being created whose row says it is moving here (a
// fork its node sends, see forkElsewhere), its root (ck ""), and the
// memory image of checkpoint ck when the row says the fork resumes from
// it. mark is what the row says of its move to this node.
func (s *Sandboxes) movesHere(sb sandbox.Sandbox, ck string, memory bool) (mark moveMark, ok bool) {
	mark, moving := movingToNode(sb.Reason, s.opts.NodeName)
	switch {
	case sb.Status == sandbox.StatusSleeping:
		return mark, true
	case sb.Status != sandbox.StatusCreating || !moving:
		return mark, false
	case memory:
		return mark, ck != "" && ck == mark.memory
	}
	return mark, ck == ""
}

// forkElsewhere starts sb, a fork of checkpoint from.checkpoint whose
// creating row exists and whose name's lock the caller holds, on another
// node when this one, a node of a fleet, has no room for it
// (Options.Fits): its root is made from the checkpoint and sent to the
// node PickNode chooses, then, with from.memory, the checkpoint's memory
// image (see forkMemory.send), and that node runs it (Options.PlaceOn)
// with reason. ok false says sb is still this node's to start: it fits,
// or no node can take it, or the send failed. Otherwise the result is sb
// as its new node runs it, or the coded error, the create undone.
func (s *Sandboxes) forkElsewhere(ctx context.Context, sb sandbox.Sandbox, from origin, reason string) (placed sandbox.Sandbox, ok bool, err error) {
	if s.opts.Fits == nil || s.opts.Move == nil || s.opts.PickNode == nil || s.opts.PlaceOn == nil || s.opts.Fits(ctx, sb) {
		return sb, false, nil
	}
	target, err := s.opts.PickNode(ctx, sb)
	if err != nil {
		s.log.Warn("a fork that does not fit on its checkpoint's node starts there: no node can take it", "sandbox", sb.Name, "id", sb.ID, "err", err)
		return sb, false, nil
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	there := sb
	there.Node = target
	if err := s.opts.PlaceOn(ctx, there, true); err != nil {
		s.run.undoCreate(dctx, sb)
		return sandbox.Sandbox{}, true, err
	}
	cur, moving := sb, movingTo(target)
	if from.memory {
		moving = movingWithMemory(target, from.of, from.checkpoint)
	}
	cur.Reason = moving + ": " + reason
	if err := s.opts.Store.Sandboxes().Update(ctx, cur); err != nil {
		s.run.undoCreate(dctx, sb)
		return sandbox.Sandbox{}, true, s.internal("mark the fork moving", err)
	}
	err = s.send(ctx, target, cur, node.Transfer{ID: sb.ID, Image: imageSource(sb).Image, DiskBytes: sb.Resources.DiskBytes, Fork: from.checkpoint})
	s.crash("fork: sent")
	if err != nil {
		s.log.Warn("a fork that does not fit on its checkpoint's node starts there: its send failed", "sandbox", sb.Name, "id", sb.ID, "to", target, "err", err)
		if uerr := s.opts.Store.Sandboxes().Update(dctx, sb); uerr != nil {
			s.run.undoCreate(dctx, sb)
			return sandbox.Sandbox{}, true, s.internal("unmark the fork", uerr)
		}
		return sb, false, nil
	}
	if from.memory {
		if cur, err = s.forkMemory.send(dctx, cur, target, from.checkpoint, reason); err != nil {
			s.run.undoCreate(dctx, sb)
			return sandbox.Sandbox{}, true, err
		}
	}
	there.Reason = cur.Reason
	if err := s.opts.PlaceOn(dctx, there, false); err != nil {
		placed, err = s.run.undoPlaced(dctx, sb, err)
		return placed, true, err
	}
	placed, err = s.opts.Store.Sandboxes().Get(dctx, sb.Tenant, sb.Name)
	if err != nil || placed.ID != sb.ID {
		return sandbox.Sandbox{}, true, sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q went away while it was being created", sb.Name).WithHint("retry the fork")
	}
	s.log.Info("sandbox created", "sandbox", sb.Name, "id", sb.ID, "tenant", sb.Tenant, "owner", sb.Owner, "node", placed.Node, "from", "checkpoint "+from.checkpoint)
	return placed, true, nil
}

// checkpointTransfer is t for sb's checkpoint ck, sent against the one
// before it (Move sends them oldest first), or, with memory, for its
// memory image; a checkpoint sb does not have, or one without memory
// for a memory image, is refused.
func (s *Sandboxes) checkpointTransfer(ctx context.Context, t node.Transfer, ck string, memory bool) (node.Transfer, error) {
	cks, err := s.opts.Store.Checkpoints().List(ctx, t.ID)
	if err != nil {
		return t, s.internal("list checkpoints", err)
	}
	for i, c := range cks {
		if c.ID != ck {
			continue
		}
		if memory && !c.Memory {
			return t, sandbox.Errorf(sandbox.CodeNotFound, "checkpoint %s holds no memory image", ck)
		}
		t.Checkpoint, t.DiskBytes, t.Memory = ck, 0, memory
		if i > 0 {
			t.Prev = cks[i-1].ID
		}
		return t, nil
	}
	return t, sandbox.Errorf(sandbox.CodeNotFound, "sandbox %s has no checkpoint %q", t.ID, ck)
}

// Cordon stops (on) or lets again (off) the fleet place new sandboxes on
// node (operators only): a control plane's call (Options.Fleet).
// Sandboxes there keep running; hearth node drain moves them.
func (s *Sandboxes) Cordon(ctx context.Context, p sandbox.Principal, node string, on bool) error {
	if p.Role != sandbox.RoleOperator {
		return operatorOnly("cordon nodes")
	}
	if err := sandbox.ValidateNodeName(node); err != nil {
		return err
	}
	if s.opts.Fleet == nil {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "this daemon places no sandbox on other nodes: cordon is a fleet's").
			WithHint("ask a control plane (hearth serve --kubeconfig)")
	}
	if err := s.opts.Fleet.Cordon(ctx, node, on); err != nil {
		return err
	}
	s.log.Info("node cordoned", "node", node, "cordoned", on)
	return nil
}
