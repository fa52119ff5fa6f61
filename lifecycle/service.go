// Package lifecycle is the only place where sandbox state changes. Every
// door (HTTP, CLI through HTTP, MCP, the Sprites-compatible API) calls these
// methods with the caller's Principal; lifecycle resolves what the caller
// may see, applies the decision, drives the node (package node: the
// runtime, the layer store, the agents) and the state store, and returns
// sandbox.Error values that every door renders the same way. It does no
// host I/O and sees no host path: what a node does is node.Node's.
//
// The work is split by noun, each a small service over the same store and
// node (see Service): Sandboxes, Processes, Files, Checkpoints, Tenancy,
// Credentials and the warm Pool. What they share
// (the options, the clock, the logger, the per-name locks, the idle
// leases and the one authorization rule of access.go) is one core that
// each holds, never a copy.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Options configure a Service. Store and Node are required; every other
// zero value takes the documented default.
type Options struct {
	Store store.Store
	// Node is the machine that runs the sandboxes (node.Local in the
	// daemon): lifecycle makes every runtime, disk and memory call on it.
	Node node.Node
	// NodeName names Node among the daemons of the store ("local"): the
	// sandboxes it creates are its, and it reconciles, sweeps and acts on
	// its own only. A call on another node's sandbox is unavailable here,
	// with details naming the node, for the door to send there.
	NodeName string
	// Instance names the node's data dir, as the store's node rows record
	// it (store.Node.Instance): Recover tells a row of this node under a
	// former name (adopted) from another node's sandbox of which this one
	// holds a leftover copy (removed). Empty: every row this node holds
	// anything of is adopted.
	Instance string
	// NodeDown, when set, says why another node's sandboxes are
	// unavailable ("" while that node is alive): List reports them so.
	NodeDown func(ctx context.Context, node string) string
	// Fleet, when set, places this daemon's new sandboxes on the nodes of
	// a fleet instead of starting them here (see Fleet): the daemon is a
	// control plane, and Node runs nothing.
	Fleet Fleet
	// Bind, when set, records in the fleet this daemon is a node of each
	// sandbox it made and started itself (a fork, a build's), bound to
	// this node; an error (budget_exceeded when the fleet's quota refuses
	// it) undoes the create. It must not wait for the fleet to act on the
	// record: the sandbox's name is locked meanwhile.
	Bind func(ctx context.Context, sb sandbox.Sandbox) error
	// Asleep, when set, is told each time a sandbox of this daemon has
	// fallen asleep (true) or woken (false): a node of a fleet gives back
	// a sleeping sandbox's CPU and memory there. It must not block.
	Asleep func(ctx context.Context, sb sandbox.Sandbox, asleep bool)
	// Released, when set, is told of each sandbox this daemon has
	// released (destroyed, reaped, or a create undone), once its row is
	// gone: a node of a fleet removes what stands for it there.
	Released func(ctx context.Context, sb sandbox.Sandbox)
	// Move, when set, delivers a snapshot stream of sandbox sb (its root,
	// or its checkpoint checkpoint when that is not "", or, with memory,
	// that checkpoint's memory image) to the node target (another daemon
	// of the store), which keeps it (node.Node.ReceiveSnapshot); it
	// returns once the target has it all. Without it this daemon moves no
	// sandbox.
	Move func(ctx context.Context, target string, sb sandbox.Sandbox, checkpoint string, memory bool, r io.Reader) error
	// Fits, when set, says whether a sandbox of this daemon (a sleeping
	// one, or a fork it makes) fits on it awake (a node of a fleet with
	// room for its size). A fork that does not starts on the node
	// PickNode chooses (see PlaceOn). A sleeping sandbox that does not is
	// moved, when it wakes, to the node PickNode chooses, and
	// the call that woke it is unavailable with details moved_to naming
	// that node (a control plane that forwarded it sends it there). When
	// no node can take it, it wakes here.
	Fits func(ctx context.Context, sb sandbox.Sandbox) bool
	// PickNode, when set, chooses the node a sandbox of this daemon
	// moves to when its Move names none; an error is coded.
	PickNode func(ctx context.Context, sb sandbox.Sandbox) (string, error)
	// PlaceOn, when set, has node sb.Node, which holds sb's root already
	// (a fork this node sent there, having no room for it itself), run
	// sb, whose creating row exists: its record in the fleet is bound to
	// that node. It returns once that node runs sb (its row then names
	// it) or with a coded error (budget_exceeded when the fleet's quota
	// refuses it). With check it makes nothing, and only says whether the
	// fleet would take the record.
	PlaceOn func(ctx context.Context, sb sandbox.Sandbox, check bool) error
	// FetchLayer, when set, reads image layer key, as what it holds
	// beyond its layer base ("" for the bottom one), from another node of
	// the store that holds it (node.Node.SendSnapshot there): a node
	// fetches the layers of an image it lacks when a sandbox of that
	// image is placed or moved here. An error is coded.
	FetchLayer func(ctx context.Context, key, base string) (io.ReadCloser, error)
	// Moved, when set, is told of each sandbox this daemon moved away,
	// whose row names its new node now: a node of a fleet has its Pod
	// follow it there. It runs before Move returns.
	Moved func(ctx context.Context, sb sandbox.Sandbox, from string)
	// StoreWide, when set, says whether this daemon runs the store-wide
	// parts of the sweep now (forgetting old gone records): the one that
	// holds the store's loops lease. Nil means it does.
	StoreWide func() bool
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
	// UsageInterval is how often Run samples what each running sandbox
	// of this node uses (10s; negative: never, and Usage has no series).
	UsageInterval time.Duration
	// WarmPool is, per size preset, how many sandboxes of DefaultImage to
	// keep created and started ahead of time, so that a create of that
	// image and size claims one instead of starting one (see pool.go).
	// Nil or empty keeps no pool.
	WarmPool map[string]int
	// MaxConcurrentStarts is how many heavy node calls run at once:
	// sandbox starts (creates, forks, wakes, restores), memory
	// checkpoints, image pulls and imports. The others wait their turn,
	// FIFO per tenant and round-robin across tenants, the warm pool's
	// refills last (see heavy.go). 0 means twice runtime.NumCPU(): a
	// start also waits (for the runtime's processes, for the agent), and
	// beside a thousand sandboxes two per CPU made creates 14% faster than
	// one (docs/BENCHMARKS.md, "Start slots"); on an empty host the two
	// made no difference.
	MaxConcurrentStarts int
	// MaxConcurrentExecs is how many commands may be in their first
	// execHold at once (see Processes.commandSlot); the others wait their
	// turn like heavy work. 0 means twice runtime.NumCPU().
	MaxConcurrentExecs int
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

// Service holds lifecycle's services, one per noun, over one store and
// one node. Each is safe for concurrent use. Doors call the nouns
// (svc.Sandboxes.Create, svc.Tenancy.Authenticate, …); the daemon calls
// Recover once at start-up, then Run.
type Service struct {
	// Sandboxes creates, finds, changes, sleeps, wakes and destroys
	// sandboxes.
	Sandboxes *Sandboxes
	// Processes runs commands in sandboxes and connects to their ports.
	Processes *Processes
	// Files reads and writes the files in sandboxes.
	Files *Files
	// Checkpoints takes, lists, deletes, restores and forks checkpoints.
	Checkpoints *Checkpoints
	// Tenancy keeps tenants, agents and tokens, authenticates callers and
	// reports their limits.
	Tenancy *Tenancy
	// Credentials keeps tenants' secrets and bindings, and routes the
	// egress gateway's requests.
	Credentials *Credentials
	// Pool is the warm pool: sandboxes started ahead of a create.
	Pool *Pool
	// Images keeps the tenants' images and registry logins.
	Images *Images
	// Usage samples what this node's running sandboxes use.
	Usage *Usage

	core  *core
	sweep *sweeper
}

// Default option values.
const (
	DefaultMaxWriteBytes = 64 << 20
	DefaultTTL           = 24 * time.Hour
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultGoneRetention = 7 * 24 * time.Hour
	defaultSweep         = 30 * time.Second
	// startTimeout bounds a sandbox start, including the agent's first answer.
	startTimeout = 30 * time.Second
)

// New returns the services over opts' store and node. It does not touch
// the node: call Recover once at start-up, then Run.
func New(opts Options) (*Service, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &core{opts: opts, log: opts.Logger, now: opts.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.heavy = newHeavy(opts.MaxConcurrentStarts, "sandbox starts, memory checkpoints and image pulls", startTimeout, c.now)
	adm := &admission{core: c}
	eg := &egress{core: c}
	run := &runner{core: c, egress: eg}
	usage := &usageCache{}
	sbs := &Sandboxes{core: c, run: run, adm: adm, egress: eg, usage: usage, forkMemory: &forkMemory{core: c}}
	pool := newPool(c, run, sbs)
	sbs.pool = pool
	rooms := &roomMaker{core: c, sandboxes: sbs}
	run.room = rooms
	creds := &Credentials{core: c}
	cks := &Checkpoints{core: c, run: run, sandboxes: sbs, usage: usage}
	procs := &Processes{core: c, run: run, adm: adm, checkpoints: cks, creds: creds,
		commands: newHeavy(opts.MaxConcurrentExecs, "command starts", startTimeout, c.now), hold: execHold}
	imgs := &Images{core: c, adm: adm, checkpoints: cks, sandboxes: sbs, processes: procs}
	imgs.peers = peerImages{core: c, storing: imgs.storing}
	sbs.images = imgs
	return &Service{
		Sandboxes:   sbs,
		Usage:       &Usage{core: c, disk: usage},
		Processes:   procs,
		Files:       &Files{core: c, run: run},
		Checkpoints: cks,
		Tenancy:     &Tenancy{core: c, adm: adm, egress: eg},
		Credentials: creds,
		Pool:        pool,
		Images:      imgs,
		core:        c,
		sweep:       &sweeper{core: c, run: run, sandboxes: sbs, checkpoints: cks, adm: adm, pool: pool, images: imgs, room: rooms},
	}, nil
}

// withDefaults checks the required options and fills in the defaults of
// the others.
func (opts Options) withDefaults() (Options, error) {
	if opts.Store == nil || opts.Node == nil {
		return opts, errors.New("lifecycle: Store and Node are required")
	}
	if opts.DefaultImage == "" {
		opts.DefaultImage = "default"
	}
	if opts.NodeName == "" {
		opts.NodeName = "local"
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
	if opts.MaxConcurrentStarts <= 0 {
		opts.MaxConcurrentStarts = 2 * runtime.NumCPU()
	}
	if opts.MaxConcurrentExecs <= 0 {
		opts.MaxConcurrentExecs = 2 * runtime.NumCPU()
	}
	if opts.SweepInterval <= 0 {
		// Often enough that a sandbox sleeps within a quarter of its idle
		// window of going idle.
		opts.SweepInterval = min(defaultSweep, opts.IdleTimeout/4)
	}
	for size := range opts.WarmPool {
		if _, err := sandbox.LookupSize(size); err != nil {
			return opts, fmt.Errorf("lifecycle: warm pool: %w", err)
		}
	}
	return opts, nil
}

// Recover reconciles the store with what the node really holds, once at
// start-up: it adopts live sandboxes, marks vanished or dead ones stopped
// with the reason, finishes what a killed daemon left half done (undoing
// creates and checkpoints, completing restores), and removes runtime
// containers, roots and checkpoint snapshots that no row owns. It kills
// nothing that a row owns.
func (s *Service) Recover(ctx context.Context) error { return s.sweep.reconcile(ctx) }

// Run reaps expired sandboxes and notices dead ones every SweepInterval
// until ctx ends, keeps the warm pool filled (refilling it too after a
// control plane claimed a member), and applies the policy
// changes made through the store's other nodes to this node's sandboxes.
func (s *Service) Run(ctx context.Context) {
	go s.Tenancy.egress.watch(ctx)
	go s.Pool.refiller(ctx)
	if len(s.Pool.opts.WarmPool) > 0 {
		go s.Pool.watchClaims(ctx) // a control plane may claim its members
	}
	s.Pool.refillSoon()
	if s.Usage.opts.UsageInterval >= 0 {
		go s.Usage.loop(ctx)
	}
	s.sweep.loop(ctx)
}
