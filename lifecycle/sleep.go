package lifecycle

import (
	"context"
	"errors"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
)

// Sleep stops the processes of the sandbox ref names for p and frees their
// memory; its disk stays, and the next call to it (or Wake) starts it again
// on the same root. Sleeping a sleeping sandbox is a no-op.
func (s *Sandboxes) Sleep(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	sb, err := s.Get(ctx, p, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return s.sleep(ctx, sb, "asked to sleep")
}

// sleep puts sb to sleep with the reason, under its name's lock, unless a
// concurrent call changed it meanwhile.
func (s *Sandboxes) sleep(ctx context.Context, sb sandbox.Sandbox, reason string) (sandbox.Sandbox, error) {
	cur, unlock, err := s.current(ctx, sb)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer unlock()
	switch cur.Status {
	case sandbox.StatusSleeping:
		return cur, nil
	case sandbox.StatusCreating:
		return sandbox.Sandbox{}, stillCreating(sb.Name)
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	// The row goes first: a daemon killed before the runtime stops leaves
	// a sleeping row over a running sandbox, which Recover adopts as
	// running again (and wake would find running). Stopped first, the
	// sandbox would come back as one that died.
	asleep := cur
	asleep.Status, asleep.Reason, asleep.UpdatedAt = sandbox.StatusSleeping, reason, s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(ctx, asleep); err != nil {
		return sandbox.Sandbox{}, s.internal("update sandbox row", err)
	}
	s.crash("sleep: row updated")
	if err := s.opts.Node.Stop(ctx, cur.ID); err != nil && !errors.Is(err, node.ErrNotFound) {
		s.setStatus(ctx, asleep, cur.Status, cur.Reason)
		return sandbox.Sandbox{}, s.internal("stop "+cur.ID, err)
	}
	s.log.Info("sandbox asleep", "sandbox", cur.Name, "reason", reason)
	if s.opts.Asleep != nil {
		s.opts.Asleep(ctx, asleep, true)
	}
	return asleep, nil
}

// Wake starts the sleeping or stopped sandbox ref names for p again on its
// root; waking a running sandbox is a no-op.
func (s *Sandboxes) Wake(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	sb, err := s.Get(ctx, p, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if sb.Status == sandbox.StatusRunning {
		s.leases.touch(sb.ID, s.now())
		return sb, nil
	}
	return s.run.wake(ctx, sb)
}
