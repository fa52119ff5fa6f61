package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// sweeper is the daemon's own hand on sandboxes, which no caller asks
// for: the sweep that reaps, notices the dead and puts the idle to sleep
// (Service.Run), and the reconciliation at start-up (Service.Recover).
type sweeper struct {
	*core
	run         *runner
	sandboxes   *Sandboxes
	checkpoints *Checkpoints
	adm         *admission
	pool        *Pool
	images      *Images
	room        *roomMaker
}

// loop sweeps every SweepInterval until ctx ends.
func (s *sweeper) loop(ctx context.Context) {
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
// whose runtime says otherwise as stopped, puts idle ones to sleep (those
// idle for their timeout, and under memory pressure those idle for
// roomIdle: see roomMaker), tends the warm pool, and releases the memory images
// of forks that will not start here.
func (s *sweeper) sweep(ctx context.Context) {
	rows, err := s.opts.Store.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		s.log.Error("sweep: list", "err", err)
		return
	}
	now := s.now()
	if s.opts.StoreWide == nil || s.opts.StoreWide() {
		if err := s.opts.Store.Gone().Forget(ctx, "", "", now.Add(-s.opts.GoneRetention)); err != nil {
			s.log.Error("sweep: forget old records of destroyed sandboxes", "err", err)
		}
	}
	// This node's sandboxes only: another's are in its runtime, not ours.
	rows = slices.DeleteFunc(rows, func(sb sandbox.Sandbox) bool { return !s.mine(sb) })
	var members []sandbox.Sandbox
	listening := s.listening(ctx, rows)
	pace := s.probePacer(rows, listening)
	idle := s.idleTimeouts(ctx)
	for _, sb := range rows {
		if isPoolMember(sb) {
			members = append(members, sb)
			continue
		}
		if sb.Status == sandbox.StatusCreating && now.Sub(sb.UpdatedAt) > staleCreate {
			s.dropStaleCreate(ctx, sb)
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
		st, err := s.opts.Node.State(ctx, sb.ID)
		switch {
		case errors.Is(err, node.ErrNotFound):
			s.run.markStopped(ctx, sb, "vanished from the runtime")
		case err == nil && st.Status != node.StatusRunning:
			s.run.markStopped(ctx, sb, stoppedReason(st))
		case err == nil && (listening[sb.ID] || pace(ctx) && s.reachable(ctx, sb)):
			s.sleepIdle(ctx, sb, idle(sb.Tenant))
		}
	}
	if s.underPressure(ctx) {
		s.room.make(ctx, "the host was under memory pressure", "")
	}
	s.pool.tend(ctx, members)
	s.sandboxes.forkMemory.sweep(ctx)
}

// listening returns the running sandboxes among rows whose agents the
// node knows to listen without connecting to them (node.AgentListeners),
// whose reachability the sweep need not probe: a probe wakes an idle
// sandbox, and at a thousand of them the probes were most of what idle
// sandboxes cost the host. A sandbox left out is probed; none are left
// out when the node cannot tell.
func (s *sweeper) listening(ctx context.Context, rows []sandbox.Sandbox) map[string]bool {
	al, ok := s.opts.Node.(node.AgentListeners)
	if !ok {
		return nil
	}
	var ids []string
	for _, sb := range rows {
		if sb.Status == sandbox.StatusRunning {
			ids = append(ids, sb.ID)
		}
	}
	set, err := al.AgentsListening(ctx, ids)
	if err != nil {
		s.log.Warn("sweep: list the agents that listen (every one is probed instead)", "err", err)
		return nil
	}
	return set
}

// idleTimeouts returns the idle timeout of a tenant's sandboxes (the
// daemon's for an operator's, or when the tenant's cannot be read),
// reading each tenant once for the sweep.
func (s *sweeper) idleTimeouts(ctx context.Context) func(tenant string) time.Duration {
	seen := map[string]time.Duration{}
	return func(tenant string) time.Duration {
		if d, ok := seen[tenant]; ok {
			return d
		}
		d := s.opts.IdleTimeout
		if _, lim, err := s.adm.tenantLimits(ctx, tenant); err == nil {
			d = lim.IdleTimeout
		}
		seen[tenant] = d
		return d
	}
}

// reachable reports whether running sandbox sb's agent can be connected
// to; one that cannot (node.ErrUnreachable) is stopped on the spot, so
// that its status says so and the next call starts it again rather than
// fail. A dial that fails otherwise (a full backlog, a memory checkpoint
// taking longer than the probe) proves nothing and counts as reachable.
func (s *sweeper) reachable(ctx context.Context, sb sandbox.Sandbox) bool {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := s.opts.Node.Dial(pctx, sb.ID)
	if err == nil {
		conn.Close()
		return true
	}
	if !errors.Is(err, node.ErrUnreachable) {
		return true
	}
	s.run.stopUnreachable(ctx, sb, err)
	return false
}

// probeTimeout bounds the sweep's dial of one sandbox's agent.
const probeTimeout = time.Second

// probeGap is the least time between two of the sweep's probes of agents.
// A probe wakes an idle sandbox (a few ms of its CPU under gVisor): a
// thousand at once kept every call on the host waiting for seconds.
const probeGap = 10 * time.Millisecond

// probePacer returns what the sweep calls before each probe of an agent
// among rows (those running and not in listening): it waits probeGap
// after the previous probe, or less when that would spread the probes
// over more than half a SweepInterval, and reports false when ctx ends
// first.
func (s *sweeper) probePacer(rows []sandbox.Sandbox, listening map[string]bool) func(context.Context) bool {
	running := 0
	for _, sb := range rows {
		if sb.Status == sandbox.StatusRunning && !listening[sb.ID] {
			running++
		}
	}
	gap := min(probeGap, s.opts.SweepInterval/2/time.Duration(max(running, 1)))
	var last time.Time
	return func(ctx context.Context) bool {
		if wait := time.Until(last.Add(gap)); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
		last = time.Now()
		return true
	}
}

// staleCreate is how long after its last change a row still creating is
// taken for a create that failed and was not undone (undoCreate gave up):
// far longer than any start, queue included, may take.
const staleCreate = 10 * time.Minute

// staleCreatedReason is why a sandbox whose create failed and whose row
// the sweep removed is gone.
const staleCreatedReason = "its create failed and was not finished; nothing of it was kept"

// dropStaleCreate removes sb, a row left creating by a create that failed
// (see staleCreate), under its lock, unless it changed since the sweep
// listed it.
func (s *sweeper) dropStaleCreate(ctx context.Context, sb sandbox.Sandbox) {
	unlock := s.locks.lock(sandbox.Ref(sb.Tenant, sb.Name))
	defer unlock()
	cur, err := s.opts.Store.Sandboxes().ByID(ctx, sb.ID)
	if err != nil || cur.Status != sandbox.StatusCreating || !cur.UpdatedAt.Equal(sb.UpdatedAt) {
		return
	}
	s.log.Warn("removing a sandbox whose create failed and was not undone", "sandbox", sb.Name, "id", sb.ID, "since", sb.UpdatedAt)
	if err := s.run.destroy(ctx, cur, staleCreatedReason); err != nil {
		s.log.Error("remove a failed create", "sandbox", sb.Name, "err", err)
	}
}

// reap destroys tenant's sandbox called name if it is still there and its
// TTL has passed: the platform's own destroy, which nothing asks for.
func (s *sweeper) reap(ctx context.Context, tenant, name string) error {
	unlock := s.locks.lock(sandbox.Ref(tenant, name))
	defer unlock()
	sb, err := s.opts.Store.Sandboxes().Get(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) || err == nil && (sb.ExpiresAt.IsZero() || s.now().Before(sb.ExpiresAt)) {
		return nil // destroyed, or renamed by a claim, since the sweep listed it
	}
	if err != nil {
		return s.internal("get sandbox", err)
	}
	return s.run.destroy(ctx, sb, fmt.Sprintf("reaped: its ttl ended at %s", sb.ExpiresAt.UTC().Format(time.RFC3339)))
}

// sleepIdle puts sb to sleep when it is running and idle for idle, its
// tenant's idle timeout (see idleTimeouts). Its idle clock
// starts no earlier than its row's CreatedAt: a warm-pool member that a
// control plane claimed has a row made at the claim, while this node's
// lease of it dates from the member's start, which may be long before.
func (s *sweeper) sleepIdle(ctx context.Context, sb sandbox.Sandbox, idle time.Duration) {
	if sb.Status != sandbox.StatusRunning || s.now().Sub(sb.CreatedAt) < idle || !s.leases.idle(sb.ID, s.now(), idle) {
		return
	}
	if _, err := s.sandboxes.sleep(ctx, sb, fmt.Sprintf("idle for %s", idle)); err != nil {
		s.log.Error("sleep idle sandbox", "sandbox", sb.Name, "err", err)
	}
}
