// Package lifecycle is the only place where sandbox state changes. Every
// door (HTTP, CLI through HTTP, MCP, the Sprites-compatible API) calls these
// methods with the caller's Principal; lifecycle resolves what the caller
// may see, applies the decision, drives the runtime, the layer store and the
// state store, and returns sandbox.Error values that every door renders the
// same way.
package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Options configure a Service. Store, Driver, Layers and AgentPath are
// required; every other zero value takes the documented default.
type Options struct {
	Store  store.Store
	Driver driver.Driver
	Layers layers.Store
	// AgentPath is the host path of the static hearth-agent binary.
	AgentPath string
	// DefaultImage is the image create uses when none is named ("default").
	DefaultImage string
	// MaxWriteBytes is the largest file write accepted (64 MiB).
	MaxWriteBytes int64
	// DefaultTTL is a sandbox's lifetime when create names none, and MaxTTL
	// the longest one may ask for (both 24h).
	DefaultTTL, MaxTTL time.Duration
	// IdleTimeout is how long a running sandbox with no command running and
	// no call from its owner stays awake before it is put to sleep (10m).
	IdleTimeout time.Duration
	// SweepInterval is how often Run reaps expired sandboxes and notices
	// dead ones (30s).
	SweepInterval time.Duration
	// WarmPool is, per size preset, how many sandboxes of DefaultImage to
	// keep created and started ahead of time, so that a create of that
	// image and size claims one instead of starting one (see pool.go).
	// Nil or empty keeps no pool.
	WarmPool map[string]int
	// Secrets seals and opens tenants' secrets (a *secrets.Box over the
	// data dir's key file); nil keeps none, and exec refuses to name any.
	Secrets Sealer
	// GoneRetention is how long get of a destroyed sandbox's name says why
	// it went (7 days).
	GoneRetention time.Duration
	// Alarms, if set, is told of every create-rate alarm and circuit
	// breaker trip (besides the log), e.g. to post it to a webhook. It
	// must not block.
	Alarms func(sandbox.Alarm)
	// MemInfo returns the host's available and total memory in bytes, which
	// the warm pool shrinks under; nil reads /proc/meminfo.
	MemInfo func() (available, total int64, err error)
	// Logger receives lifecycle events; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Sealer seals secret values for the store and opens them for a command
// (package secrets implements it).
type Sealer interface {
	Seal(tenant, name string, value []byte) []byte
	Open(tenant, name string, sealed []byte) ([]byte, error)
}

// Service applies lifecycle operations. It is safe for concurrent use.
type Service struct {
	opts   Options
	log    *slog.Logger
	now    func() time.Time
	locks  keyedMutex
	leases leases
	pool   pool
	// tenantLocks serializes a tenant's creates from admission to the new
	// row, so that concurrent creates count each other, and its updates.
	tenantLocks keyedMutex
	rates       rates
	usage       usageCache
	// memInfo is Options.MemInfo or its default.
	memInfo func() (available, total int64, err error)
	// crashHook, set only by tests (export_test.go), is called at every
	// crash point; see crash.
	crashHook func(point string)
}

// Default option values.
const (
	DefaultMaxWriteBytes = 64 << 20
	DefaultTTL           = 24 * time.Hour
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultGoneRetention = 7 * 24 * time.Hour
	defaultSweep         = 30 * time.Second
	// sandboxHostname is every sandbox's hostname (rootfs.Hostname).
	sandboxHostname = "sandbox"
	// startTimeout bounds a sandbox start, including the agent's first answer.
	startTimeout = 30 * time.Second
)

// New returns a Service. It does not touch the runtime: call Recover once at
// start-up, then Run.
func New(opts Options) (*Service, error) {
	if opts.Store == nil || opts.Driver == nil || opts.Layers == nil || opts.AgentPath == "" {
		return nil, errors.New("lifecycle: Store, Driver, Layers and AgentPath are required")
	}
	if opts.DefaultImage == "" {
		opts.DefaultImage = "default"
	}
	if opts.MaxWriteBytes <= 0 {
		opts.MaxWriteBytes = DefaultMaxWriteBytes
	}
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = DefaultTTL
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = DefaultTTL
	}
	if opts.DefaultTTL > opts.MaxTTL {
		opts.DefaultTTL = opts.MaxTTL
	}
	if opts.GoneRetention <= 0 {
		opts.GoneRetention = DefaultGoneRetention
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.SweepInterval <= 0 {
		// Often enough that a sandbox sleeps within a quarter of its idle
		// window of going idle.
		opts.SweepInterval = min(defaultSweep, opts.IdleTimeout/4)
	}
	for size := range opts.WarmPool {
		if _, err := sandbox.LookupSize(size); err != nil {
			return nil, fmt.Errorf("lifecycle: warm pool: %w", err)
		}
	}
	s := &Service{opts: opts, log: opts.Logger, now: opts.Now, memInfo: opts.MemInfo}
	s.pool.kick = make(chan struct{}, 1)
	s.pool.quiet, s.pool.waitMax = refillQuiet, refillWaitMax
	if s.memInfo == nil {
		s.memInfo = procMeminfo
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// MaxWriteBytes is the largest file write the service accepts, so doors can
// refuse a larger body before reading it.
func (s *Service) MaxWriteBytes() int64 { return s.opts.MaxWriteBytes }

// Runtime names the runtime that isolates this service's sandboxes.
func (s *Service) Runtime() string { return s.opts.Driver.Capabilities().Runtime }

// rootKey is the layer-store key of a sandbox's root filesystem.
func rootKey(id string) string { return "sb-" + id }

// newID returns a fresh sandbox id: 'x' and 15 lowercase base32 characters
// (75 random bits), a valid runtime id, layer key and DNS label.
func newID() string {
	var b [10]byte
	rand.Read(b[:])
	return "x" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:15]
}

// Create makes a sandbox for p in p's tenant (the system tenant for an
// operator), or returns p's existing sandbox of the same name with created
// false (resume, not duplicate). Names are unique within a tenant: another
// tenant's sandbox of the same name is no conflict and stays unseen. A
// name held in p's tenant by a sandbox p cannot see is already_exists.
// Errors: invalid_argument for a bad name, size or ttl; not_found for an
// image that is not one (see access.image); permission_denied for a name
// outside p's name prefix; unavailable when the runtime fails to start it
// (and then nothing is left behind).
func (s *Service) Create(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest) (sb sandbox.Sandbox, created bool, err error) {
	return s.create(ctx, p, req, "", "created")
}

// create makes the sandbox of Create, its root a writable snapshot of from
// (a checkpoint's layer key) or, when from is empty, of its image; reason
// is the status reason once it runs.
func (s *Service) create(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest, from, reason string) (sb sandbox.Sandbox, created bool, err error) {
	spec, err := s.checkCreate(ctx, p, req)
	if err != nil {
		return sandbox.Sandbox{}, false, err
	}
	req = spec.req
	tenant := p.Home()
	unlock := s.locks.lock(sandbox.Ref(tenant, req.Name))
	defer unlock()
	// Only p's own tenant is looked in: whether another tenant has the
	// name changes nothing, and shows nowhere.
	if existing, err := s.opts.Store.GetSandbox(ctx, tenant, req.Name); err == nil {
		if !s.access(p).sees(existing) {
			return sandbox.Sandbox{}, false, nameTaken(req.Name)
		}
		return existing, false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return sandbox.Sandbox{}, false, s.internal("get sandbox", err)
	}
	admitted := func() {}
	if spec.limited {
		if spec.ttl, admitted, err = s.admit(ctx, p, req.Size, spec.res, spec.ttl); err != nil {
			return sandbox.Sandbox{}, false, err
		}
		defer admitted()
	}
	// Pool members have no network: only a create that asks for none
	// can claim one.
	if from == "" && req.Image == s.opts.DefaultImage && p != poolPrincipal() && req.Network == sandbox.NetworkNone && req.Egress == nil {
		sb, ok, err := s.claim(ctx, p, req, spec.ttl)
		if ok {
			s.forgetGone(ctx, sb)
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
	req    sandbox.CreateRequest
	res    sandbox.Resources
	egress sandbox.EgressPolicy
	// ttl is the sandbox's life; for a limited create, what it asked for
	// (0: the default), which admission decides.
	ttl time.Duration
	// limited: the guardrails apply, and the name carries the creator.
	limited bool
}

// checkCreate validates p's create request req and fills in its defaults.
// The image is resolved in p's scope (access.image).
func (s *Service) checkCreate(ctx context.Context, p sandbox.Principal, req sandbox.CreateRequest) (createSpec, error) {
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
	if req.Image, err = s.access(p).image(ctx, req.Image); err != nil {
		return spec, err
	}
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
		tenant, err := s.tenantEgress(ctx, p.Tenant)
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
	spec.ttl, err = s.ttlFor(spec.limited, time.Duration(req.TTL))
	return spec, err
}

// ttlFor is the life of a create that asked for ttl (0: the default),
// within the daemon's cap; a limited create's is admission's to decide.
func (s *Service) ttlFor(limited bool, ttl time.Duration) (time.Duration, error) {
	switch {
	case limited: // admit decides, with the tenant's cap
	case ttl < 0:
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "ttl %s is negative", ttl).WithHint("ask for a positive ttl such as 1h, or none for the default %s", s.opts.DefaultTTL)
	case ttl > s.opts.MaxTTL:
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "ttl %s is longer than the %s cap", ttl, s.opts.MaxTTL).
			WithHint("ask for at most %s", s.opts.MaxTTL).With("limit_seconds", int64(s.opts.MaxTTL.Seconds())).With("requested_seconds", int64(ttl.Seconds()))
	case ttl == 0:
		ttl = s.opts.DefaultTTL
	}
	return ttl, nil
}

func nameTaken(name string) error {
	return sandbox.Errorf(sandbox.CodeAlreadyExists, "sandbox name %q is taken", name).WithHint("choose another name")
}

// launch makes the new sandbox of spec for p in p's tenant: its row, its
// root (from from, or its image), its runtime start, its row running with
// reason. admitted is called once the row counts in the tenant's usage.
// The caller holds the name's lock.
func (s *Service) launch(ctx context.Context, p sandbox.Principal, spec createSpec, from, reason string, admitted func()) (sandbox.Sandbox, error) {
	req, caps, now := spec.req, s.opts.Driver.Capabilities(), s.now().UTC()
	sb := sandbox.Sandbox{
		ID:        newID(),
		Name:      req.Name,
		Tenant:    p.Home(),
		Owner:     p.Agent,
		Image:     req.Image,
		Size:      req.Size,
		Runtime:   caps.Runtime,
		Status:    sandbox.StatusCreating,
		Reason:    "create requested",
		CreatedAt: now,
		UpdatedAt: now,
		ExpiresAt: now.Add(spec.ttl),
		Capabilities: []string{
			sandbox.CapExec, sandbox.CapExecStdin, sandbox.CapExecTimeout, sandbox.CapFiles,
			sandbox.CapIsolation + caps.Isolation, sandbox.CapRuntime + caps.Runtime,
		},
		Resources:   spec.res,
		Labels:      req.Labels,
		PublicPorts: []int{},
		Network:     req.Network,
		Egress:      spec.egress,
	}
	if p == poolPrincipal() {
		sb.ExpiresAt = time.Time{} // a member lives until claimed or shrunk
	}
	// The row goes first: a daemon killed from here on leaves a creating row
	// that Recover cleans up, never an untracked container or root.
	if err := s.opts.Store.CreateSandbox(ctx, sb); err != nil {
		if errors.Is(err, store.ErrExists) {
			return sandbox.Sandbox{}, nameTaken(req.Name)
		}
		return sandbox.Sandbox{}, s.internal("create sandbox row", err)
	}
	admitted() // the row now counts in the tenant's usage
	s.forgetGone(ctx, sb)
	s.crash("create: row inserted")
	// A caller that goes away mid-create must not leave half a sandbox.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	if from == "" {
		from = sb.Image
	}
	if _, err := s.opts.Layers.Prepare(ctx, rootKey(sb.ID), from); err != nil {
		s.release(ctx, sb)
		return sandbox.Sandbox{}, s.internal("prepare root from "+from, err)
	}
	if err := s.limitDisk(ctx, sb); err != nil {
		s.release(ctx, sb)
		return sandbox.Sandbox{}, err
	}
	s.crash("create: root prepared")
	if err := s.start(ctx, sb); err != nil {
		s.release(ctx, sb)
		return sandbox.Sandbox{}, err
	}
	s.crash("create: started")
	s.leases.touch(sb.ID, s.now())
	sb.Status, sb.Reason, sb.UpdatedAt = sandbox.StatusRunning, reason, s.now().UTC()
	if err := s.opts.Store.UpdateSandbox(ctx, sb); err != nil {
		s.release(ctx, sb)
		return sandbox.Sandbox{}, s.internal("update sandbox row", err)
	}
	s.log.Info("sandbox created", "sandbox", sb.Name, "id", sb.ID, "tenant", sb.Tenant, "owner", sb.Owner, "runtime", sb.Runtime)
	return sb, nil
}

// networkFor decides the network mode of a create that asked for mode:
// within the tenant's policy when limited, and one the driver offers.
func (s *Service) networkFor(ctx context.Context, p sandbox.Principal, limited bool, mode string) (string, error) {
	if err := sandbox.ValidateNetwork(mode); err != nil {
		return "", err
	}
	if limited {
		var err error
		if mode, err = s.limitsOf(ctx, p.Tenant).NetworkFor(mode); err != nil {
			return "", err
		}
	}
	if mode == "" {
		mode = sandbox.NetworkNone
	}
	if mode == sandbox.NetworkEgress && !s.opts.Driver.Capabilities().Egress {
		return "", sandbox.Errorf(sandbox.CodeInvalidArgument, "this daemon's runtime offers no egress network").
			WithHint("create the sandbox with network %q, or run the daemon where it can set up networking (iptables, root)", sandbox.NetworkNone)
	}
	return mode, nil
}

// start prepares the root (if it is not there yet) and starts the runtime.
// The hostname and environment name no sandbox, so that a warm-pool member
// started before its claim looks exactly like a sandbox started for it.
func (s *Service) start(ctx context.Context, sb sandbox.Sandbox) error {
	return s.startFrom(ctx, sb, "")
}

// startFrom starts sb, from the driver's memory image key when key is not
// "" (see driver.MemoryCheckpointer: its processes resume), afresh on its
// root otherwise.
func (s *Service) startFrom(ctx context.Context, sb sandbox.Sandbox, key string) error {
	root, err := s.root(ctx, sb)
	if err != nil {
		return err
	}
	spec := driver.Spec{
		ID:        sb.ID,
		RootFS:    root,
		AgentPath: s.opts.AgentPath,
		Hostname:  sandboxHostname,
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8",
			"USER=sandbox",
			"LOGNAME=sandbox",
		},
		UID: 1000, GID: 1000, Home: "/home/sandbox",
		Resources: sb.Resources,
		Network:   sb.Network,
	}
	if sb.Network == sandbox.NetworkEgress {
		if spec.Egress, err = s.egressRules(ctx, sb); err != nil {
			return err
		}
	}
	switch mc := s.memoryDriver(); {
	case key == "":
		err = s.opts.Driver.Start(ctx, spec)
	case mc != nil:
		err = mc.RestoreMemory(ctx, spec, key)
	default:
		// Never a plain start in its place: the caller would report the
		// processes back.
		err = errors.New("the driver cannot restore memory")
	}
	if err != nil {
		s.log.Error("sandbox start failed", "sandbox", sb.Name, "id", sb.ID, "memory", key, "err", err)
		return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q failed to start", sb.Name).
			WithHint("retry; if it keeps failing, `hearth serve`'s log has the runtime's error")
	}
	return nil
}

// root returns the sandbox's root filesystem, preparing it from its image
// the first time.
func (s *Service) root(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	info, err := s.opts.Layers.Stat(ctx, rootKey(sb.ID))
	if err == nil {
		return info.Path, nil
	}
	if !errors.Is(err, layers.ErrNotFound) {
		return "", s.internal("stat root", err)
	}
	path, err := s.opts.Layers.Prepare(ctx, rootKey(sb.ID), sb.Image)
	if err != nil {
		return "", s.internal("prepare root", err)
	}
	if err := s.limitDisk(ctx, sb); err != nil {
		return "", err
	}
	return path, nil
}

// limitDisk caps what the sandbox's root may hold beyond its image. A layer
// store that cannot enforce limits (btrfs without quotas, the overlay
// fallback) is logged, not fatal: the sandbox then runs without a cap.
func (s *Service) limitDisk(ctx context.Context, sb sandbox.Sandbox) error {
	err := s.opts.Layers.SetLimit(ctx, rootKey(sb.ID), sb.Resources.DiskBytes)
	if errors.Is(err, layers.ErrUnsupported) {
		s.log.Warn("the layer store cannot enforce disk limits", "sandbox", sb.Name)
		return nil
	}
	if err != nil {
		return s.internal("limit disk", err)
	}
	return nil
}

// release removes everything a sandbox holds: runtime, row (its
// checkpoints' rows with it), root and checkpoint snapshots, in that order.
// Each step tolerates what is already gone.
//
// The runtime goes first, and the row outlives it: a sandbox whose runtime
// would not go away is still listed, so a retry (or Recover) finishes the
// job, and a daemon killed right after leaves a stopped sandbox with all
// its content. The row goes before the disk: from then on the disk is
// garbage no row owns, which Recover removes if the daemon is killed (or a
// removal fails) before this does. With the disk first, a killed daemon
// left a row whose root was gone, which the next call woke on a fresh
// image.
func (s *Service) release(ctx context.Context, sb sandbox.Sandbox) error {
	if err := s.opts.Driver.Delete(ctx, sb.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("driver delete: %w", err)
	}
	s.crash("release: runtime deleted")
	cps, err := s.opts.Store.ListCheckpoints(ctx, sb.ID)
	if err != nil {
		return fmt.Errorf("list checkpoints: %w", err)
	}
	if err := s.opts.Store.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete row: %w", err)
	}
	s.leases.forget(sb.ID)
	s.crash("release: row deleted")
	keys := []string{rootKey(sb.ID)}
	for _, c := range cps {
		keys = append(keys, checkpointKey(c.ID))
		s.dropMemory(ctx, c)
	}
	for _, key := range keys {
		if err := s.opts.Layers.Remove(ctx, key); err != nil && !errors.Is(err, layers.ErrNotFound) {
			s.log.Error("remove a released sandbox's snapshot; the next start removes it", "sandbox", sb.Name, "key", key, "err", err)
		}
		s.crash("release: snapshot removed")
	}
	return nil
}

// Get returns the sandbox ref names (a sandbox reference: NAME or
// TENANT/NAME, see sandbox.ParseRef) if p may see it, else not_found, the
// same whether it exists or not: another tenant's sandbox, another agent's,
// one outside p's name prefix, an unclaimed warm-pool member. A malformed
// reference is invalid_argument. Every verb on an existing sandbox finds
// it through access, as Get does.
func (s *Service) Get(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	return s.access(p).get(ctx, ref)
}

// Describe is Get plus what the sandbox's root really holds on disk
// (DiskUsedBytes), measured at most two seconds ago. A sandbox at its disk limit says so in its status
// reason, since writes in it now fail with EDQUOT.
func (s *Service) Describe(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	sb, err := s.Get(ctx, p, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	used, err := s.diskUsage(ctx, sb.ID)
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

// diskUsage is the disk usage of sandbox id's root, measured at most
// usageTTL ago.
func (s *Service) diskUsage(ctx context.Context, id string) (int64, error) {
	now := s.now()
	s.usage.mu.Lock()
	m, ok := s.usage.m[id]
	s.usage.mu.Unlock()
	if ok && now.Sub(m.at) < usageTTL {
		return m.bytes, nil
	}
	n, err := s.opts.Layers.Usage(ctx, rootKey(id))
	if err != nil {
		return 0, err
	}
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	if s.usage.m == nil {
		s.usage.m = map[string]measured{}
	}
	for k, old := range s.usage.m {
		if now.Sub(old.at) >= usageTTL {
			delete(s.usage.m, k) // gone stale, or its sandbox did
		}
	}
	s.usage.m[id] = measured{bytes: n, at: now}
	return n, nil
}

// forgetUsage drops what diskUsage measured of sandbox id, whose root
// changed all at once (a restore).
func (s *Service) forgetUsage(id string) {
	s.usage.mu.Lock()
	delete(s.usage.m, id)
	s.usage.mu.Unlock()
}

// forgetGone drops the record of why an earlier sandbox of sb's name in
// its tenant went: the name is sb's now.
func (s *Service) forgetGone(ctx context.Context, sb sandbox.Sandbox) {
	if _, err := s.opts.Store.GetGone(ctx, sb.Tenant, sb.Name); errors.Is(err, store.ErrNotFound) {
		return // the common case, and a read: no write (and fsync) for it
	}
	if err := s.opts.Store.ForgetGone(ctx, sb.Tenant, sb.Name, time.Time{}); err != nil {
		s.log.Error("forget why an earlier sandbox went", "sandbox", sb.Name, "tenant", sb.Tenant, "err", err)
	}
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
func (s *Service) List(ctx context.Context, p sandbox.Principal) ([]sandbox.Sandbox, error) {
	var f store.Filter
	switch p.Role {
	case sandbox.RoleOperator:
	case sandbox.RoleTenantAdmin:
		f.Tenant = p.Tenant
	default:
		f.Tenant, f.Owner = p.Tenant, p.Agent
	}
	list, err := s.opts.Store.ListSandboxes(ctx, f)
	if err != nil {
		return nil, s.internal("list sandboxes", err)
	}
	a := s.access(p)
	out := []sandbox.Sandbox{}
	for _, sb := range list {
		if a.sees(sb) {
			out = append(out, sb)
		}
	}
	return out, nil
}

// Destroy stops the sandbox and releases everything it holds: processes,
// mounts, cgroups, directories, its root and its row. A caller that goes
// away mid-destroy does not interrupt it.
func (s *Service) Destroy(ctx context.Context, p sandbox.Principal, ref string) error {
	sb, unlock, err := s.locked(ctx, p, ref)
	if err != nil {
		return err
	}
	defer unlock()
	return s.destroy(ctx, sb, fmt.Sprintf("destroyed by %s (%s)", p.Agent, p.Role))
}

// Update applies u to p's sandbox called name and returns the sandbox as
// it now is. It changes only what u sets; it neither wakes the sandbox nor
// renews its idle lease.
func (s *Service) Update(ctx context.Context, p sandbox.Principal, ref string, u sandbox.SandboxUpdate) (sandbox.Sandbox, error) {
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
		tenant, err := s.tenantEgress(ctx, sb.Tenant)
		if err != nil {
			return sandbox.Sandbox{}, err
		}
		if _, _, err := u.Egress.Effective(tenant); err != nil {
			return sandbox.Sandbox{}, err
		}
		sb.Egress = *u.Egress
	}
	sb.UpdatedAt = s.now().UTC()
	if err := s.opts.Store.UpdateSandbox(ctx, sb); err != nil {
		return sandbox.Sandbox{}, s.internal("update sandbox row", err)
	}
	if u.Egress != nil {
		if err := s.applyEgress(ctx, sb); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	return sb, nil
}

// reap destroys tenant's sandbox called name if it is still there and its
// TTL has passed: the platform's own destroy, which nothing asks for.
func (s *Service) reap(ctx context.Context, tenant, name string) error {
	unlock := s.locks.lock(sandbox.Ref(tenant, name))
	defer unlock()
	sb, err := s.opts.Store.GetSandbox(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) || err == nil && (sb.ExpiresAt.IsZero() || s.now().Before(sb.ExpiresAt)) {
		return nil // destroyed, or renamed by a claim, since the sweep listed it
	}
	if err != nil {
		return s.internal("get sandbox", err)
	}
	return s.destroy(ctx, sb, fmt.Sprintf("reaped: its ttl ended at %s", sb.ExpiresAt.UTC().Format(time.RFC3339)))
}

// destroy releases sb, having first recorded why it goes (see Gone): the
// record is written before the release so that a sandbox a killed daemon
// half released still says why. The caller holds sb's lock.
func (s *Service) destroy(ctx context.Context, sb sandbox.Sandbox, reason string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	s.crash("destroy: begun")
	s.recordGone(ctx, sb, reason)
	// The commit point: a restart finishes a destroy whose record is there
	// (see Recover).
	s.crash("destroy: reason recorded")
	if err := s.release(ctx, sb); err != nil {
		return s.internal("destroy "+sb.ID, err)
	}
	s.log.Info("sandbox destroyed", "sandbox", sb.Name, "id", sb.ID, "reason", reason)
	return nil
}

// interruptedCreate is why a sandbox whose create a killed daemon left
// half done is gone (see Recover).
const interruptedCreate = "its create was interrupted by a daemon restart, and nothing of it was kept"

// recordGone records why sb goes, for a get of its name (see Gone); a
// failure is logged, and only costs that answer.
func (s *Service) recordGone(ctx context.Context, sb sandbox.Sandbox, reason string) {
	gone := sandbox.Gone{Name: sb.Name, ID: sb.ID, Tenant: sb.Tenant, Owner: sb.Owner, Reason: reason, Last: sb.Reason, At: s.now().UTC()}
	if err := s.opts.Store.RecordGone(ctx, gone); err != nil {
		s.log.Error("record why a sandbox goes", "sandbox", sb.Name, "err", err)
	}
}

// running returns the sandbox ref names for p and an agent client for it,
// starting the sandbox again first if it is stopped.
func (s *Service) running(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, *agent.Client, error) {
	sb, err := s.Get(ctx, p, ref)
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
func (s *Service) agentOf(sb sandbox.Sandbox) *agent.Client {
	return agent.NewClient(func(ctx context.Context) (net.Conn, error) { return s.dial(ctx, sb) })
}

// dial connects to the sandbox's agent. When that fails because the runtime
// lost the sandbox since its row said running (a host OOM under gVisor, a
// host reboot), or because nothing listens for its agent any more
// (driver.ErrUnreachable: its agent died, or its root removed the socket),
// it records why and starts it again instead of failing until the next
// sweep notices.
func (s *Service) dial(ctx context.Context, sb sandbox.Sandbox) (net.Conn, error) {
	conn, err := s.opts.Driver.Dial(ctx, sb.ID)
	if err == nil {
		return conn, nil
	}
	st, serr := s.opts.Driver.State(ctx, sb.ID)
	switch {
	case serr == nil && st.Status == driver.StatusRunning && errors.Is(err, driver.ErrUnreachable):
		// Running, and nothing listens for its agent: no call can use it
		// until it starts again.
		s.stopUnreachable(ctx, sb, err)
	case serr == nil && st.Status == driver.StatusRunning:
		return nil, err // alive, and may answer yet (busy, frozen)
	case errors.Is(serr, driver.ErrNotFound):
		s.markStopped(ctx, sb, "vanished from the runtime")
	case serr == nil:
		s.markStopped(ctx, sb, stoppedReason(st))
	default:
		return nil, err
	}
	if _, err := s.wake(ctx, sb); err != nil {
		return nil, err
	}
	return s.opts.Driver.Dial(ctx, sb.ID)
}

// wake starts a stopped sandbox again on its root.
func (s *Service) wake(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, error) {
	cur, unlock, err := s.current(ctx, sb)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	defer unlock()
	if cur.Status == sandbox.StatusRunning {
		return cur, nil
	}
	if cur.Status == sandbox.StatusCreating {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q is still being created", sb.Name).WithHint("retry in a moment")
	}
	// A caller that goes away mid-wake must not leave the runtime running
	// under a row that says stopped: both steps outlive the caller.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	// A runtime sandbox still running under a row that says it is not is
	// stale: a daemon killed mid-restore can leave one started on a root
	// that Recover has since replaced. Its processes go; the start below
	// runs on the root the row describes.
	if st, err := s.opts.Driver.State(ctx, cur.ID); err == nil && st.Status == driver.StatusRunning {
		s.log.Warn("restarting a runtime sandbox its row says is not running", "sandbox", cur.Name, "status", cur.Status, "reason", cur.Reason)
		if err := s.opts.Driver.Stop(ctx, cur.ID); err != nil {
			return sandbox.Sandbox{}, s.internal("stop stale "+cur.ID, err)
		}
	}
	reason := "woken by a call after: " + cur.Reason
	if err := s.start(ctx, cur); err != nil {
		return sandbox.Sandbox{}, err
	}
	s.crash("wake: started")
	s.leases.touch(cur.ID, s.now())
	cur.Status, cur.Reason, cur.UpdatedAt = sandbox.StatusRunning, reason, s.now().UTC()
	if err := s.opts.Store.UpdateSandbox(ctx, cur); err != nil {
		return sandbox.Sandbox{}, s.internal("update sandbox row", err)
	}
	s.log.Info("sandbox woken", "sandbox", cur.Name, "id", cur.ID)
	return cur, nil
}

// crash marks a point between two durable steps of an operation: a daemon
// killed there must leave a state that Recover finishes or rolls back. The
// crash tests kill the operation at each point through crashHook; in
// production it does nothing.
func (s *Service) crash(point string) {
	if s.crashHook != nil {
		s.crashHook(point)
	}
}

// internal logs cause and returns the opaque internal error.
func (s *Service) internal(what string, cause error) error {
	s.log.Error("internal error", "op", what, "err", cause)
	return sandbox.AsError(cause)
}

// locked returns the sandbox ref names for p (see access) with its name's
// lock held: unlock releases it. The lock is taken before the row is
// read, so that the caller acts on the row as it stands.
func (s *Service) locked(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, func(), error) {
	a := s.access(p)
	t, err := a.locate(ref)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	unlock := s.locks.lock(t.key())
	sb, err := a.sandbox(ctx, t)
	if err != nil {
		unlock()
		return sandbox.Sandbox{}, nil, err
	}
	return sb, unlock, nil
}

// current reads sb's row again under its name's lock, for an operation
// that found sb earlier without the lock (a wake, a sleep, the sweep): the
// row as it stands, and unlock. not_found when sb went or another sandbox
// took its name meanwhile.
func (s *Service) current(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, func(), error) {
	unlock := s.locks.lock(sandbox.Ref(sb.Tenant, sb.Name))
	cur, err := s.opts.Store.GetSandbox(ctx, sb.Tenant, sb.Name)
	if err != nil || cur.ID != sb.ID {
		unlock()
		return sandbox.Sandbox{}, nil, notFound(sb.Name)
	}
	return cur, unlock, nil
}

// keyedMutex serializes operations on one sandbox name of one tenant
// (keyed TENANT/NAME).
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
