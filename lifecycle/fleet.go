package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Fleet places sandboxes on the nodes of a fleet (package kube: as Pods
// that kube-scheduler binds to hearth nodes). A control plane's create
// admits the sandbox and writes its row, naming the control plane as its
// node and creating; Place then has the fleet choose a node, which takes
// the row over (Sandboxes.StartPlaced) and runs the sandbox.
type Fleet interface {
	// Place has the fleet run sb, whose creating row exists, and returns
	// once a node runs it: its row then names that node and is running.
	// An error is a coded sandbox.Error (budget_exceeded when the fleet's
	// quota refuses it, unavailable when no node can run it); the caller
	// then undoes the create, and Unplace removes what Place left.
	Place(ctx context.Context, sb sandbox.Sandbox) error
	// Bind records sb, which its node (sb.Node) already runs, in the
	// fleet (its Pod, bound to that node), without waiting for the node
	// to act on it: a warm-pool member the control plane claimed. An
	// error is coded, as Place's.
	Bind(ctx context.Context, sb sandbox.Sandbox) error
	// Unplace removes what stands for sb in the fleet (its Pod); what is
	// gone already is no error.
	Unplace(ctx context.Context, sb sandbox.Sandbox) error
	// Open says whether node takes new sandboxes (not cordoned): a claim
	// of its warm pool is a placement too.
	Open(ctx context.Context, node string) bool
	// Cordon stops (on) or lets again (off) the fleet place sandboxes on
	// node; not_found when the fleet has no such node.
	Cordon(ctx context.Context, node string, on bool) error
}

// poolTopic is the change notices' topic of warm-pool claims made by a
// control plane: the payload is "NODE ID", the node whose member was
// claimed, which refills its pool once sandbox ID is quiet, as after a
// claim of its own.
const poolTopic = "pool.claimed"

// claimable is the warm-pool members a create may claim: this node's,
// or, on a control plane, those of every node that is up and open.
func (s *Pool) claimable(ctx context.Context) ([]sandbox.Sandbox, error) {
	if s.opts.Fleet == nil {
		return s.members(ctx)
	}
	rows, err := s.opts.Store.Sandboxes().List(ctx, store.Filter{Tenant: poolTenant, Owner: poolOwner})
	return slices.DeleteFunc(rows, func(sb sandbox.Sandbox) bool {
		return s.opts.NodeDown != nil && s.opts.NodeDown(ctx, sb.Node) != "" || !s.opts.Fleet.Open(ctx, sb.Node)
	}), err
}

// bindClaim finishes a control plane's claim of member m, whose row is
// now claimed, the caller's sandbox: its Pod is bound to m's node, and
// that node is told to refill. When the fleet refuses the Pod (the
// tenant's quota), m's row is put back as it was, a member again.
func (s *Pool) bindClaim(ctx context.Context, m, claimed sandbox.Sandbox) (sandbox.Sandbox, bool, error) {
	if err := s.opts.Fleet.Bind(ctx, claimed); err != nil {
		if rerr := s.opts.Store.Sandboxes().Update(ctx, m); rerr != nil {
			s.log.Error("put back a warm-pool member whose claim the fleet refused", "member", m.Name, "id", m.ID, "err", rerr)
		}
		return sandbox.Sandbox{}, false, err
	}
	// The notice is sent after the answer, not before it: a node that
	// misses it refills at its next sweep anyway.
	go func() {
		nctx, cancel := detached(ctx)
		defer cancel()
		if err := s.opts.Store.Changes().Notify(nctx, poolTopic, m.Node+" "+claimed.ID); err != nil {
			s.log.Warn("tell a node its warm-pool member was claimed; it refills at its next sweep", "node", m.Node, "err", err)
		}
	}()
	s.log.Info("sandbox created", "sandbox", claimed.Name, "id", claimed.ID, "tenant", claimed.Tenant, "owner", claimed.Owner, "node", claimed.Node, "from", "warm pool", "member", m.Name)
	return claimed, true, nil
}

// watchClaims refills this node's pool when a control plane claimed one
// of its members (or, after the store's notices were lost, maybe did),
// until ctx ends.
func (s *Pool) watchClaims(ctx context.Context) {
	claims, err := s.opts.Store.Changes().Listen(ctx, poolTopic)
	if err != nil {
		s.log.Error("warm-pool claims made by a control plane are refilled only at the next sweep", "err", err)
		return
	}
	for notice := range claims {
		node, id, _ := strings.Cut(notice, " ")
		if node != "" && node != s.opts.NodeName {
			continue
		}
		if id != "" {
			s.mu.Lock()
			s.claimed = id // the refill waits for its first calls
			s.mu.Unlock()
		}
		s.refillSoon()
	}
}

// Settled returns once sandbox id has had no call and no command running
// for a moment, at most a while after it was called, or when ctx ends:
// the quiet a claim's refill waits for (refillQuiet, refillWaitMax). A
// node reports the Pod of a sandbox a control plane claimed running only
// then, so that the API server's work on that report is not done beside
// the agent's first commands.
func (s *Pool) Settled(ctx context.Context, id string) {
	s.mu.Lock()
	quiet, waitMax := s.quiet, s.waitMax
	s.mu.Unlock()
	s.waitQuiet(ctx, id, quiet, waitMax)
}

// place is launch's end on a control plane: the fleet runs sb, whose row
// exists, and the result is its row as the node that runs it left it.
// On error the create is undone, here and in the fleet.
func (s *Sandboxes) place(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, error) {
	err := s.opts.Fleet.Place(ctx, sb)
	dctx, cancel := detached(ctx)
	defer cancel()
	if err == nil {
		placed, gerr := s.opts.Store.Sandboxes().Get(dctx, sb.Tenant, sb.Name)
		if gerr == nil && placed.ID == sb.ID {
			s.log.Info("sandbox created", "sandbox", sb.Name, "id", sb.ID, "tenant", sb.Tenant, "owner", sb.Owner, "node", placed.Node)
			return placed, nil
		}
		err = sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q went away while it was being created", sb.Name).
			WithHint("retry the create")
	}
	return s.run.undoPlaced(dctx, sb, err)
}

// undoPlaced undoes the create of sb, whose placement on a node failed
// with err (the fleet's deadline, a lost watch, the caller gone), unless
// the node took sb's row over first: that node's sandbox is then the
// result when it runs already (the create succeeded, if late), and an
// unavailable error naming the node while it is still starting there.
func (s *runner) undoPlaced(ctx context.Context, sb sandbox.Sandbox, err error) (sandbox.Sandbox, error) {
	row, taken := s.undoCreate(ctx, sb)
	switch {
	case !taken:
		return sandbox.Sandbox{}, err
	case row.Status == sandbox.StatusRunning:
		s.log.Info("sandbox created", "sandbox", row.Name, "id", row.ID, "tenant", row.Tenant, "owner", row.Owner, "node", row.Node, "late", err)
		return row, nil
	}
	return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q is still starting on node %s (%v)", sb.Name, row.Node, err).
		WithHint("get the sandbox to see when it runs, or destroy it if it is no longer wanted").With("node", row.Node)
}

// unplace tells the fleet (on a control plane) and the daemon's Released
// hook (on a node) that sb is released.
func (s *runner) unplace(ctx context.Context, sb sandbox.Sandbox) {
	if s.opts.Fleet != nil {
		if err := s.opts.Fleet.Unplace(ctx, sb); err != nil {
			s.log.Error("remove a released sandbox from the fleet", "sandbox", sb.Name, "id", sb.ID, "err", err)
		}
	}
	if s.opts.Released != nil {
		s.opts.Released(ctx, sb)
	}
}

// StartPlaced has this node take over and start the sandbox of tenant
// and name whose id is id, which a control plane created and the fleet
// placed here (see Fleet), and returns its row, running. The row must be
// creating (it then names this node from now on), or this node's already
// (a repeated call: the row as it is). A row that is not there, has
// another id, or is another node's running sandbox is not_found or
// failed_precondition; a start that fails undoes the create, and is
// unavailable.
func (s *Sandboxes) StartPlaced(ctx context.Context, tenant, name, id string) (sandbox.Sandbox, error) {
	unlock := s.locks.lock(sandbox.Ref(tenant, name))
	defer unlock()
	sb, took, err := s.run.takeOver(ctx, tenant, name, id)
	if err != nil || !took {
		return sb, err
	}
	// A fork its checkpoint's node sent here runs on the root it sent,
	// and resumes from the memory image it sent, if it sent one.
	root, reason := imageSource(sb), "created"
	mark, moved := movingToNode(sb.Reason, s.opts.NodeName)
	if moved {
		root, reason = node.Source{Received: true}, cmp.Or(mark.then, reason)
		defer s.forkMemory.release(ctx, sb.ID, mark)
	}
	sb, err = s.startNew(ctx, sb, root, mark.memory, reason)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	s.log.Info("placed sandbox started", "sandbox", sb.Name, "id", sb.ID, "tenant", sb.Tenant)
	return sb, nil
}

// takeOver is StartPlaced's first half: the row of tenant's sandbox name
// (id id), made this node's while it is creating on the daemon that
// placed it (Sandboxes.Swap: that daemon may be undoing the create at the
// same moment, and then one of the two wins) and took true, or as it is
// when this node has it already.
func (s *runner) takeOver(ctx context.Context, tenant, name, id string) (sb sandbox.Sandbox, took bool, err error) {
	for {
		sb, err = s.opts.Store.Sandboxes().Get(ctx, tenant, name)
		switch {
		case errors.Is(err, store.ErrNotFound) || err == nil && sb.ID != id:
			return sandbox.Sandbox{}, false, sandbox.Errorf(sandbox.CodeNotFound, "sandbox %s/%s (id %s) is not in the store", tenant, name, id).
				WithHint("its create was undone; create it again")
		case err != nil:
			return sandbox.Sandbox{}, false, s.internal("get sandbox", err)
		case s.mine(sb):
			return sb, false, nil
		case sb.Status != sandbox.StatusCreating:
			return sandbox.Sandbox{}, false, sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %s/%s runs on node %s", tenant, name, sb.Node).
				With("node", sb.Node)
		}
		caps := s.opts.Node.Capabilities()
		mine := sb
		mine.Node, mine.Runtime = s.opts.NodeName, caps.Runtime
		mine.Capabilities = capabilities(caps, sb.ImageDigest)
		mine.UpdatedAt = s.now().UTC()
		ok, err := s.opts.Store.Sandboxes().Swap(ctx, sb, mine)
		if err != nil {
			return sandbox.Sandbox{}, false, s.internal("take over sandbox row", err)
		}
		if ok {
			return mine, true, nil
		}
		// The row changed since it was read (its create undone): read it
		// again to say what it is now.
	}
}

// capabilities are what a sandbox made from the image version digest
// offers on a node of caps.
func capabilities(caps node.Capabilities, digest string) []string {
	out := []string{
		sandbox.CapExec, sandbox.CapExecStdin, sandbox.CapExecTimeout, sandbox.CapFiles,
		sandbox.CapIsolation + caps.Isolation, sandbox.CapRuntime + caps.Runtime,
	}
	if digest != "" {
		out = append(out, sandbox.CapImage+digest)
	}
	return out
}
