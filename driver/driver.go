// Package driver is the contract between hearth and the thing that isolates a
// sandbox: an OCI runtime on this host (driver/oci: runsc, runc, crun), and
// later a Kubernetes pod or a microVM. The host owns the contract; drivers
// implement it and never import store, policy or lifecycle.
//
// A driver makes the isolation boundary around a root filesystem that the
// host prepared, runs hearth-agent as its PID 1, and tells the host how to
// reach that agent. Everything else (exec, files) goes through the agent, so
// a new driver only has to get those three things right. driver/drivertest
// is the conformance suite every driver passes.
//
// Optional capabilities are interfaces a driver may also implement; the
// host discovers them with a type assertion and plans without them when a
// driver lacks one:
//
//   - Freezer: freeze every process of a sandbox in place and thaw it
//     again, so that the host can take a consistent snapshot of a running
//     sandbox's root (a live checkpoint) without stopping it.
//   - EgressSetter: change an egress sandbox's own egress rules
//     (EgressRules) while it runs. A driver whose Capabilities say Egress
//     implements it.
//   - MemoryCheckpointer: save a running sandbox's memory and processes
//     beside a snapshot of its root, and start it again from them. A
//     driver whose Capabilities say MemoryCheckpoint implements it.
//   - MemoryMover: copy a memory image to another node's driver, as it
//     is at rest.
package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/hearth/hearth/sandbox"
)

// ErrNotFound is returned by State, Dial, Stop, Delete, Freezer's Freeze
// and Thaw, and EgressSetter's SetEgress, for an id the driver does not
// know (never created, or already deleted).
var ErrNotFound = errors.New("driver: sandbox not found")

// ErrUnreachable is returned (wrapped) by Dial when nothing accepts
// connections where the sandbox's agent should listen: no socket there,
// something else in its place, or a socket no one listens on. A sandbox
// that runs so cannot be reached until it is stopped and started again
// (its agent died, or its root removed the socket). Errors that may pass
// (a full backlog, a deadline) are not ErrUnreachable.
var ErrUnreachable = errors.New("driver: the sandbox's agent is not listening")

// HostLimitError is returned by Start, before it makes anything, when the
// host has too few of a resource left for one more sandbox: What ("task
// ids": kernel.pid_max and kernel.threads-max bound every process and
// thread of the host, and an idle sandbox holds dozens; or "MiB of
// memory": the host's available memory), how many are Free, how many a
// sandbox Needs with the reserve the host keeps, and the host's Limit.
type HostLimitError struct {
	What              string
	Free, Need, Limit int
}

// The resources of a HostLimitError (its What).
const (
	LimitTaskIDs = "task ids"
	LimitMemory  = "MiB of memory"
)

func (e *HostLimitError) Error() string {
	return fmt.Sprintf("driver: the host has %d %s free of %d, and a sandbox needs %d", e.Free, e.What, e.Limit, e.Need)
}

// Spec is everything a driver needs to start one sandbox.
type Spec struct {
	// ID names the sandbox in the runtime; lowercase letters and digits,
	// unique and never reused.
	ID string
	// RootFS is the host path of the sandbox's writable root filesystem,
	// prepared by the host (layers). The driver must not remove it.
	RootFS string
	// AgentPath is the host path of the static hearth-agent binary; the
	// driver makes it PID 1 (read-only) inside the sandbox.
	AgentPath string
	// Hostname is the sandbox's hostname.
	Hostname string
	// Env is the sandbox's default environment ("K=V").
	Env []string
	// UID and GID are the sandbox user commands run as.
	UID, GID int
	// Home is the sandbox user's home, the default working directory
	// unless WorkDir names one.
	Home string
	// WorkDir is the default working directory of commands and the base
	// of relative file paths (an image's working directory); "" is Home.
	WorkDir string
	// Resources are the limits, enforced with cgroups (and, where the
	// runtime needs it, rlimits in the agent).
	Resources sandbox.Resources
	// Network is the sandbox's network mode: NetworkNone (the zero value
	// means it too) or NetworkEgress, which only a driver whose
	// Capabilities say Egress accepts; any other value fails Start. A wake
	// may change it.
	Network string
	// Egress are the sandbox's own egress rules, on top of the egress
	// policy every egress sandbox has; ignored unless Network is
	// NetworkEgress. Every Start applies them whole (a wake may change
	// them), and EgressSetter changes them while the sandbox runs.
	Egress EgressRules
}

// EgressRules narrow where one egress sandbox may connect, on top of the
// policy every egress sandbox has (see NetworkEgress), which they can
// never open: a destination that policy blocks stays blocked whatever
// Allow says. The zero value narrows nothing. Prefixes are IPv4 (a
// sandbox has no IPv6), domains patterns as sandbox.DomainPattern returns
// them; a driver fails on any other.
type EgressRules struct {
	// Allow and AllowDomains, when either is not empty, are the only
	// destinations the sandbox may reach: the networks, and the addresses
	// that names matching the domain patterns resolved to for it (no other
	// name resolves); a packet to any other is refused.
	Allow        []netip.Prefix
	AllowDomains []string
	// Deny are networks the sandbox may not reach, even when Allow lists
	// them, and DenyDomains names it may not resolve, nor reach at the
	// addresses they resolved to for it before; a packet to one is
	// refused.
	Deny        []netip.Prefix
	DenyDomains []string
}

// EgressSetter is implemented by drivers that can change an egress
// sandbox's EgressRules live: a driver whose Capabilities say Egress.
type EgressSetter interface {
	// SetEgress replaces the egress rules of sandbox id, running or
	// stopped, with rules, and returns once they hold: a running sandbox's
	// packets (on the connections it has open too) meet the new rules
	// from then on, and no packet is let through in between that both the
	// old and the new rules refuse. Setting the rules it has is not an
	// error. A stopped sandbox's next Start applies its Spec.Egress, not
	// what SetEgress set, so the host starts it with the rules it wants.
	// It returns ErrNotFound for an unknown id, and an error saying so for
	// a sandbox whose network is not NetworkEgress.
	SetEgress(ctx context.Context, id string, rules EgressRules) error
}

// Network modes (Spec.Network).
const (
	// NetworkNone gives the sandbox loopback only: nothing it does
	// reaches a network, and nothing reaches it but through its agent.
	NetworkNone = sandbox.NetworkNone
	// NetworkEgress gives the sandbox outbound connections to public
	// addresses, through NAT, and nothing else: the host itself, private,
	// link-local and other reserved ranges, and other sandboxes stay out
	// of reach, and nothing can connect in (see package network for the
	// policy). A driver that cannot enforce that fails Start rather than
	// start the sandbox with no network or an open one.
	NetworkEgress = sandbox.NetworkEgress
)

// Freezer is implemented by drivers that can freeze every process of a
// sandbox in place (no process runs, none is lost) and thaw it again.
//
// The host freezes a sandbox for as short a time as it can (a live
// checkpoint: freeze, snapshot the root, thaw); while it is frozen its
// agent does not answer, though Dial may still connect. A frozen sandbox
// is still running to the rest of the contract: State reports
// StatusRunning, and Stop and Delete work on it (they thaw it or kill it
// frozen, and return once its processes are gone).
//
// A daemon that dies between Freeze and Thaw must not leave the sandbox
// frozen for ever: Recover thaws every frozen sandbox it finds before it
// reports it.
//
// Both methods return ErrNotFound for an unknown id, and an error saying
// the sandbox is stopped for a known sandbox that is not running.
type Freezer interface {
	// Freeze returns once every process of the sandbox is frozen.
	// Freezing a frozen sandbox is not an error. When the sandbox cannot
	// be frozen before ctx ends, Freeze thaws it again and fails: it never
	// returns an error leaving the sandbox frozen or half frozen.
	Freeze(ctx context.Context, id string) error
	// Thaw lets them run again. Thawing a running sandbox is not an
	// error.
	Thaw(ctx context.Context, id string) error
}

// Status is a sandbox's state as the runtime sees it.
type Status string

// Runtime states.
const (
	StatusRunning Status = "running"
	// StatusStopped: the sandbox exists in the runtime but its processes are
	// gone (it died, or Stop was called).
	StatusStopped Status = "stopped"
)

// State is what the runtime knows about one sandbox.
type State struct {
	ID     string
	Status Status
	// PID is the host pid of the sandbox's init, or of the process that
	// holds it (gVisor's sandbox process); 0 when stopped.
	PID int
	// OOMKilled says the sandbox's memory limit killed a process in it.
	OOMKilled bool
}

// Capabilities tell the host what a driver can do, so it plans instead of
// guessing.
type Capabilities struct {
	// Runtime names the runtime ("runsc", "runc", "crun").
	Runtime string
	// Isolation is "gvisor" for a user-space kernel, "container" for
	// namespaces and cgroups on the host kernel.
	Isolation string
	// CheapFreeze says Freeze and Thaw (see Freezer) take a millisecond or
	// two together; false means tens of milliseconds, so that a caller
	// with an atomic way to capture the sandbox's disk may go without.
	CheapFreeze bool
	// Egress says Start accepts Spec.Network NetworkEgress. Without it
	// the driver only runs sandboxes with no network.
	Egress bool
	// MemoryCheckpoint says the driver is a MemoryCheckpointer.
	MemoryCheckpoint bool
}

// MemoryCheckpointer is implemented by drivers that can checkpoint a
// running sandbox's memory and processes, not only its files: a driver
// whose Capabilities say MemoryCheckpoint.
type MemoryCheckpointer interface {
	// CheckpointMemory saves the memory and processes of running sandbox
	// id as the image called key (letters and digits), and leaves the
	// sandbox running, or with opts.Stop stopped. The sandbox is held
	// still while opts.Paused runs, so that what it captures of the root
	// (the host's snapshot) and the image are of one instant; an error of
	// Paused fails the call, and leaves no image. Connections to the
	// sandbox's agent in flight are closed. It returns ErrNotFound for an
	// unknown id and an error for a stopped sandbox; a failed call leaves
	// the sandbox running as it was, except that with opts.Stop a failure
	// after the image is whole may leave it stopped.
	// The driver may finish writing the image after it returns (runsc
	// seals it to disk in the background): RestoreMemory then waits for
	// it, DeleteMemory stops it, and Recover finishes an image a daemon
	// stop interrupted, so that a call that returned nil is an image.
	CheckpointMemory(ctx context.Context, id, key string, opts MemoryOptions) error
	// RestoreMemory starts stopped sandbox spec.ID from image key, which
	// CheckpointMemory saved of it, or of another sandbox whose root at
	// that instant spec.ID's root was made from (a fork): its processes
	// resume where the image left them, on the root the host has put
	// back to the same instant.
	// It returns once the agent answers. On error nothing is left
	// running and the sandbox stays known and stopped, as with Start.
	RestoreMemory(ctx context.Context, spec Spec, key string) error
	// DeleteMemory removes image key; a missing one is no error.
	DeleteMemory(ctx context.Context, key string) error
}

// MemoryOptions says what CheckpointMemory does while the sandbox is held
// still, and how it leaves the sandbox.
type MemoryOptions struct {
	// Paused, if not nil, runs while the sandbox is held still, before
	// the image is taken.
	Paused func() error
	// Stop leaves the sandbox stopped at the image's instant, as Stop
	// does, instead of resuming it: nothing runs in it after the image,
	// so its root stays as Paused found it, and a RestoreMemory of the
	// image on that root loses nothing.
	Stop bool
}

// Meter reads what running sandboxes use, from the host's side: their
// cgroups and their network link.
type Meter interface {
	// Usage is what running sandbox id uses now (At unset): CPU time,
	// memory now (and its working set) and at its peak, network bytes,
	// processes (-1 when the runtime cannot tell cheaply; with processes
	// the meter asks the runtime, which may cost a process start). A
	// sandbox that does not run is ErrNotFound.
	Usage(ctx context.Context, id string, processes bool) (Usage, error)
}

// Usage is a Meter's reading of one sandbox (see sandbox.UsageSample).
type Usage struct {
	CPUNanos        uint64
	MemoryBytes     int64
	MemoryPeakBytes int64
	// MemoryWorkingSetBytes is MemoryBytes less the file cache the kernel
	// may reclaim first (inactive file pages), as the kubelet counts a
	// container's working set.
	MemoryWorkingSetBytes int64
	NetRxBytes            uint64
	NetTxBytes            uint64
	Processes             int64
}

// MemoryMover is implemented by MemoryCheckpointers whose images can go
// to another node (a sandbox moving there with its checkpoints): sealed
// as they are at rest, so that only a node sealing with the same key
// opens one (a restore there that cannot starts the sandbox afresh).
type MemoryMover interface {
	// SendMemory writes image key to w, once it is whole, as a stream
	// ReceiveMemory reads; an unknown key is ErrNotFound.
	SendMemory(ctx context.Context, key string, w io.Writer) error
	// ReceiveMemory stores image key from a stream SendMemory wrote, whole
	// or not at all; an image it has already is kept, the stream read and
	// dropped. A stream that is not SendMemory's is ErrInvalidImage.
	ReceiveMemory(ctx context.Context, key string, r io.Reader) error
}

// AgentListeners is implemented by a driver that can tell which running
// sandboxes have a socket listening where their agent should without
// connecting to them: a connection wakes an idle sandbox (under gVisor its
// kernel and its agent), a look at the host's socket table does not.
type AgentListeners interface {
	// AgentsListening returns the ids among ids whose agent's socket has a
	// listener now, as Dial would find it. An id left out may have one all
	// the same (the driver could not tell): Dial it to know.
	AgentsListening(ctx context.Context, ids []string) (map[string]bool, error)
}

// ErrInvalidImage is returned (wrapped) by ReceiveMemory for a stream
// that is not a memory image SendMemory wrote.
var ErrInvalidImage = errors.New("driver: not a memory image another node sent")

// Driver starts, finds and removes sandboxes. Implementations are safe for
// concurrent use on distinct ids.
type Driver interface {
	// Capabilities describes the driver.
	Capabilities() Capabilities
	// Start creates and starts the sandbox and returns once its agent
	// answers. The sandbox must survive the host process: stopping or
	// killing the daemon kills nothing. On error nothing is left running.
	// Starting an id that exists but is stopped starts it again, on the
	// same root, with the given spec (this is how a sandbox wakes); if that
	// fails the sandbox stays known and stopped. Starting a running
	// sandbox fails and leaves it running.
	Start(ctx context.Context, spec Spec) error
	// Dial opens a new connection to the agent of a running sandbox. It
	// returns ErrNotFound for an unknown id, and a connection error for a
	// sandbox that is stopped or whose agent is not listening (wrapping
	// ErrUnreachable when nothing listens where the agent should).
	Dial(ctx context.Context, id string) (net.Conn, error)
	// State reports the sandbox's runtime state, or ErrNotFound.
	State(ctx context.Context, id string) (State, error)
	// Stop kills every process of the sandbox and waits until they are gone.
	// The sandbox stays known (StatusStopped) and its root is untouched.
	// Stopping a stopped sandbox is not an error.
	Stop(ctx context.Context, id string) error
	// Delete stops the sandbox if needed and releases everything the driver
	// made for it: processes, mounts, cgroups, state directories. After it,
	// State returns ErrNotFound. Deleting an unknown id returns ErrNotFound.
	Delete(ctx context.Context, id string) error
	// Recover lists the sandboxes the driver knows after a host restart, so
	// the host can adopt live ones and mark vanished ones. A driver that
	// is a Freezer thaws every frozen sandbox it finds first.
	Recover(ctx context.Context) ([]State, error)
}
