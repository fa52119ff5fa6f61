package lifecycle

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// The warm pool keeps, per size preset (Options.WarmPool), sandboxes of the
// default image created and started ahead of time, so that a create of
// that image and size is a claim: one row update, no runtime start.
//
// Members are ordinary rows owned by the pool principal (tenant "system",
// owner "pool"), named "pool-…", with no expiry. They count against no
// tenant, appear in no list, are not_found to every caller, never sleep and
// are never reaped; Recover adopts them like any sandbox. A claim rewrites
// the member's row in one Sandboxes().Update (name, tenant, owner, times,
// reason): a daemon killed before it leaves a member, after it the
// caller's sandbox. Nothing distinguishes a claimed member from a fresh
// sandbox: it ran one `ls` (see warmUp), which leaves nothing behind; its
// root is its image's; and its hostname and environment name no sandbox
// (see runner.start).

// The refill that follows a claim waits, first, until the claimed sandbox
// has been quiet (no call, no command) for refillQuiet, at most
// refillWaitMax after the claim: an agent that claims a sandbox runs its
// first commands at once, and a refill beside them (a row, a snapshot, a
// runtime start on the same cores and disk) slowed the first under runsc
// from ≈17 to ≈22 ms; between two of an agent's turns it costs nobody.
const (
	refillQuiet   = 50 * time.Millisecond
	refillWaitMax = 2 * time.Second
)

// poolTenant and poolOwner own the warm pool's members until a claim.
const (
	poolTenant = sandbox.SystemTenant
	poolOwner  = "pool"
)

// poolPrincipal is who creates the warm pool's members.
func poolPrincipal() sandbox.Principal {
	return sandbox.Principal{Tenant: poolTenant, Agent: poolOwner, Role: sandbox.RoleAgent}
}

// isPoolMember reports whether sb is an unclaimed warm-pool member.
func isPoolMember(sb sandbox.Sandbox) bool { return sb.Tenant == poolTenant && sb.Owner == poolOwner }

// Pool is the warm pool (see above): it claims a member for a create, and
// refills and tends itself while Service.Run runs. It is safe for
// concurrent use.
type Pool struct {
	*core
	run *runner
	// sandboxes creates the members, as any sandbox is created.
	sandboxes *Sandboxes
	// mu serializes claims, so that two creates never take one member.
	mu sync.Mutex
	// kick wakes the refiller Run started; it holds at most one wake-up.
	kick chan struct{}
	// claimed is the id of the sandbox claimed last, whose quiet the next
	// refill waits for (see waitQuiet), or "". quiet and waitMax are
	// refillQuiet and refillWaitMax, which tests change. mu guards them.
	claimed        string
	quiet, waitMax time.Duration
}

// newPool returns the warm pool of c's options, whose members run and
// sbs creates.
func newPool(c *core, run *runner, sbs *Sandboxes) *Pool {
	return &Pool{core: c, run: run, sandboxes: sbs, kick: make(chan struct{}, 1), quiet: refillQuiet, waitMax: refillWaitMax}
}

// claim makes a running warm-pool member of req's size p's sandbox called
// req.Name, with req's labels, expiring after ttl, and reports false when
// there is none. The caller holds the name's lock and has checked that the
// name is free.
func (s *Pool) claim(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest, ttl time.Duration) (sandbox.Sandbox, bool, error) {
	size := req.Size
	if s.opts.WarmPool[size] <= 0 && s.opts.Fleet == nil {
		return sandbox.Sandbox{}, false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	members, err := s.claimable(ctx)
	if err != nil {
		return sandbox.Sandbox{}, false, s.internal("list pool members", err)
	}
	for _, m := range members {
		if m.Size != size || m.Image != s.opts.DefaultImage || m.Status != sandbox.StatusRunning {
			continue
		}
		sb, ok, err := s.claimMember(ctx, p, m, req, ttl)
		if err != nil || ok {
			return sb, ok, err
		}
	}
	return sandbox.Sandbox{}, false, nil
}

// claimMember rewrites member m's row, running as listed, into p's
// sandbox req.Name, under m's lock, unless the sweep removed or stopped m,
// or another daemon claimed it, since it was listed.
func (s *Pool) claimMember(ctx context.Context, p sandbox.Principal, m sandbox.Sandbox, req sandbox.CreateRequest, ttl time.Duration) (sandbox.Sandbox, bool, error) {
	unlock := s.locks.lock(sandbox.Ref(m.Tenant, m.Name))
	defer unlock()
	s.crash("claim: member picked")
	sb := m
	now := s.now().UTC()
	sb.Name, sb.Tenant, sb.Owner, sb.Labels = req.Name, p.Home(), p.Agent, req.Labels
	sb.CreatedAt, sb.UpdatedAt, sb.ExpiresAt = now, now, now.Add(ttl)
	sb.Status, sb.Reason = sandbox.StatusRunning, "created (from the warm pool)"
	// The commit point: one row update turns the member into the caller's,
	// made only while the row is still the member as listed (the lock is
	// this daemon's own): of control planes that claim one member at once,
	// one wins, and the others try their next.
	if ok, err := s.opts.Store.Sandboxes().Swap(ctx, m, sb); err != nil {
		return sandbox.Sandbox{}, false, s.internal("claim pool member", err)
	} else if !ok {
		return sandbox.Sandbox{}, false, nil
	}
	s.crash("claim: row rewritten")
	if s.opts.Fleet != nil {
		return s.bindClaim(ctx, m, sb)
	}
	s.leases.touch(sb.ID, s.now())
	s.claimed = sb.ID // the caller holds s.mu
	s.refillSoon()
	s.log.Info("sandbox created", "sandbox", sb.Name, "id", sb.ID, "tenant", sb.Tenant, "owner", sb.Owner, "runtime", sb.Runtime, "from", "warm pool", "member", m.Name)
	return sb, true, nil
}

// members returns the warm pool's members, oldest first.
func (s *Pool) members(ctx context.Context) ([]sandbox.Sandbox, error) {
	rows, err := s.opts.Store.Sandboxes().List(ctx, store.Filter{Tenant: poolTenant, Owner: poolOwner})
	return slices.DeleteFunc(rows, func(sb sandbox.Sandbox) bool { return !s.mine(sb) }), err
}

// refillSoon wakes the refiller without waiting for it.
func (s *Pool) refillSoon() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// refiller refills the pool each time it is kicked, until ctx ends. It is
// the only caller of refill while Run runs, so refills never overlap.
func (s *Pool) refiller(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			s.mu.Lock()
			id, quiet, waitMax := s.claimed, s.quiet, s.waitMax
			s.claimed = ""
			s.mu.Unlock()
			if id != "" {
				s.waitQuiet(ctx, id, quiet, waitMax)
			}
			s.refill(ctx)
		}
	}
}

// waitQuiet returns once sandbox id has had no call and no command running
// for quiet, waitMax after it was called, or when ctx ends. It watches the
// leases' activity count, not the clock they keep.
func (s *Pool) waitQuiet(ctx context.Context, id string, quiet, waitMax time.Duration) {
	limit := time.NewTimer(waitMax)
	defer limit.Stop()
	tick := time.NewTicker(quiet / 5)
	defer tick.Stop()
	busy, calls := s.leases.activity(id)
	since := time.Now()
	for busy > 0 || time.Since(since) < quiet {
		select {
		case <-ctx.Done():
			return
		case <-limit.C:
			return
		case <-tick.C:
		}
		b, c := s.leases.activity(id)
		if b > 0 || c != calls {
			since = time.Now()
		}
		busy, calls = b, c
	}
}

// refill creates members until each size has its count, and removes those
// that died or that no size wants any more. It creates none under memory
// pressure. A failure is logged; the next sweep retries.
func (s *Pool) refill(ctx context.Context) {
	members, err := s.members(ctx)
	if err != nil {
		s.log.Error("warm pool: list members", "err", err)
		return
	}
	have := map[string]int{}
	for _, m := range members {
		alive := m.Status == sandbox.StatusRunning || m.Status == sandbox.StatusCreating
		if !alive || have[m.Size] >= s.opts.WarmPool[m.Size] || m.Image != s.opts.DefaultImage {
			s.removeMember(ctx, m, "not wanted")
			continue
		}
		have[m.Size]++
	}
	if s.underPressure(ctx) {
		return
	}
	for size, want := range s.opts.WarmPool {
		for ; have[size] < want; have[size]++ {
			if ctx.Err() != nil {
				return
			}
			req := sandbox.CreateRequest{Name: "pool-" + newID()[1:13], Size: size}
			sb, _, err := s.sandboxes.create(ctx, poolPrincipal(), req, origin{}, "warm pool member")
			if err != nil {
				s.log.Error("warm pool: create member; the next sweep retries", "size", size, "err", err)
				return
			}
			s.warmUp(ctx, sb)
			s.log.Info("warm pool member ready", "size", size)
		}
	}
}

// tend, run by each sweep, removes members the runtime lost, removes
// one member when memory is short, and refills the pool otherwise.
func (s *Pool) tend(ctx context.Context, members []sandbox.Sandbox) {
	pressure := s.underPressure(ctx)
	for _, m := range members {
		if m.Status != sandbox.StatusRunning {
			continue
		}
		if pressure {
			s.removeMember(ctx, m, "memory pressure")
			pressure = false // one per sweep: memory comes back slowly
			continue
		}
		if st, err := s.opts.Node.State(ctx, m.ID); errors.Is(err, node.ErrNotFound) || err == nil && st.Status != node.StatusRunning {
			s.removeMember(ctx, m, "no longer running")
		}
	}
	if len(s.opts.WarmPool) > 0 || len(members) > 0 {
		s.refillSoon()
	}
}

// removeMember releases the pool member m, unless a claim, this daemon's
// or a control plane's, took it since it was listed.
func (s *Pool) removeMember(ctx context.Context, m sandbox.Sandbox, why string) {
	cur, unlock, err := s.current(ctx, m)
	if err != nil {
		return
	}
	defer unlock()
	if !isPoolMember(cur) {
		return
	}
	s.crash("pool: member to remove read")
	if cur.Status == sandbox.StatusRunning {
		// A control plane claims a running member without this node's
		// lock: the member leaves the pool first, by the store's
		// compare-and-swap, so that a claim made since it was read keeps
		// its sandbox. A member whose release fails is removed again at
		// the next refill, which removes members that do not run.
		leaving := cur
		leaving.Status, leaving.Reason, leaving.UpdatedAt = sandbox.StatusStopped, "leaving the warm pool: "+why, s.now().UTC()
		if ok, err := s.opts.Store.Sandboxes().Swap(ctx, cur, leaving); err != nil || !ok {
			if err != nil {
				s.log.Error("warm pool: mark a member leaving; the next sweep retries", "member", m.Name, "err", err)
			}
			return
		}
		cur = leaving
	}
	if err := s.run.release(ctx, cur); err != nil {
		s.log.Error("warm pool: remove member", "member", m.Name, "err", err)
		return
	}
	s.log.Info("warm pool member removed", "member", m.Name, "size", m.Size, "why", why)
}

// warmUp runs `ls -d /` through the shell once in a new member, so that the
// claimant's first command does not pay for what nearly every first command
// loads (under gVisor the first exec in a fresh sandbox costs about twice a
// later one): the shell, the dynamic loader, libc and the locale. It leaves
// nothing behind: no file, no process.
func (s *Pool) warmUp(ctx context.Context, sb sandbox.Sandbox) {
	ag := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return s.opts.Node.Dial(ctx, sb.ID) })
	if _, err := ag.Exec(ctx, sandbox.ExecRequest{Shell: "ls -d / >/dev/null"}, nil, io.Discard, io.Discard); err != nil {
		s.log.Warn("warm pool: warm-up exec", "sandbox", sb.Name, "err", err)
	}
}

// Status reports the warm pool per size preset, sizes in name order: what it
// aims at and what it has. Only an operator may see it, with a token not
// restricted to a name prefix; anyone else gets permission_denied (the
// pool belongs to no tenant).
func (s *Pool) Status(ctx context.Context, p sandbox.Principal) ([]sandbox.PoolSize, error) {
	if err := s.access(p).fleetwide("see the warm pool"); err != nil {
		return nil, err
	}
	members, err := s.members(ctx)
	if err != nil {
		return nil, s.internal("list pool members", err)
	}
	bySize := map[string]*sandbox.PoolSize{}
	at := func(size string) *sandbox.PoolSize {
		if bySize[size] == nil {
			bySize[size] = &sandbox.PoolSize{Size: size, Image: s.opts.DefaultImage, Target: s.opts.WarmPool[size]}
		}
		return bySize[size]
	}
	for size, n := range s.opts.WarmPool {
		if n > 0 {
			at(size)
		}
	}
	for _, m := range members {
		if m.Image != s.opts.DefaultImage {
			continue
		}
		switch m.Status {
		case sandbox.StatusRunning:
			at(m.Size).Ready++
		case sandbox.StatusCreating:
			at(m.Size).Starting++
		}
	}
	out := make([]sandbox.PoolSize, 0, len(bySize))
	for _, ps := range bySize {
		out = append(out, *ps)
	}
	slices.SortFunc(out, func(a, b sandbox.PoolSize) int { return strings.Compare(a.Size, b.Size) })
	return out, nil
}
