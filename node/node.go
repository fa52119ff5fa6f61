// Package node is the boundary between hearth's control plane (the doors,
// lifecycle, policy, the store, audit, tenancy) and a node: the machine
// that runs sandboxes, with its runtime (driver), its layer store, its
// sandboxes' networking and the channel to their agents.
//
// Node is every call the control plane makes on a node. Each is coarse
// and path-free, so that a remote implementation can serve it over the
// network in one round trip: the control plane names sandboxes by id and
// checkpoints by id, never a host path, and does no host I/O of its own.
// What a node holds (runtime sandboxes, roots, checkpoint snapshots,
// memory images) it reports at Recover for the control plane to reconcile
// against its store; which of them should exist is the control plane's
// to decide.
//
// Local is the in-process implementation over a driver.Driver and a
// layers.Store, which stay the node's internals. A node for several
// machines or for Kubernetes implements the same interface.
package node

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/sandbox"
)

// The runtime's vocabulary is the driver's (aliases, so that Local passes
// it through untranslated; a remote implementation encodes it).
type (
	// State is what the node's runtime knows about one sandbox.
	State = driver.State
	// Status is a sandbox's state as the runtime sees it.
	Status = driver.Status
	// EgressRules narrow where one egress sandbox may connect.
	EgressRules = driver.EgressRules
	// Usage is what a running sandbox uses, read from the host's side.
	Usage = driver.Usage
)

// Runtime states (State.Status).
const (
	StatusRunning = driver.StatusRunning
	StatusStopped = driver.StatusStopped
)

// Errors, tested with errors.Is.
var (
	// ErrNotFound is returned by State, Dial, Stop, Delete and SetEgress
	// for a sandbox the node's runtime does not know.
	ErrNotFound = driver.ErrNotFound
	// ErrUnreachable is returned (wrapped) by Dial when nothing listens
	// where the sandbox's agent should: it cannot be reached until it is
	// stopped and started again.
	ErrUnreachable = driver.ErrUnreachable
	// ErrRoot is returned (wrapped) by Start when the sandbox's root could
	// not be prepared from its source or capped: a failure of the node's
	// disk, not of the runtime's start.
	ErrRoot = errors.New("node: the sandbox's root could not be prepared")
)

// HostLimitError is returned (wrapped) by Start when the machine has too
// few of a resource left for one more sandbox (driver.HostLimitError).
type HostLimitError = driver.HostLimitError

// The resources of a HostLimitError.
const (
	LimitTaskIDs = driver.LimitTaskIDs
	LimitMemory  = driver.LimitMemory
)

// Node is the calls a control plane makes on the machine that runs a
// sandbox. Implementations are safe for concurrent use on distinct
// sandboxes; the control plane serializes the calls on one sandbox.
type Node interface {
	// Capabilities describes what the node's runtime can do.
	Capabilities() Capabilities
	// Start starts sandbox spec.ID and returns once its agent answers: on
	// its root, prepared from spec.Root (and capped at its disk size) only
	// if it has none yet, afresh or, with spec.Memory, from that memory
	// image. Starting a stopped sandbox starts it again on the same root
	// (a wake). On error nothing is left running; an error preparing the
	// root wraps ErrRoot.
	Start(ctx context.Context, spec Spec) error
	// Stop kills the sandbox's processes; its root and runtime object
	// stay. Stopping a stopped sandbox is not an error; an unknown one is
	// ErrNotFound.
	Stop(ctx context.Context, id string) error
	// State reports the sandbox's runtime state, or ErrNotFound.
	State(ctx context.Context, id string) (State, error)
	// Dial opens a new connection to the agent of a running sandbox (see
	// ErrNotFound, ErrUnreachable).
	Dial(ctx context.Context, id string) (net.Conn, error)
	// SetEgress replaces a running egress sandbox's own egress rules live
	// (Capabilities.Egress); a later Start applies its Spec's. A node
	// without egress runs no egress sandbox, and does nothing.
	SetEgress(ctx context.Context, id string, rules EgressRules) error
	// Checkpoint takes checkpoint ck of sandbox id: a read-only snapshot
	// of its root, with the sandbox held still around it when it runs and
	// the runtime and layer store need that, and with its memory and
	// processes when opts.Memory asks (Capabilities.MemoryCheckpoint).
	// A failed call leaves no snapshot and no image.
	Checkpoint(ctx context.Context, id, ck string, opts CheckpointOptions) error
	// Rollback replaces the root of stopped sandbox id with a writable
	// snapshot of checkpoint ck, atomically (after a crash the root is the
	// old one or the new one); repeating it is harmless.
	Rollback(ctx context.Context, id, ck string) error
	// DeleteCheckpoint removes checkpoint ck's snapshot and memory image;
	// what is missing is no error.
	DeleteCheckpoint(ctx context.Context, ck string) error
	// Delete removes the sandbox's runtime objects (processes, cgroups,
	// network, mounts) and keeps its root, so that the control plane can
	// drop its record in between (see RemoveRoot); an unknown sandbox is
	// ErrNotFound.
	Delete(ctx context.Context, id string) error
	// RemoveRoot removes sandbox id's root, after Delete; a missing root
	// is no error.
	RemoveRoot(ctx context.Context, id string) error
	// SendSnapshot writes the snapshot t names (a stopped sandbox's
	// root, or one of its checkpoints) to w as what it holds beyond t's
	// base, for ReceiveSnapshot on another node that holds that base (a
	// move). A layer store that cannot fails with an error wrapping
	// errors.ErrUnsupported.
	SendSnapshot(ctx context.Context, t Transfer, w io.Writer) error
	// ReceiveSnapshot makes the snapshot t names from a stream another
	// node's SendSnapshot wrote, on this node's copy of t's base; a root
	// is capped at t.DiskBytes. On error nothing is left. A root the
	// sandbox has already is already_exists; a checkpoint it has already
	// is kept, the stream read and dropped (a move retried).
	ReceiveSnapshot(ctx context.Context, t Transfer, r io.Reader) error
	// Usage is the bytes sandbox id's root holds beyond its source's (what
	// its disk cap counts).
	Usage(ctx context.Context, id string) (int64, error)
	// Meter is what running sandbox id uses now (see driver.Meter): a
	// sandbox that does not run is ErrNotFound; a node that cannot tell
	// fails with an error wrapping errors.ErrUnsupported.
	Meter(ctx context.Context, id string, processes bool) (Usage, error)
	// HasImage reports whether the node holds the image whose layer key
	// is key.
	HasImage(ctx context.Context, key string) (bool, error)
	// PullImage pulls req.Ref from its registry and stores it: each layer
	// once, shared with the images that have it. The result has Name (the
	// normalized reference), Ref, Digest, Layers, Config and Size; the
	// rest is the control plane's.
	PullImage(ctx context.Context, req PullRequest) (sandbox.Image, error)
	// ImportImage stores the image in the archive r (a docker-archive or
	// an OCI archive), as PullImage does; Name is the archive's own name
	// for it, if any.
	ImportImage(ctx context.Context, req ImportRequest) (sandbox.Image, error)
	// CommitImage stores the top key (TopKey's for an image, StepKey's
	// for a build step), whose root is checkpoint ck's snapshot and whose
	// config is cfg (its user resolved again against that root). The top
	// owns its content: the checkpoint may go afterwards. The result has
	// Layers, Config and Size (what the checkpoint holds beyond its
	// sandbox's image).
	CommitImage(ctx context.Context, ck, key string, cfg sandbox.ImageConfig) (sandbox.Image, error)
	// ApplyImage stores the top key (as CommitImage's) whose root is the
	// top parent with the layer tar r applied onto it (nothing when r is
	// nil) and whose config is cfg, its user resolved against the result:
	// a build's step or a built image's top. A key stored already is only
	// resolved again. Size is what the new top holds beyond parent.
	ApplyImage(ctx context.Context, parent, key string, r io.Reader, cfg sandbox.ImageConfig) (sandbox.Image, error)
	// ResolveUser resolves user ("name", "uid", "name:group", …) against
	// the /etc/passwd and /etc/group of the image top key.
	ResolveUser(ctx context.Context, key, user string) (uid, gid int, err error)
	// ExportImage writes img as an OCI archive to w.
	ExportImage(ctx context.Context, img sandbox.Image, w io.Writer) error
	// RemoveImageKeys removes image layer keys no image uses any more
	// (see Inventory.ImageKeys); missing ones are no error.
	RemoveImageKeys(ctx context.Context, keys []string) error
	// Recover, once at start-up, finishes what a stopped daemon left on
	// the node (thaws frozen sandboxes, seals memory images) and reports
	// what the node holds.
	Recover(ctx context.Context) (Inventory, error)
	// MemInfo returns the node's available and total memory in bytes;
	// total 0 says the node does not know.
	MemInfo(ctx context.Context) (available, total int64, err error)
}

// AgentListeners is implemented by a node that can tell which of its
// running sandboxes' agents listen without connecting to them: the sweep
// probes only the others. It is the driver's interface (node.Local passes
// it through).
type AgentListeners = driver.AgentListeners

// Capabilities tell the control plane what a node can do, so that it
// plans instead of guessing.
type Capabilities struct {
	// Runtime names the runtime ("runsc", "runc", "crun").
	Runtime string
	// Isolation is "gvisor" for a user-space kernel, "container" for
	// namespaces and cgroups on the host kernel.
	Isolation string
	// Egress says Start accepts Spec.Network sandbox.NetworkEgress, and
	// SetEgress works.
	Egress bool
	// MemoryCheckpoint says Checkpoint can save memory and Start can
	// resume from it.
	MemoryCheckpoint bool
}

// Spec is what the node needs to start one sandbox.
type Spec struct {
	// ID names the sandbox: lowercase letters and digits, unique and never
	// reused.
	ID string
	// Root is where the sandbox's root comes from, used only when it has
	// none yet (a create, a fork; a wake of a sandbox whose root went).
	Root Source
	// Resources are its limits; DiskBytes caps a root the Start prepares.
	Resources sandbox.Resources
	// Network is its network mode (sandbox.NetworkNone or NetworkEgress),
	// and Egress its own egress rules under NetworkEgress.
	Network string
	Egress  EgressRules
	// Config is what the sandbox's commands run under: its image's user,
	// environment and working directory. A Config with no Home (a sandbox
	// from before image configs) runs as the default image's sandbox user.
	Config sandbox.ImageConfig
	// Memory, when not "", is the checkpoint whose memory image the
	// sandbox starts from (its own, or, for a fork, its Root.Checkpoint):
	// its processes resume. Without
	// Capabilities.MemoryCheckpoint Start fails rather than start it
	// afresh.
	Memory string
}

// Transfer names one snapshot sent between nodes: the root of
// sandbox ID (Checkpoint "") or its checkpoint Checkpoint, as what it
// holds beyond its base, the checkpoint Prev when that is set (one sent
// before it), else the image whose layer key is Image.
type Transfer struct {
	ID, Checkpoint, Image, Prev string
	// DiskBytes caps a received root (0: no cap).
	DiskBytes int64
	// Fork, sending a root, names the checkpoint (of any sandbox) that
	// root starts as: the root of a fork made for another node, which the
	// sender holds only while it sends.
	Fork string
	// Memory, with Checkpoint, names that checkpoint's memory image
	// instead of its snapshot (Capabilities.MemoryCheckpoint), sent
	// sealed as it is at rest: only a node sealing with the same key
	// opens it. One the receiver has already is kept, the stream read and
	// dropped.
	Memory bool
	// Layer, when set, names an image's layer key instead of anything of
	// sandbox ID, sent against Image, its parent layer ("" for the
	// bottom one): a node that lacks an image fetching it from another.
	// A layer the receiver has already is kept, the stream read and
	// dropped.
	Layer string
}

// Source is where a new root comes from: an image, or a checkpoint (of
// any sandbox: a fork). Checkpoint wins when both are set.
type Source struct {
	Image      string
	Checkpoint string
	// Received says the root is one ReceiveSnapshot made (a fork another
	// node sent): without it Start fails (ErrRoot) rather than prepare one.
	Received bool
}

// CheckpointOptions say how to take a checkpoint.
type CheckpointOptions struct {
	// Running says the sandbox runs (as the control plane last recorded
	// it): its processes are held still around the snapshot when the
	// node needs that for a consistent one.
	Running bool
	// Memory saves its memory and processes too, at the snapshot's
	// instant; it needs Running and Capabilities.MemoryCheckpoint.
	Memory bool
	// Stop leaves a running sandbox stopped, as Stop does: with Memory
	// at the snapshot's instant, so that nothing runs between the two and
	// a restore of the checkpoint resumes it losing nothing; without,
	// before the snapshot.
	Stop bool
}

// Inventory is what a node holds, reported at Recover.
type Inventory struct {
	// Sandboxes are the runtime's sandboxes, running or stopped.
	Sandboxes []State
	// Listed says Roots and Checkpoints are complete: a layer store that
	// cannot list its snapshots leaves them empty, and the control plane
	// then takes nothing for missing.
	Listed bool
	// Roots are the ids of the sandboxes that have a root.
	Roots []string
	// Checkpoints are the ids of the checkpoints that have a snapshot.
	Checkpoints []string
	// MemoryImages are the ids of the checkpoints that have a memory
	// image.
	MemoryImages []string
	// ImageKeys are the layer keys of images' layers and tops (with
	// Listed); those of no image are the control plane's to remove.
	ImageKeys []string
}

// PullRequest is a pull of an image from a registry.
type PullRequest struct {
	// Ref is HOST[:PORT]/REPO[:TAG|@DIGEST].
	Ref string
	// Registries are the caller's logins and settings by host[:port].
	Registries map[string]Registry
	// MaxBytes, when positive, bounds what the pull downloads (the
	// layers' compressed bytes): too_large past it.
	MaxBytes int64
	// Progress receives progress events; nil discards them.
	Progress func(sandbox.ImageProgress)
	// PublicOnly refuses every host Registries does not list that is at
	// an address on the host's own or a private network, by name or by IP
	// literal, when it is dialed (fetch.Options.PublicOnly):
	// permission_denied.
	PublicOnly bool
}

// ImportRequest is an import of an image archive.
type ImportRequest struct {
	// Archive is the docker-archive or OCI archive, read once.
	Archive io.Reader
	// MaxBytes, when positive, bounds what is spooled of it: too_large
	// past it, with nothing kept.
	MaxBytes int64
	// Progress receives progress events; nil discards them.
	Progress func(sandbox.ImageProgress)
}

// Registry is how to reach one registry host: credentials (empty:
// anonymous), a PEM bundle of authorities trusted for it, and whether
// plain HTTP or an unverified certificate is allowed for it.
type Registry struct {
	Username, Password string
	CA                 []byte
	Insecure           bool
}
