package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"io"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Move moves the sleeping sandbox ref names to the node target, another
// daemon of the store, or the one Options.PickNode chooses when target is
// "" (operators only): its root goes there as what it
// holds beyond its image (node.Node.SendRoot, Options.Move), then its row
// names target, then what this node held of it goes and the fleet is told
// (Options.Moved). It runs on the sandbox's node, under its name's lock,
// so no call wakes it meanwhile. A move cut short before the row changed
// leaves the sandbox here, whole; the target keeps nothing of it.
//
// A sandbox with checkpoints is refused (failed_precondition): they are
// snapshots on this node, and moves do not carry them yet.
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
	if err := s.movable(ctx, cur, target); err != nil {
		return sandbox.Sandbox{}, err
	}
	from := cur.Node
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.opts.Node.SendRoot(ctx, cur.ID, imageSource(cur).Image, pw)) }()
	err = s.opts.Move(ctx, target, cur, pr)
	pr.CloseWithError(errors.New("the move ended"))
	if err != nil {
		return sandbox.Sandbox{}, sandbox.AsError(err).WithHint("the sandbox stays on node %s, whole; retry, or move it to another node", from)
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	cur.Node, cur.UpdatedAt = target, s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(dctx, cur); err != nil {
		return sandbox.Sandbox{}, s.internal("set the moved sandbox's node", err)
	}
	s.log.Info("sandbox moved", "sandbox", cur.Name, "id", cur.ID, "tenant", cur.Tenant, "from", from, "to", target)
	if err := s.opts.Node.Delete(dctx, cur.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
		s.log.Error("delete a moved sandbox's runtime objects", "id", cur.ID, "err", err)
	}
	if err := s.opts.Node.RemoveRoot(dctx, cur.ID); err != nil {
		s.log.Error("remove a moved sandbox's root", "id", cur.ID, "err", err)
	}
	if s.opts.Moved != nil {
		s.opts.Moved(dctx, cur, from)
	}
	return cur, nil
}

// pickNode is the node Options.PickNode chooses for sb.
func (s *Sandboxes) pickNode(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	if s.opts.PickNode == nil {
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "name the node to move sandbox %q to", sb.Name).WithHint(`send {"node":"<name>"}`)
	}
	return s.opts.PickNode(ctx, sb)
}

// movable says why sb, under its lock, cannot move to target now.
func (s *Sandboxes) movable(ctx context.Context, sb sandbox.Sandbox, target string) error {
	switch {
	case target == sb.Node:
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "sandbox %q is on node %s already", sb.Name, target)
	case sb.Status != sandbox.StatusSleeping:
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %q is %s: only a sleeping sandbox moves", sb.Name, sb.Status).
			WithHint("sleep it first (hearth sleep %s)", sb.Name).With("status", string(sb.Status))
	}
	cks, err := s.opts.Store.Checkpoints().List(ctx, sb.ID)
	if err != nil {
		return s.internal("list checkpoints", err)
	}
	if len(cks) > 0 {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %q has %d checkpoints, which stay on node %s: moves do not carry checkpoints yet", sb.Name, len(cks), sb.Node).
			WithHint("delete its checkpoints first, or keep it on node %s", sb.Node).With("checkpoints", len(cks))
	}
	return nil
}

// ReceiveRoot keeps r, the root of sandbox id that node from is moving
// here (its Move), as the sandbox's root on this node: made from the
// sandbox's image, which this node must hold, and capped at its disk
// size, both as its row says. Only a call that node made and proved
// reaches it (door.AuthNode); a stream for a sandbox that is not from's,
// or not asleep, is refused before a byte of it is read.
func (s *Sandboxes) ReceiveRoot(ctx context.Context, from, id string, r io.Reader) error {
	sb, err := s.opts.Store.Sandboxes().ByID(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sandbox.Errorf(sandbox.CodeNotFound, "no sandbox has id %q", id)
	case err != nil:
		return s.internal("get sandbox by id", err)
	case sb.Node != from || from == s.opts.NodeName || sb.Status != sandbox.StatusSleeping:
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %s is %s on node %s: node %s may not move it here", id, sb.Status, sb.Node, from)
	}
	image := imageSource(sb).Image
	if ok, err := s.opts.Node.HasImage(ctx, image); err != nil {
		return s.internal("look for the image", err)
	} else if !ok {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "node %s does not hold the image %s of sandbox %s", s.opts.NodeName, cmp.Or(sb.Image, image), sb.Name).
			WithHint("move it to a node that holds the image, or pull the image there first").With("node", s.opts.NodeName)
	}
	if err := s.opts.Node.ReceiveRoot(ctx, sb.ID, image, sb.Resources.DiskBytes, r); err != nil {
		if se := (*sandbox.Error)(nil); errors.As(err, &se) {
			return se
		}
		return s.internal("receive a moved root", err)
	}
	s.log.Info("moved root received", "sandbox", sb.Name, "id", sb.ID, "tenant", sb.Tenant, "from", from)
	return nil
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
