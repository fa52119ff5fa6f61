// Package fake is a driver.Driver for tests that runs no runtime: every
// sandbox it starts is a real agent.Server (the one hearth-agent runs)
// served inside the test process, reached through Dial over a socket pair.
// The host code above it (lifecycle, the doors) therefore talks the real
// agent protocol to a real agent, and tests can break the runtime on
// purpose through its Faults: make a sandbox die (Die, Vanish), stop
// answering (Deafen) or fail to start (FailStart), report an OOM kill
// (OOMNextExec); restart the daemon (Reopen), and check what the host
// asked for (Calls).
//
// What it emulates: the driver contract's states and errors (Start, wake
// on the same root, Stop, Delete, Recover, ErrNotFound for unknown ids, a
// failed Start leaving nothing), sandboxes that outlive the Driver value
// that started them, and an agent whose home is Spec.Home inside
// Spec.RootFS, so that files written through the agent land in the root
// the layer store prepared and survive a stop and a wake.
//
// What it does not: isolation and limits. Commands run on the host, as the
// test's own user (Spec.UID and GID are ignored), with the host's root as
// "/" (an absolute path is a host path) and no cgroup, namespace or
// Resources limit; the agent's ping reports the test's pid, not 1. Start
// never runs Spec.AgentPath, so an agent binary that is missing or broken
// is not noticed; it only needs Spec.RootFS to be a directory, and creates
// the home directory in it when missing. PIDs in State are made up, above
// any real pid_max, so they never name a host process. Because of all
// this, driver/drivertest, which checks pid 1, broken agents and host
// leftovers, is not run against this driver; its tests check the contract
// that a fake can keep.
//
// It is a driver.Freezer too, with the contract's states and errors (Frozen
// tells a test whether a sandbox is frozen). A frozen real sandbox's agent
// does not answer until it is thawed; the fake holds calls back the same
// way, at the door: Dial blocks while the sandbox is frozen, until Thaw
// (or Stop, Delete, Die, Vanish, Close or Recover, which all thaw it) or
// the end of its context, so an agent call made during a checkpoint
// completes after it. It freezes no host process: commands already running,
// and calls on connections opened before Freeze, go on.
//
// It is a driver.EgressSetter too, with the contract's errors: it records
// each sandbox's egress rules (EgressOf), and enforces none.
//
// With Options.Memory it is a driver.MemoryCheckpointer too: it runs the
// paused function while the sandbox is frozen and records an image per
// key (Images), and RestoreMemory starts the sandbox as Start does,
// recording which image it came from (RestoredFrom). It saves no memory:
// the commands of a restored fake sandbox are not back.
package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
)

// Options configure a Driver. The zero value works.
type Options struct {
	// Runtime and Isolation are what Capabilities reports ("fake" and
	// "none" when empty).
	Runtime, Isolation string
	// Egress is what Capabilities reports: Start then accepts
	// Spec.Network egress. The fake's sandboxes share the host's network
	// whatever their mode: it isolates nothing.
	Egress bool
	// Memory is what Capabilities reports as MemoryCheckpoint.
	Memory bool
	// Logger receives the agents' logs; nil discards.
	Logger *slog.Logger
}

// Driver is the fake driver.Driver. It is safe for concurrent use. A
// Driver is a handle on a set of sandboxes; Reopen makes another handle on
// the same set, as a restarted daemon would.
type Driver struct {
	w *world
}

var (
	_ driver.Driver             = (*Driver)(nil)
	_ driver.Freezer            = (*Driver)(nil)
	_ driver.EgressSetter       = (*Driver)(nil)
	_ driver.MemoryCheckpointer = (*Driver)(nil)
)

// Op names a driver.Driver method, in Calls.
type Op string

// The recorded methods, of driver.Driver, driver.Freezer and
// driver.EgressSetter (Capabilities is not recorded).
const (
	OpStart   Op = "Start"
	OpDial    Op = "Dial"
	OpState   Op = "State"
	OpStop    Op = "Stop"
	OpDelete  Op = "Delete"
	OpRecover Op = "Recover"
	OpFreeze  Op = "Freeze"
	OpThaw    Op = "Thaw"
	// OpSetEgress is driver.EgressSetter's SetEgress.
	OpSetEgress Op = "SetEgress"
	// The driver.MemoryCheckpointer methods.
	OpCheckpointMemory Op = "CheckpointMemory"
	OpRestoreMemory    Op = "RestoreMemory"
	OpDeleteMemory     Op = "DeleteMemory"
)

// Call is one recorded call of a driver.Driver method.
type Call struct {
	Op Op
	// ID is the sandbox id the call named; empty for Recover.
	ID string
	// At is when the call was made, by the host's clock.
	At time.Time
}

func (c Call) String() string { return string(c.Op) + "(" + c.ID + ")" }

// firstPID is the first made-up pid: Linux's pid_max is at most 1<<22, so
// no host process has this pid or any above it.
const firstPID = 1 << 22

// world is the state that every handle from Reopen shares: what a host
// keeps for its runtime.
type world struct {
	caps driver.Capabilities
	log  *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*box
	calls     []Call
	startHook func(context.Context, driver.Spec) error
	nextPID   int
	closed    bool
	// images are the memory images, by key, each the id it is of.
	images map[string]string
}

// box is one sandbox.
type box struct {
	spec      driver.Spec
	status    driver.Status
	pid       int
	oomKilled bool
	oomExecs  int           // results of exec to report as OOM killed
	usage     driver.Usage  // what Usage reports while it runs (SetUsage)
	deaf      bool          // its agent listens no more (Deafen), until the next Start
	agent     *live         // nil unless running
	thawed    chan struct{} // non-nil while frozen; closed by thaw
	// egress are the egress rules last applied: Spec.Egress at Start,
	// then what SetEgress set.
	egress driver.EgressRules
	// restoredFrom is the memory image of its last start, "" for none.
	restoredFrom string
}

// thaw ends a freeze of b, if any, releasing the Dials it holds.
func (b *box) thaw() {
	if b.thawed != nil {
		close(b.thawed)
		b.thawed = nil
	}
}

// live is a running sandbox's agent.
type live struct {
	srv    *agent.Server
	ln     *pairListener
	served chan struct{} // closed when Serve returns
}

// New returns a Driver with no sandboxes. Close it when done, to stop the
// agents.
func New(opts Options) *Driver {
	caps := driver.Capabilities{Runtime: opts.Runtime, Isolation: opts.Isolation, Egress: opts.Egress, MemoryCheckpoint: opts.Memory}
	if caps.Runtime == "" {
		caps.Runtime = "fake"
	}
	if caps.Isolation == "" {
		caps.Isolation = "none"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Driver{w: &world{caps: caps, log: log, sandboxes: map[string]*box{}, nextPID: firstPID, images: map[string]string{}}}
}

// Reopen returns another Driver over the same sandboxes, as a daemon
// restarted on the same host would build it: running sandboxes keep
// running and Recover lists them. d keeps working too (a killed daemon's
// driver is simply dropped), and the two share Calls.
func (d *Driver) Reopen() *Driver { return &Driver{w: d.w} }

// Close stops every sandbox's agent, killing its commands, as a host
// shutdown would; Start fails afterwards. It returns nil.
func (d *Driver) Close() error {
	d.w.mu.Lock()
	d.w.closed = true
	var agents []*live
	for _, b := range d.w.sandboxes {
		b.thaw()
		if b.agent != nil {
			agents = append(agents, b.agent)
			b.agent, b.status, b.pid = nil, driver.StatusStopped, 0
		}
	}
	d.w.mu.Unlock()
	for _, a := range agents {
		a.stop()
	}
	return nil
}

func (d *Driver) record(op Op, id string) {
	d.w.mu.Lock()
	d.w.calls = append(d.w.calls, Call{Op: op, ID: id, At: time.Now()})
	d.w.mu.Unlock()
}

// Capabilities reports Options.Runtime and Options.Isolation.
func (d *Driver) Capabilities() driver.Capabilities { return d.w.caps }

// Start starts the sandbox's agent, or wakes a stopped sandbox with the
// new spec. It fails, changing nothing, when the start hook
// (Faults.FailStart, Faults.SetStartHook) says so, when ctx has ended,
// when spec.RootFS is not a directory, or when the sandbox is running.
// See driver.Driver.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) error {
	d.record(OpStart, spec.ID)
	return d.start(ctx, spec, "")
}

// start is Start, recording image as where the sandbox's memory came
// from.
func (d *Driver) start(ctx context.Context, spec driver.Spec, image string) error {
	d.w.mu.Lock()
	hook := d.w.startHook
	d.w.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, spec); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if spec.ID == "" {
		return errors.New("fake: Start: empty id")
	}
	switch spec.Network {
	case "", driver.NetworkNone:
	case driver.NetworkEgress:
		if !d.w.caps.Egress {
			return fmt.Errorf("fake: Start(%s): egress network, but the driver was made without Options.Egress", spec.ID)
		}
	default:
		return fmt.Errorf("fake: Start(%s): unknown network mode %q", spec.ID, spec.Network)
	}
	if fi, err := os.Stat(spec.RootFS); err != nil || !fi.IsDir() {
		return fmt.Errorf("fake: Start(%s): root filesystem %q is not a directory", spec.ID, spec.RootFS)
	}
	home := filepath.Join(spec.RootFS, filepath.Join("/", spec.Home))
	if err := os.MkdirAll(home, 0o755); err != nil {
		return fmt.Errorf("fake: Start(%s): %w", spec.ID, err)
	}

	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if d.w.closed {
		return fmt.Errorf("fake: Start(%s): driver closed", spec.ID)
	}
	b := d.w.sandboxes[spec.ID]
	if b != nil && b.status == driver.StatusRunning {
		return fmt.Errorf("fake: Start(%s): sandbox is running", spec.ID)
	}
	if b == nil {
		b = &box{}
		d.w.sandboxes[spec.ID] = b
	}
	srv := agent.NewServer(agent.Options{
		UID:    os.Geteuid(),
		GID:    os.Getegid(),
		Home:   home,
		Env:    append(slices.Clip(spec.Env), "HOME="+home),
		Logger: d.w.log.With("sandbox", spec.ID),
	})
	a := &live{srv: srv, ln: newPairListener(), served: make(chan struct{})}
	go func() {
		defer close(a.served)
		srv.Serve(a.ln)
	}()
	b.spec, b.status, b.pid, b.oomKilled, b.agent = spec, driver.StatusRunning, d.w.nextPID, false, a
	b.egress, b.restoredFrom, b.deaf = driver.EgressRules{}, image, false
	if spec.Network == driver.NetworkEgress {
		b.egress = spec.Egress
	}
	d.w.nextPID++
	return nil
}

// Dial connects to the agent of a running sandbox; a stopped one refuses
// the connection. While the sandbox is frozen, Dial waits until it is
// thawed (or stopped, or forgotten), or returns ctx's error. See
// driver.Driver.
func (d *Driver) Dial(ctx context.Context, id string) (net.Conn, error) {
	d.record(OpDial, id)
	d.w.mu.Lock()
	b := d.w.sandboxes[id]
	for b != nil && b.thawed != nil {
		thawed := b.thawed
		d.w.mu.Unlock()
		select {
		case <-thawed:
		case <-ctx.Done():
			return nil, fmt.Errorf("fake: Dial(%s): sandbox is frozen: %w", id, ctx.Err())
		}
		d.w.mu.Lock()
		b = d.w.sandboxes[id]
	}
	if b == nil {
		d.w.mu.Unlock()
		return nil, fmt.Errorf("fake: Dial(%s): %w", id, driver.ErrNotFound)
	}
	a, oom, deaf := b.agent, b.oomExecs > 0, b.deaf
	d.w.mu.Unlock()
	if a == nil {
		return nil, fmt.Errorf("fake: Dial(%s): sandbox is stopped: %w", id, syscall.ECONNREFUSED)
	}
	if deaf {
		return nil, fmt.Errorf("fake: Dial(%s): %w", id, driver.ErrUnreachable)
	}
	c, err := a.ln.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("fake: Dial(%s): %w", id, err)
	}
	if oom {
		c = &oomConn{Conn: c, report: func() bool { return d.w.takeOOMExec(id) }}
	}
	return c, nil
}

// Usage reports what SetUsage last set for running sandbox id (zero, one
// process, until then); a sandbox that does not run is ErrNotFound. See
// driver.Meter.
func (d *Driver) Usage(ctx context.Context, id string, processes bool) (driver.Usage, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b := d.w.sandboxes[id]
	if b == nil || b.status != driver.StatusRunning {
		return driver.Usage{}, fmt.Errorf("fake: Usage(%s): %w", id, driver.ErrNotFound)
	}
	u := b.usage
	if u == (driver.Usage{}) {
		u.Processes = 1
	}
	return u, nil
}

// SetUsage sets what Usage reports for sandbox id.
func (d *Driver) SetUsage(id string, u driver.Usage) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if b := d.w.sandboxes[id]; b != nil {
		b.usage = u
	}
}

// State reports the sandbox's state. See driver.Driver.
func (d *Driver) State(ctx context.Context, id string) (driver.State, error) {
	d.record(OpState, id)
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b := d.w.sandboxes[id]
	if b == nil {
		return driver.State{}, fmt.Errorf("fake: State(%s): %w", id, driver.ErrNotFound)
	}
	return b.state(id), nil
}

func (b *box) state(id string) driver.State {
	return driver.State{ID: id, Status: b.status, PID: b.pid, OOMKilled: b.oomKilled}
}

// Stop stops the sandbox's agent, killing its commands, and waits for
// them. See driver.Driver.
func (d *Driver) Stop(ctx context.Context, id string) error {
	d.record(OpStop, id)
	return d.w.kill(id, false, false, "Stop")
}

// Delete stops the sandbox and forgets it. See driver.Driver.
func (d *Driver) Delete(ctx context.Context, id string) error {
	d.record(OpDelete, id)
	return d.w.kill(id, false, true, "Delete")
}

// Recover lists every sandbox, running or stopped, by id, and thaws the
// frozen ones. See driver.Driver and driver.Freezer.
func (d *Driver) Recover(ctx context.Context) ([]driver.State, error) {
	d.record(OpRecover, "")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	states := make([]driver.State, 0, len(d.w.sandboxes))
	for id, b := range d.w.sandboxes {
		b.thaw()
		states = append(states, b.state(id))
	}
	slices.SortFunc(states, func(a, b driver.State) int { return strings.Compare(a.ID, b.ID) })
	return states, nil
}

// Freeze freezes the sandbox: Dial holds every new connection back until
// Thaw. Freezing a frozen sandbox does nothing. It returns
// driver.ErrNotFound for an unknown id, and an error saying so for a stopped
// sandbox. See driver.Freezer.
func (d *Driver) Freeze(ctx context.Context, id string) error {
	d.record(OpFreeze, id)
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b, err := d.w.running(id, "Freeze")
	if err != nil {
		return err
	}
	if b.thawed == nil {
		b.thawed = make(chan struct{})
	}
	return nil
}

// Thaw thaws the sandbox, releasing the Dials it held. Thawing a sandbox
// that is not frozen does nothing. It returns driver.ErrNotFound for an
// unknown id, and an error saying so for a stopped sandbox. See
// driver.Freezer.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	d.record(OpThaw, id)
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b, err := d.w.running(id, "Thaw")
	if err != nil {
		return err
	}
	b.thaw()
	return nil
}

// SetEgress records rules as sandbox id's egress rules (EgressOf tells a
// test), running or stopped; it enforces nothing, like the fake's egress
// itself. It returns driver.ErrNotFound for an unknown id, and an error
// saying so for a sandbox last started without the egress network. See
// driver.EgressSetter.
func (d *Driver) SetEgress(ctx context.Context, id string, rules driver.EgressRules) error {
	d.record(OpSetEgress, id)
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b := d.w.sandboxes[id]
	if b == nil {
		return fmt.Errorf("fake: SetEgress(%s): %w", id, driver.ErrNotFound)
	}
	if b.spec.Network != driver.NetworkEgress {
		return fmt.Errorf("fake: SetEgress(%s): sandbox has no egress network (network %q)", id, b.spec.Network)
	}
	b.egress = rules
	return nil
}

// EgressOf returns the egress rules sandbox id has: its Spec.Egress at its
// last Start (none when that was not an egress start), or what SetEgress
// set since; false for an unknown id.
func (d *Driver) EgressOf(id string) (driver.EgressRules, bool) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b := d.w.sandboxes[id]
	if b == nil {
		return driver.EgressRules{}, false
	}
	return b.egress, true
}

// CheckpointMemory freezes running sandbox id, runs opts.Paused, records
// image key of it when that succeeded, and thaws it, or with opts.Stop
// stops it as Stop does. It returns driver.ErrNotFound for an unknown id,
// and an error for a stopped sandbox or a driver made without
// Options.Memory. See driver.MemoryCheckpointer.
func (d *Driver) CheckpointMemory(ctx context.Context, id, key string, opts driver.MemoryOptions) error {
	d.record(OpCheckpointMemory, id)
	if !d.w.caps.MemoryCheckpoint {
		return fmt.Errorf("fake: CheckpointMemory(%s): the driver was made without Options.Memory", id)
	}
	if err := d.Freeze(ctx, id); err != nil {
		return err
	}
	var err error
	if opts.Paused != nil {
		err = opts.Paused()
	}
	if err == nil {
		d.w.mu.Lock()
		d.w.images[key] = id
		d.w.mu.Unlock()
		if opts.Stop {
			return d.w.kill(id, false, false, "CheckpointMemory")
		}
	}
	if terr := d.Thaw(ctx, id); terr != nil {
		return errors.Join(err, terr)
	}
	return err
}

// RestoreMemory starts stopped sandbox spec.ID as Start does, from image
// key (RestoredFrom tells a test): one of its own, or another sandbox's
// for a fork. See driver.MemoryCheckpointer.
func (d *Driver) RestoreMemory(ctx context.Context, spec driver.Spec, key string) error {
	d.record(OpRestoreMemory, spec.ID)
	d.w.mu.Lock()
	_, ok := d.w.images[key]
	d.w.mu.Unlock()
	if !ok {
		return fmt.Errorf("fake: RestoreMemory(%s): no memory image %q", spec.ID, key)
	}
	return d.start(ctx, spec, key)
}

// DeleteMemory forgets image key. See driver.MemoryCheckpointer.
func (d *Driver) DeleteMemory(ctx context.Context, key string) error {
	d.record(OpDeleteMemory, "")
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	delete(d.w.images, key)
	return nil
}

// memoryStream is what SendMemory writes before an image's key: a
// stream ReceiveMemory takes.
const memoryStream = "fake memory image "

// SendMemory writes image key to w, or driver.ErrNotFound. See
// driver.MemoryMover.
func (d *Driver) SendMemory(ctx context.Context, key string, w io.Writer) error {
	d.w.mu.Lock()
	_, ok := d.w.images[key]
	d.w.mu.Unlock()
	if !ok {
		return fmt.Errorf("fake: SendMemory(%s): %w", key, driver.ErrNotFound)
	}
	_, err := io.WriteString(w, memoryStream+key)
	return err
}

// ReceiveMemory keeps image key from a stream SendMemory wrote of it
// (another's is driver.ErrInvalidImage); one it has already is kept. See
// driver.MemoryMover.
func (d *Driver) ReceiveMemory(ctx context.Context, key string, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if string(b) != memoryStream+key {
		return fmt.Errorf("fake: ReceiveMemory(%s): %w", key, driver.ErrInvalidImage)
	}
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if _, ok := d.w.images[key]; !ok {
		d.w.images[key] = ""
	}
	return nil
}

// Images returns the keys of the memory images there are, sorted.
func (d *Driver) Images() []string {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return slices.Sorted(maps.Keys(d.w.images))
}

// RestoredFrom returns the memory image sandbox id's last start came from
// ("" for a plain start or an unknown id).
func (d *Driver) RestoredFrom(id string) string {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if b := d.w.sandboxes[id]; b != nil {
		return b.restoredFrom
	}
	return ""
}

// Frozen reports whether sandbox id is frozen (false for an unknown id).
func (d *Driver) Frozen(id string) bool {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b := d.w.sandboxes[id]
	return b != nil && b.thawed != nil
}

// running returns the running sandbox id, for method what. The caller
// holds w.mu.
func (w *world) running(id, what string) (*box, error) {
	b := w.sandboxes[id]
	if b == nil {
		return nil, fmt.Errorf("fake: %s(%s): %w", what, id, driver.ErrNotFound)
	}
	if b.status != driver.StatusRunning {
		return nil, fmt.Errorf("fake: %s(%s): sandbox is stopped", what, id)
	}
	return b, nil
}

// Faults are the failures a test makes its sandboxes suffer: a sandbox
// that dies, vanishes or stops answering, a command the OOM killer ends, a
// start that fails or waits first. They act on the same sandboxes as the
// Driver (and every handle Reopen made).
type Faults struct{ w *world }

// Faults returns d's faults.
func (d *Driver) Faults() Faults { return Faults{d.w} }

// Die makes the sandbox's processes die, as a crash or the memory limit
// would: its agent stops, its commands are killed, and State reports it
// stopped, with oomKilled. The sandbox stays known, so Start wakes it. It
// returns driver.ErrNotFound for an unknown id.
func (f Faults) Die(id string, oomKilled bool) error {
	return f.w.kill(id, oomKilled, false, "Die")
}

// Vanish makes the runtime lose the sandbox without a Delete, as a host
// reboot that wiped the runtime's state would: its agent stops and State,
// Dial and Recover no longer know it. Its root is untouched. It returns
// driver.ErrNotFound for an unknown id.
func (f Faults) Vanish(id string) error {
	return f.w.kill(id, false, true, "Vanish")
}

// Deafen makes running sandbox id's agent stop listening while the
// sandbox keeps running, as when it died or its root removed its socket:
// Dial then fails with driver.ErrUnreachable until the next Start. It
// returns driver.ErrNotFound for an unknown id.
func (f Faults) Deafen(id string) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	b := f.w.sandboxes[id]
	if b == nil {
		return fmt.Errorf("fake: Deafen(%s): %w", id, driver.ErrNotFound)
	}
	b.deaf = true
	return nil
}

// OOMNextExec makes the result of the next command run in sandbox id
// (through a connection Dial opens from now on) report OOMKilled, as if the
// sandbox's memory limit had killed it; the command itself runs as usual,
// so give it one that kills itself (kill -9 $$) for a faithful result. It
// returns driver.ErrNotFound for an unknown id.
func (f Faults) OOMNextExec(id string) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	b := f.w.sandboxes[id]
	if b == nil {
		return fmt.Errorf("fake: OOMNextExec(%s): %w", id, driver.ErrNotFound)
	}
	b.oomExecs++
	return nil
}

func (w *world) takeOOMExec(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.sandboxes[id]
	if b == nil || b.oomExecs == 0 {
		return false
	}
	b.oomExecs--
	return true
}

// FailStart makes every later Start fail with err, changing nothing, until
// FailStart(nil).
func (f Faults) FailStart(err error) {
	if err == nil {
		f.SetStartHook(nil)
		return
	}
	f.SetStartHook(func(context.Context, driver.Spec) error { return err })
}

// SetStartHook makes every later Start call fn first, with Start's
// arguments; when fn returns an error, Start returns it and changes
// nothing. fn may call the Driver. A nil fn removes the hook.
func (f Faults) SetStartHook(fn func(ctx context.Context, spec driver.Spec) error) {
	f.w.mu.Lock()
	f.w.startHook = fn
	f.w.mu.Unlock()
}

// Calls returns the driver.Driver calls made so far, through d or any
// handle Reopen made, in order.
func (d *Driver) Calls() []Call {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return slices.Clone(d.w.calls)
}

// Count returns how many calls of op named id (any id when id is "").
func (d *Driver) Count(op Op, id string) int {
	n := 0
	for _, c := range d.Calls() {
		if c.Op == op && (id == "" || c.ID == id) {
			n++
		}
	}
	return n
}

// Spec returns the spec the sandbox was last started with, and whether
// the driver knows the sandbox.
func (d *Driver) Spec(id string) (driver.Spec, bool) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	b := d.w.sandboxes[id]
	if b == nil {
		return driver.Spec{}, false
	}
	return b.spec, true
}

// Home returns the host directory that is the sandbox user's home, where
// commands start and relative paths resolve: Spec.Home inside Spec.RootFS.
// It is "" for an unknown id.
func (d *Driver) Home(id string) string {
	spec, ok := d.Spec(id)
	if !ok {
		return ""
	}
	return filepath.Join(spec.RootFS, filepath.Join("/", spec.Home))
}

// kill thaws id, stops its agent and marks it stopped (oomKilled says
// how), or forgets it when forget is set.
func (w *world) kill(id string, oomKilled, forget bool, what string) error {
	w.mu.Lock()
	b := w.sandboxes[id]
	if b == nil {
		w.mu.Unlock()
		return fmt.Errorf("fake: %s(%s): %w", what, id, driver.ErrNotFound)
	}
	a := b.agent
	b.thaw()
	b.agent, b.status, b.pid, b.oomExecs = nil, driver.StatusStopped, 0, 0
	if a != nil {
		// Stopping a stopped sandbox keeps how it stopped.
		b.oomKilled = oomKilled
	}
	if forget {
		delete(w.sandboxes, id)
	}
	w.mu.Unlock()
	if a != nil {
		a.stop()
	}
	return nil
}

// stop shuts the agent down at once: its commands are killed and its
// connections closed. It returns when they are gone.
func (a *live) stop() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.srv.Shutdown(ctx)
	a.ln.Close()
	<-a.served
}
