package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/tracing"
)

// Sandboxes creates, finds, changes, sleeps, wakes and destroys sandboxes.
// It is safe for concurrent use.
type Sandboxes struct {
	*core
	run    *runner
	adm    *admission
	egress *egress
	usage  *usageCache
	// pool is where a create claims a warm sandbox from (Pool).
	pool claimer
	// images is the catalog a create resolves its image in, and collects
	// after a destroy.
	images *Images
	// forkMemory moves the memory images of forks between nodes.
	forkMemory *forkMemory
}

// claimer hands a create a sandbox started ahead of time (Pool.claim).
type claimer interface {
	// claim makes a warm sandbox p's, named and labelled as req asks,
	// expiring after ttl, and reports false when there is none. The
	// caller holds the name's lock and has checked that the name is free.
	claim(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest, ttl time.Duration) (sandbox.Sandbox, bool, error)
}

// Runtime names the runtime that isolates the sandboxes.
func (s *Sandboxes) Runtime() string { return s.opts.Node.Capabilities().Runtime }

// Create makes a sandbox for p in p's tenant (the system tenant for an
// operator), or returns p's existing sandbox of the same name with created
// false (resume, not duplicate). Names are unique within a tenant: another
// tenant's sandbox of the same name is no conflict and stays unseen. A
// name held in p's tenant by a sandbox p cannot see is already_exists.
// Errors: invalid_argument for a bad name, size or ttl; not_found for an
// image that is not one (see access.image); permission_denied for a name
// outside p's name prefix; unavailable when the runtime fails to start it
// (and then nothing is left behind).
func (s *Sandboxes) Create(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest) (sb sandbox.Sandbox, created bool, err error) {
	ctx, span := tracer.Start(ctx, "lifecycle.create")
	defer func() { tracing.End(span, err) }()
	return s.create(ctx, p, req, origin{}, "created")
}

// origin is where a create's root comes from when it is not the image
// the request names: a checkpoint (a fork), with the image version of
// the sandbox it was taken of.
type origin struct {
	// checkpoint is the checkpoint a fork's root starts as, and of the
	// id of the sandbox it was taken of.
	checkpoint, of string
	// memory: the checkpoint holds its processes' memory, and the fork
	// resumes them (see Checkpoints.Fork).
	memory bool
	image  *sandbox.Image
}

// imageOf is the image version sb was made from, as a create's origin.
func imageOf(sb sandbox.Sandbox) *sandbox.Image {
	return &sandbox.Image{Name: sb.Image, Digest: sb.ImageDigest, Layers: []string{imageSource(sb).Image}, Config: sb.ImageConfig}
}

// create makes the sandbox of Create, its root a writable snapshot of
// checkpoint from.checkpoint (a fork, with from.image) or, when that is
// empty, of its image; reason is the status reason once it runs.
func (s *Sandboxes) create(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest, from origin, reason string) (sb sandbox.Sandbox, created bool, err error) {
	s.images.catalog.RLock() // the image version stays until the row names it
	defer s.images.catalog.RUnlock()
	spec, err := s.checkCreate(ctx, p, req, from.image)
	if err != nil {
		return sandbox.Sandbox{}, false, err
	}
	req = spec.req
	tenant := p.Home()
	unlock := s.locks.lock(sandbox.Ref(tenant, req.Name))
	defer unlock()
	// Only p's own tenant is looked in: whether another tenant has the
	// name changes nothing, and shows nowhere.
	if existing, err := s.opts.Store.Sandboxes().Get(ctx, tenant, req.Name); err == nil {
		if !s.access(p).sees(existing) {
			return sandbox.Sandbox{}, false, nameTaken(req.Name)
		}
		return existing, false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return sandbox.Sandbox{}, false, s.internal("get sandbox", err)
	}
	admitted := func() {}
	if spec.limited {
		if spec.ttl, admitted, err = s.adm.admit(ctx, p, req.Size, spec.res, spec.ttl); err != nil {
			return sandbox.Sandbox{}, false, err
		}
		defer admitted()
	}
	// Pool members have no network: only a create that asks for none
	// can claim one.
	if from.checkpoint == "" && req.Image == s.opts.DefaultImage && p != poolPrincipal() && req.Network == sandbox.NetworkNone && req.Egress == nil {
		sb, ok, err := s.pool.claim(ctx, p, req, spec.ttl)
		if ok {
			s.run.forgetGone(ctx, sb)
		}
		if err != nil || ok {
			return sb, ok, err
		}
	}
	sb, err = s.launch(ctx, p, spec, from, reason, admitted)
	return sb, err == nil, err
}

// createSpec is a create request checked and completed by checkCreate.
type createSpec struct {
	// req has its name attributed, and its image, size, labels and
	// network set.
	req sandbox.CreateRequest
	// image is the version of req.Image the sandbox is made from.
	image  sandbox.Image
	res    sandbox.Resources
	egress sandbox.EgressPolicy
	// ttl is the sandbox's life; for a limited create, what it asked for
	// (0: the default), which admission decides.
	ttl time.Duration
	// limited: the guardrails apply, and the name carries the creator.
	limited bool
}

// checkCreate validates p's create request req and fills in its defaults.
// The image is img when it is not nil (a fork's), else req.Image
// resolved in p's scope (access.image).
func (s *Sandboxes) checkCreate(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest, img *sandbox.Image) (createSpec, error) {
	spec := createSpec{limited: p != poolPrincipal() && p.Role != sandbox.RoleOperator}
	var err error
	if req.Name == "" {
		req.Name = "sb-" + newID()[1:9]
	}
	asked := req.Name
	if spec.limited {
		if err := ownName(p, req.Name); err != nil {
			return spec, err
		}
		if req.Name, err = sandbox.AttributedName(p.Agent, req.Name); err != nil {
			return spec, err
		}
	} else if err := sandbox.ValidateName(req.Name); err != nil {
		return spec, err
	}
	if !p.InScope(req.Name) {
		return spec, p.OutOfScope(asked)
	}
	if img != nil {
		spec.image = *img
	} else if spec.image, err = s.access(p).image(ctx, req.Image); err != nil {
		return spec, err
	}
	req.Image = spec.image.Name
	if err := sandbox.ValidateLabels(req.Labels); err != nil {
		return spec, err
	}
	if req.Labels == nil {
		req.Labels = []string{}
	}
	if req.Network, err = s.networkFor(ctx, p, spec.limited, req.Network); err != nil {
		return spec, err
	}
	if req.Egress != nil {
		spec.egress = *req.Egress
		tenant, err := s.egress.tenant(ctx, p.Tenant)
		if err != nil {
			return spec, err
		}
		if _, _, err := spec.egress.Effective(tenant); err != nil {
			return spec, err
		}
	}
	if req.Size == "" {
		req.Size = sandbox.DefaultSize
	}
	if spec.res, err = sandbox.LookupSize(req.Size); err != nil {
		return spec, err
	}
	spec.req = req
	spec.ttl, err = s.opts.ttlFor(spec.limited, time.Duration(req.TTL))
	return spec, err
}

// ttlFor is the life of a create that asked for ttl (0: the default),
// within the daemon's cap; a limited create's is admission's to decide.
func (o *Options) ttlFor(limited bool, ttl time.Duration) (time.Duration, error) {
	switch {
	case limited: // admit decides, with the tenant's cap
	case ttl < 0:
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "ttl %s is negative", ttl).WithHint("ask for a positive ttl such as 1h, or none for the default %s", o.DefaultTTL)
	case ttl > o.MaxTTL:
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "ttl %s is longer than the %s cap", ttl, o.MaxTTL).
			WithHint("ask for at most %s", o.MaxTTL).With("limit_seconds", int64(o.MaxTTL.Seconds())).With("requested_seconds", int64(ttl.Seconds()))
	case ttl == 0:
		ttl = o.DefaultTTL
	}
	return ttl, nil
}

func nameTaken(name string) error {
	return sandbox.Errorf(sandbox.CodeAlreadyExists, "sandbox name %q is taken", name).WithHint("choose another name")
}

// launch makes the new sandbox of spec for p in p's tenant: its row, its
// start on the node with its root from checkpoint from.checkpoint (or its
// image) and, with from.memory, its processes from that checkpoint's
// memory, its row running with reason. admitted is called once the row
// counts in the tenant's usage. The caller holds the name's lock.
func (s *Sandboxes) launch(ctx context.Context, p sandbox.Principal, spec createSpec, from origin, reason string, admitted func()) (sandbox.Sandbox, error) {
	req, caps, now := spec.req, s.opts.Node.Capabilities(), s.now().UTC()
	sb := sandbox.Sandbox{
		ID:           newID(),
		Name:         req.Name,
		Tenant:       p.Home(),
		Owner:        p.Agent,
		Image:        req.Image,
		ImageDigest:  spec.image.Digest,
		ImageKey:     spec.image.Key(),
		ImageConfig:  spec.image.Config,
		Size:         req.Size,
		Runtime:      caps.Runtime,
		Status:       sandbox.StatusCreating,
		Reason:       "create requested",
		CreatedAt:    now,
		UpdatedAt:    now,
		ExpiresAt:    now.Add(spec.ttl),
		Capabilities: capabilities(caps, spec.image.Digest),
		Resources:    spec.res,
		Labels:       req.Labels,
		PublicPorts:  []int{},
		Network:      req.Network,
		Egress:       spec.egress,
		Node:         s.opts.NodeName,
	}
	if p == poolPrincipal() {
		sb.ExpiresAt = time.Time{} // a member lives until claimed or shrunk
	}
	// The row goes first: a daemon killed from here on leaves a creating row
	// that Recover cleans up, never an untracked container or root.
	if err := s.opts.Store.Sandboxes().Create(ctx, sb); err != nil {
		if errors.Is(err, store.ErrExists) {
			return sandbox.Sandbox{}, nameTaken(req.Name)
		}
		return sandbox.Sandbox{}, s.internal("create sandbox row", err)
	}
	admitted() // the row now counts in the tenant's usage
	s.run.forgetGone(ctx, sb)
	s.crash("create: row inserted")
	if s.opts.Fleet != nil {
		return s.place(ctx, sb)
	}
	if from.checkpoint != "" {
		if placed, ok, err := s.forkElsewhere(ctx, sb, from, reason); ok {
			return placed, err
		}
	}
	root := imageSource(sb)
	root.Checkpoint = from.checkpoint
	memory := ""
	if from.memory {
		memory = from.checkpoint
	}
	sb, err := s.startNew(ctx, sb, root, memory, reason)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if s.opts.Bind != nil && p != poolPrincipal() {
		// Past the start, as its own steps: detached from the caller.
		ctx, cancel := detached(ctx)
		defer cancel()
		if err := s.opts.Bind(ctx, sb); err != nil {
			s.run.undoCreate(ctx, sb)
			return sandbox.Sandbox{}, err
		}
	}
	s.log.Info("sandbox created", "sandbox", sb.Name, "id", sb.ID, "tenant", sb.Tenant, "owner", sb.Owner, "runtime", sb.Runtime)
	return sb, nil
}

// startNew starts sb, a new sandbox whose creating row exists, on its
// root from root (its image fetched from another node first when this
// one lacks it: peerImages.fetch), and sets its row running with
// reason. With memory (a checkpoint's, for a fork) its processes resume
// from that checkpoint's memory image, and the reason says so; if they
// cannot, it starts afresh, and the reason says that. The start waits
// its turn in the heavy queue with the caller's deadline; from then on a
// caller that goes away must not leave half a sandbox, so the rest runs
// detached from it. Any failure undoes the create (see
// runner.undoCreate). The caller holds sb's name's lock.
func (s *Sandboxes) startNew(ctx context.Context, sb sandbox.Sandbox, root node.Source, memory, reason string) (sandbox.Sandbox, error) {
	if !root.Received && root.Checkpoint == "" {
		if err := s.images.peers.fetch(ctx, root.Image); err != nil {
			dctx, cancel := detached(ctx)
			defer cancel()
			s.run.undoCreate(dctx, sb)
			return sandbox.Sandbox{}, err
		}
	}
	release, err := s.slot(ctx, sb)
	ctx, cancel := detached(ctx)
	defer cancel()
	if err != nil {
		s.run.undoCreate(ctx, sb)
		return sandbox.Sandbox{}, err
	}
	if err = s.run.startSpec(ctx, sb, root, memory); err == nil && memory != "" {
		reason += " with its processes"
	} else if err != nil && memory != "" {
		s.log.Warn("a fork's processes could not resume: it starts afresh", "sandbox", sb.Name, "id", sb.ID, "checkpoint", memory, "err", err)
		reason += " (its processes started afresh: their memory could not be restored)"
		err = s.run.startSpec(ctx, sb, root, "")
	}
	release() // the next start need not wait for this one's rows
	if err != nil {
		s.run.undoCreate(ctx, sb)
		return sandbox.Sandbox{}, err
	}
	s.crash("create: started")
	running, err := s.run.setRunning(ctx, sb, reason)
	if err != nil {
		s.run.undoCreate(ctx, sb)
		return sandbox.Sandbox{}, err
	}
	return running, nil
}

// networkFor decides the network mode of a create that asked for mode:
// within the tenant's policy when limited, and one the driver offers.
func (s *Sandboxes) networkFor(ctx context.Context, p sandbox.Principal, limited bool, mode string) (string, error) {
	if err := sandbox.ValidateNetwork(mode); err != nil {
		return "", err
	}
	if limited {
		var err error
		if mode, err = s.adm.limitsOf(ctx, p.Tenant).NetworkFor(mode); err != nil {
			return "", err
		}
	}
	if mode == "" {
		mode = sandbox.NetworkNone
	}
	if mode == sandbox.NetworkEgress && !s.opts.Node.Capabilities().Egress {
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "this daemon's runtime offers no egress network").
			WithHint("create the sandbox with network %q, or run the daemon where it can set up networking (iptables, root)", sandbox.NetworkNone)
	}
	return mode, nil
}

// Get returns the sandbox ref names (a sandbox reference: NAME or
// TENANT/NAME, see sandbox.ParseRef) if p may see it, else not_found, the
// same whether it exists or not: another tenant's sandbox, another agent's,
// one outside p's name prefix, an unclaimed warm-pool member. A malformed
// reference is invalid_argument. Every verb on an existing sandbox finds
// it through access, as Get does.
func (s *Sandboxes) Get(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	return s.access(p).get(ctx, ref)
}

// Calls returns the audit events of the calls made on the sandbox ref
// names for p (see Get) that match f, oldest first: only those since the
// sandbox was created (a sandbox of the same name before it is another),
// of the callers whose events p may read (sandbox.Principal.ScopeAudit).
// f's OnTenant and OnName are ref's. An event is in the store once its
// recorder has flushed it (audit.FlushInterval).
func (s *Sandboxes) Calls(ctx context.Context, p sandbox.Principal, ref string, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	sb, err := s.Get(ctx, p, ref)
	if err != nil {
		return nil, err
	}
	f.OnTenant, f.OnName = sb.Tenant, sb.Name
	f, ok := p.ScopeAudit(f)
	if !ok {
		return []sandbox.AuditEvent{}, nil
	}
	if f.Since.Before(sb.CreatedAt) {
		f.Since = sb.CreatedAt
	}
	events, err := s.opts.Store.Audit().List(ctx, f)
	if err != nil {
		return nil, s.internal("list a sandbox's audit events", err)
	}
	return events, nil
}

// ListGone returns why the sandboxes p could see went (destroyed, reaped,
// a create undone), the newest first, for as long as the records are kept
// (GoneRetention): a gone sandbox is seen by whoever saw it (access.sees).
func (s *Sandboxes) ListGone(ctx context.Context, p sandbox.Principal) ([]sandbox.Gone, error) {
	tenant := p.Tenant
	if p.Role == sandbox.RoleOperator {
		tenant = ""
	}
	all, err := s.opts.Store.Gone().List(ctx, tenant)
	if err != nil {
		return nil, s.internal("list gone sandboxes", err)
	}
	a := s.access(p)
	return slices.DeleteFunc(all, func(g sandbox.Gone) bool {
		return !a.sees(sandbox.Sandbox{Tenant: g.Tenant, Owner: g.Owner, Name: g.Name})
	}), nil
}

// Describe is Get plus what the sandbox's root really holds on disk
// (DiskUsedBytes), measured at most two seconds ago. A sandbox at its disk limit says so in its status
// reason, since writes in it now fail with EDQUOT.
func (s *Sandboxes) Describe(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	sb, err := s.Get(ctx, p, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	used, err := s.usage.measure(ctx, s.opts.Node, sb.ID, s.now())
	if err != nil {
		return sb, nil // a sandbox still being created has no root yet
	}
	sb.DiskUsedBytes = used
	if limit := sb.Resources.DiskBytes; limit > 0 && used >= limit-limit/100 && !strings.HasPrefix(sb.Reason, "disk full") {
		reason := fmt.Sprintf("disk full: %d of %d bytes used; delete files or restore a checkpoint", used, limit)
		s.setStatus(ctx, sb, sb.Status, reason)
		sb.Reason = reason
	}
	return sb, nil
}

// usageTTL is how long Describe reuses a sandbox's measured disk usage:
// the measure writes out the layer filesystem (a btrfs commit), which a
// client that polls get must not pay on every call.
const usageTTL = 2 * time.Second

// usageCache holds the disk usage Describe measured last, by sandbox id.
type usageCache struct {
	mu sync.Mutex
	m  map[string]measured
}

type measured struct {
	bytes int64
	at    time.Time
}

// measure is the disk usage of sandbox id's root on n, measured at most
// usageTTL before now.
func (u *usageCache) measure(ctx context.Context, n node.Node, id string, now time.Time) (int64, error) {
	u.mu.Lock()
	m, ok := u.m[id]
	u.mu.Unlock()
	if ok && now.Sub(m.at) < usageTTL {
		return m.bytes, nil
	}
	bytes, err := n.Usage(ctx, id)
	if err != nil {
		return 0, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]measured{}
	}
	for k, old := range u.m {
		if now.Sub(old.at) >= usageTTL {
			delete(u.m, k) // gone stale, or its sandbox did
		}
	}
	u.m[id] = measured{bytes: bytes, at: now}
	return bytes, nil
}

// forget drops what measure measured of sandbox id, whose root changed
// all at once (a restore).
func (u *usageCache) forget(id string) {
	u.mu.Lock()
	delete(u.m, id)
	u.mu.Unlock()
}

// ownName refuses a name p gave that carries another identity's
// attribution prefix: p's sandboxes carry p's.
func ownName(p sandbox.Principal, name string) error {
	if own := sandbox.AttributionPrefix(p.Agent); strings.HasPrefix(name, "agent-") && !strings.HasPrefix(name, own) {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "sandbox name %q carries another identity's attribution prefix; yours is %q", name, own).
			WithHint("leave the prefix out: hearth adds %q to the names you choose", own)
	}
	return nil
}

// List returns the sandboxes p may see (access.sees), oldest first: an
// agent its own, a tenant admin its tenant's, an operator every tenant's
// but the warm pool's members; of those, only the names inside p's
// NamePrefix.
func (s *Sandboxes) List(ctx context.Context, p sandbox.Principal) ([]sandbox.Sandbox, error) {
	var f store.Filter
	switch p.Role {
	case sandbox.RoleOperator:
	case sandbox.RoleTenantAdmin:
		f.Tenant = p.Tenant
	default:
		f.Tenant, f.Owner = p.Tenant, p.Agent
	}
	list, err := s.opts.Store.Sandboxes().List(ctx, f)
	if err != nil {
		return nil, s.internal("list sandboxes", err)
	}
	a := s.access(p)
	out := []sandbox.Sandbox{}
	down := map[string]string{} // why each other node's sandboxes are unavailable; "" alive
	for _, sb := range list {
		if a.sees(sb) {
			out = append(out, s.onNode(ctx, sb, down))
		}
	}
	return out, nil
}

// onNode is sb as its node's state shows it: unavailable, with the
// reason, when another node runs it and that node is down (see
// Options.NodeDown; down caches the answers of one call).
func (s *Sandboxes) onNode(ctx context.Context, sb sandbox.Sandbox, down map[string]string) sandbox.Sandbox {
	if s.mine(sb) || s.opts.NodeDown == nil {
		return sb
	}
	why, ok := down[sb.Node]
	if !ok {
		why = s.opts.NodeDown(ctx, sb.Node)
		down[sb.Node] = why
	}
	if why != "" {
		sb.Status, sb.Reason = sandbox.StatusUnavailable, why
	}
	return sb
}

// NodeOf returns the node that runs the sandbox ref names when p may see
// it and another node runs it, "" otherwise: this node's sandbox, or none
// p sees (the call's own answer then says which). For the zero principal
// (a visitor without a token) ref is read as ConnectPublic reads it. The
// doors send a call on another node's sandbox to that node.
func (s *Sandboxes) NodeOf(ctx context.Context, p sandbox.Principal, ref string) string {
	var sb sandbox.Sandbox
	if p.Role == "" && p.Tenant == "" {
		var err error
		if sb, err = s.publicRow(ctx, ref); err != nil {
			return ""
		}
	} else {
		a := s.access(p)
		t, err := a.locate(ref)
		if err != nil {
			return ""
		}
		if sb, err = a.row(ctx, t); err != nil {
			return ""
		}
	}
	if s.mine(sb) || isPoolMember(sb) {
		return ""
	}
	return sb.Node
}

// Destroy stops the sandbox and releases everything it holds: processes,
// mounts, cgroups, directories, its root and its row. A caller that goes
// away mid-destroy does not interrupt it.
func (s *Sandboxes) Destroy(ctx context.Context, p sandbox.Principal, ref string) error {
	sb, unlock, err := s.locked(ctx, p, ref)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.run.destroy(ctx, sb, fmt.Sprintf("destroyed by %s (%s)", p.Agent, p.Role)); err != nil {
		return err
	}
	// An image version no longer current may have lost its last user.
	s.images.collect(ctx, nil)
	return nil
}

// Update applies u to p's sandbox called name and returns the sandbox as
// it now is. It changes only what u sets; it neither wakes the sandbox nor
// renews its idle lease.
func (s *Sandboxes) Update(ctx context.Context, p sandbox.Principal, ref string, u sandbox.SandboxUpdate) (sandbox.Sandbox, error) {
	if u.Labels != nil {
		if err := sandbox.ValidateLabels(*u.Labels); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	if u.PublicPorts != nil {
		if err := sandbox.ValidatePorts(*u.PublicPorts); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	if u.Egress != nil {
		if _, _, err := u.Egress.Parse(); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	sb, unlock, err := s.locked(ctx, p, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer unlock()
	if u.Labels != nil {
		sb.Labels = append([]string{}, *u.Labels...)
	}
	if u.PublicPorts != nil {
		sb.PublicPorts = slices.Sorted(slices.Values(*u.PublicPorts))
	}
	if u.Egress != nil {
		tenant, err := s.egress.tenant(ctx, sb.Tenant)
		if err != nil {
			return sandbox.Sandbox{}, err
		}
		if _, _, err := u.Egress.Effective(tenant); err != nil {
			return sandbox.Sandbox{}, err
		}
		sb.Egress = *u.Egress
	}
	sb.UpdatedAt = s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(ctx, sb); err != nil {
		return sandbox.Sandbox{}, s.internal("update sandbox row", err)
	}
	if u.Egress != nil {
		if err := s.egress.apply(ctx, sb); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	return sb, nil
}
