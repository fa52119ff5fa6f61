package oci

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/network"
)

// Runtime names.
const (
	RuntimeRunsc = "runsc"
	RuntimeCrun  = "crun"
	RuntimeRunc  = "runc"
)

// ErrNoRuntime is returned by Detect (and by New when Options.Runtime is
// empty) when none of the runtimes is installed.
var ErrNoRuntime = errors.New("oci: no OCI runtime found (install runsc, crun or runc)")

// ErrNoEgress is returned by Start for an egress sandbox when the driver
// has no network host (Options.Network): it never starts one with no
// network, nor with an unfiltered one.
var ErrNoEgress = errors.New("oci: this driver cannot give sandboxes egress networking (no network host; see the daemon's log for why)")

// Detect returns the runtime to use on this host: runsc when lookPath finds
// it, because sandboxes run untrusted code and gVisor puts a user-space
// kernel between them and the host; then crun (the fastest container
// runtime); then runc. lookPath is exec.LookPath outside tests. It returns
// ErrNoRuntime when none is found.
//
// Detect only looks for binaries: Debian's crun 1.8.1 is found on a hybrid
// cgroup host but refuses to run there, and Start says so.
func Detect(lookPath func(file string) (string, error)) (string, error) {
	for _, rt := range []string{RuntimeRunsc, RuntimeCrun, RuntimeRunc} {
		if _, err := lookPath(rt); err == nil {
			return rt, nil
		}
	}
	return "", ErrNoRuntime
}

// Options configure a Driver. The zero value detects the runtime and keeps
// its state in /var/lib/hearth/oci/<runtime>.
type Options struct {
	// Runtime is RuntimeRunsc, RuntimeRunc or RuntimeCrun; empty detects
	// one with Detect.
	Runtime string
	// Binary is the runtime's executable; empty looks Runtime up in PATH.
	Binary string
	// StateDir is the host directory the driver owns (see the package
	// doc). It must persist across daemon restarts and must not be shared
	// with a driver of another runtime. Empty means
	// /var/lib/hearth/oci/<runtime>.
	StateDir string
	// CgroupParent is the cgroup, relative to the root of every hierarchy,
	// under which each sandbox gets <CgroupParent>/<id>. Empty means
	// "hearth". Two daemons on one host need different ones: the daemon
	// passes its instance's (package instance).
	CgroupParent string
	// RuntimeFlags are extra global flags for every runtime invocation,
	// after the driver's own, so they override them (for runsc, e.g.
	// "--platform=kvm" on a host with KVM, or "--debug-log=/tmp/runsc/").
	// They may not set --network, which the driver sets per sandbox.
	RuntimeFlags []string
	// Network attaches sandboxes whose Spec.Network is egress to the
	// host's network; nil means the driver runs sandboxes with no network
	// only (Capabilities says so, and an egress Start fails). The driver
	// owns it: Recover detaches every attachment of it whose sandbox the
	// driver does not know. The Host lists only its own attachments (its
	// name's namespaces, its state dir's records), so another daemon's
	// instance's sandboxes are never among them.
	Network *network.Host
	// IDBase, IDRanges and IDClaimDir are the user namespace ranges of
	// runc and crun sandboxes (see userns.go): range n is host uids and
	// gids IDBase+n*65536 to IDBase+n*65536+65535, for n below IDRanges,
	// and a start claims a free one with a file in IDClaimDir, which every
	// hearth daemon on the host must share. Zero values mean
	// DefaultIDBase, DefaultIDRanges and DefaultIDClaimDir.
	IDBase     uint32
	IDRanges   int
	IDClaimDir string
	// MountDir is the driver's own small tmpfs mount (see share.go): the
	// agent binary and resolv.conf files sandboxes bind-mount, and runc
	// roots while they start. It must be a path every user may traverse.
	// Empty means /run/hearth/oci/<a hash of StateDir>.
	MountDir string
	// StartTimeout bounds Start when its context has no deadline. Zero
	// means 30 seconds.
	StartTimeout time.Duration
	// Sealer seals the data key of each memory image (see images.go):
	// cmd/hearth passes the data dir's secrets box. Nil means a random key
	// of this Driver's own, in memory only: its images do not open after
	// a restart, and their checkpoints then restore their files only.
	Sealer Sealer
	// ReservedCPUs is how many of the host's CPUs are kept free of
	// demoted (CPU-saturating) sandboxes while sandboxes that are not
	// demoted are being called (see reserve.go); at most all but one are.
	// Zero keeps none.
	ReservedCPUs int
	// MemoryReserve is the host memory, in bytes, that a sandbox start
	// leaves available: a start is refused while the host's MemAvailable
	// is below it plus what a start takes (see hostlimit.go). Zero means
	// DefaultMemoryReserve of the host's memory; negative, no such check.
	MemoryReserve int64
	// Logger receives the driver's log; nil discards.
	Logger *slog.Logger
}

// Driver runs sandboxes with one OCI runtime. It is safe for concurrent use;
// calls on one id are serialized.
//
// The Driver implements driver.Driver and its optional capabilities, and
// orchestrates a start, a stop, a delete and a recovery; the parts it holds
// each do one job of them: the state directory's layout (stateDir), the
// runtime binary (runner), the cgroups (cgroups), freezing (freezer), the
// agent channels (channels), the mount directory (mountDir), the user
// namespace ranges (idClaims), the network attachments (networks), the
// bundles (bundles), the memory images (images) and the CPUs kept from
// demoted sandboxes (cpuReserve).
type Driver struct {
	runtime      string
	startTimeout time.Duration
	log          *slog.Logger
	locks        idLocks
	// quieting is held to read by Dial from its look for a quiet marker
	// until it has connected, and to write while a memory checkpoint
	// writes one: once the marker is there, every connection the daemon
	// makes to the agent before its quiet is made already.
	quieting sync.RWMutex

	dir      stateDir
	rt       *runner
	cg       *cgroups
	freezer  *freezer
	channels *channels
	mounts   *mountDir
	ids      *idClaims // runc and crun: user namespace ranges
	net      *networks
	bundles  *bundles
	images   *images
	reserve  *cpuReserve // nil: no CPUs kept from the demoted
	room     hostRoom
}

var _ driver.Driver = (*Driver)(nil)

// idLocks serializes the calls on each sandbox id. The zero value is
// ready.
type idLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

// idLock serializes the calls on one id; refs counts its holders and
// waiters so that the map does not keep every id ever used.
type idLock struct {
	sync.Mutex
	refs int
}

// lock serializes calls on id until the returned function is called.
func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	il := l.locks[id]
	if il == nil {
		il = &idLock{}
		if l.locks == nil {
			l.locks = map[string]*idLock{}
		}
		l.locks[id] = il
	}
	il.refs++
	l.mu.Unlock()
	il.Lock()
	return func() {
		il.Unlock()
		l.mu.Lock()
		if il.refs--; il.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}

// New returns a driver for opts.Runtime. It resolves the runtime binary,
// creates the state directory, and refuses one that belongs to another
// runtime. It does not run the runtime: a runtime that cannot work on this
// host (crun on a hybrid cgroup host) fails at Start, with its own words.
func New(opts Options) (*Driver, error) {
	rt, bin, err := findRuntime(opts.Runtime, opts.Binary)
	if err != nil {
		return nil, err
	}
	state := opts.StateDir
	if state == "" {
		state = filepath.Join("/var/lib/hearth/oci", rt)
	}
	if state, err = filepath.Abs(state); err != nil {
		return nil, fmt.Errorf("oci: state dir: %w", err)
	}
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	cgMounts, err := readCgroupMounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	d := &Driver{runtime: rt, startTimeout: opts.StartTimeout, log: opts.Logger, dir: stateDir{path: state},
		room: hostRoom{files: procFiles, memReserve: opts.MemoryReserve}}
	if d.startTimeout <= 0 {
		d.startTimeout = 30 * time.Second
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.log = d.log.With("runtime", rt)
	parent := cmp.Or(strings.Trim(opts.CgroupParent, "/"), "hearth")
	d.cg = &cgroups{mounts: cgMounts, parent: parent, dir: d.dir, log: d.log}
	d.rt = &runner{name: rt, binary: bin, flags: append(runtimeFlags(rt), opts.RuntimeFlags...), dir: d.dir, cg: d.cg, log: d.log}
	d.freezer = &freezer{runtime: rt, dir: d.dir, cg: d.cg, rt: d.rt, log: d.log}
	d.reserve = newCPUReserve(cgMounts, parent, opts.ReservedCPUs, d.log)
	d.channels = &channels{runtime: rt, dir: d.dir, log: d.log, reserve: d.reserve}
	d.mounts = &mountDir{path: cmp.Or(opts.MountDir, defaultMountDir(state)), owner: state, sweep: opts.MountDir == ""}
	d.ids = &idClaims{base: cmp.Or(opts.IDBase, DefaultIDBase), ranges: cmp.Or(opts.IDRanges, DefaultIDRanges),
		dir: cmp.Or(opts.IDClaimDir, DefaultIDClaimDir), state: d.dir, log: d.log}
	d.net = &networks{host: opts.Network, locks: &d.locks, dir: d.dir, log: d.log}
	d.bundles = &bundles{runtime: rt, cgroupParent: parent, dir: d.dir, mounts: d.mounts, ids: d.ids, channels: d.channels, net: d.net}
	d.images = &images{dir: d.dir, rt: d.rt, cg: d.cg, sealer: opts.Sealer, log: d.log}
	if d.images.sealer == nil {
		d.images.sealer = ephemeralSealer()
	}
	if err := d.dir.claim(rt); err != nil {
		return nil, err
	}
	return d, nil
}

// findRuntime returns runtime (detected when "") and the path of its
// binary (found in PATH when "").
func findRuntime(runtime, binary string) (rt, bin string, err error) {
	rt = runtime
	if rt == "" {
		if rt, err = Detect(exec.LookPath); err != nil {
			return "", "", err
		}
	}
	switch rt {
	case RuntimeRunsc, RuntimeRunc, RuntimeCrun:
	default:
		return "", "", fmt.Errorf("oci: unknown runtime %q (want %s, %s or %s)", rt, RuntimeRunsc, RuntimeCrun, RuntimeRunc)
	}
	bin, err = exec.LookPath(cmp.Or(binary, rt))
	if err != nil {
		return "", "", fmt.Errorf("oci: %s: %w", rt, err)
	}
	return rt, bin, nil
}

// checkOptions refuses RuntimeFlags that set the network and user
// namespace ranges that do not fit in 32-bit ids.
func checkOptions(opts Options) error {
	for _, f := range opts.RuntimeFlags {
		if f == "--network" || strings.HasPrefix(f, "--network=") {
			return fmt.Errorf("oci: RuntimeFlags may not set %s: the driver sets --network per sandbox (Spec.Network)", f)
		}
	}
	if opts.IDRanges < 0 || uint64(cmp.Or(opts.IDBase, DefaultIDBase))+uint64(cmp.Or(opts.IDRanges, DefaultIDRanges))*idRangeSize > 1<<32-1 {
		return fmt.Errorf("oci: user namespace ranges: %d ranges of %d from %d do not fit in 32-bit ids", opts.IDRanges, idRangeSize, opts.IDBase)
	}
	return nil
}

// runtimeFlags are the driver's own global flags for rt.
//
// runsc:
//   - --platform=systrap: ptrace is slower and KVM needs /dev/kvm; systrap
//     works everywhere (override with RuntimeFlags on a KVM host).
//   - --overlay2=none: hearth manages the root filesystem itself (a
//     snapshot per sandbox), so writes must land in it, not in a memory
//     overlay that a stop would lose.
//   - --host-uds=create: lets the agent's listening socket be created on the
//     host through the gofer, so the daemon can connect to it; the sandbox
//     still cannot open any other host socket.
//   - --systrap-disable-fast-path: each sentry would otherwise decide on
//     its own to spin on the CPU, waiting for its stubs' next syscall
//     instead of sleeping, whenever that measured faster for it; on a host
//     that many sandboxes share, one sandbox's spinning is CPU the others
//     wait for. Measured with test/load (docs/BENCHMARKS.md, "Under
//     load"): creates 4–14% faster in each of six alternated pairs, busy
//     execs 87.7/s against 76.0/s, an idle sandbox's exec no slower.
//     RuntimeFlags may give --systrap-disable-fast-path=false (the last
//     one counts).
//
// runc and crun need none. The network is per sandbox: see networkFlags.
func runtimeFlags(rt string) []string {
	if rt == RuntimeRunsc {
		return []string{"--platform=systrap", "--overlay2=none", "--host-uds=create", "--systrap-disable-fast-path"}
	}
	return nil
}

// networkFlags are the global flags of the command that starts a sandbox
// in network mode (driver.Spec.Network) under rt. runsc gets
// --network=none, loopback only like the empty network namespace under
// runc and crun, or for egress --network=sandbox: gVisor's own network
// stack takes over the interfaces and routes of the namespace the sandbox
// is started in (the attachment's, see bundleSpec), so that no packet of
// the sandbox goes through the host kernel's stack but as a frame on its
// veth. runc and crun need none: the namespace is the spec's.
func networkFlags(rt, mode string) []string {
	if rt != RuntimeRunsc {
		return nil
	}
	if mode == driver.NetworkEgress {
		return []string{"--network=sandbox"}
	}
	return []string{"--network=none"}
}

// BareFlags are the global flags the driver gives runtime rt for a
// sandbox without a network (runtimeFlags and networkFlags): what a bare
// run of the runtime takes to start as hearth starts it, such as the
// baselines test/load measures beside hearth.
func BareFlags(rt string) []string {
	return append(runtimeFlags(rt), networkFlags(rt, driver.NetworkNone)...)
}

// Capabilities reports the runtime and its isolation: "gvisor" for runsc,
// "container" for runc and crun; and egress when the driver has a network
// host (Options.Network).
func (d *Driver) Capabilities() driver.Capabilities {
	iso := "container"
	if d.runtime == RuntimeRunsc {
		iso = "gvisor"
	}
	return driver.Capabilities{Runtime: d.runtime, Isolation: iso, CheapFreeze: d.runtime != RuntimeRunsc, Egress: d.net.host != nil,
		MemoryCheckpoint: d.runtime == RuntimeRunsc}
}

// StateDir returns the directory the driver owns.
func (d *Driver) StateDir() string { return d.dir.path }

// MountDir returns the driver's mount directory (see Options.MountDir).
func (d *Driver) MountDir() string { return d.mounts.path }

// Dial connects to the agent of sandbox id. It returns driver.ErrNotFound
// for an unknown id, and the connect error for a sandbox whose agent is not
// listening (stopped, or still starting). While a memory checkpoint has
// the agent quiet (see CheckpointMemory), it waits until the agent
// listens again or ctx ends.
func (d *Driver) Dial(ctx context.Context, id string) (net.Conn, error) {
	if validID(id) != nil {
		return nil, driver.ErrNotFound
	}
	ok, err := d.dir.known(id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, driver.ErrNotFound
	}
	// A memory checkpoint has the agent quiet for a moment: wait for it,
	// as for a frozen sandbox, without connecting meanwhile (a connection
	// the agent has not accepted when it closes its listener is reset).
	d.quieting.RLock()
	for d.dir.quiet(id) && ctx.Err() == nil {
		d.quieting.RUnlock()
		sleep(ctx, 2*time.Millisecond)
		d.quieting.RLock()
	}
	conn, err := d.channels.dial(ctx, id)
	d.quieting.RUnlock()
	if err != nil {
		if unreachable(err) {
			return nil, fmt.Errorf("oci: dial %s: %w: %w", id, driver.ErrUnreachable, err)
		}
		return nil, fmt.Errorf("oci: dial %s: %w", id, err)
	}
	return conn, nil
}

// unreachable reports whether err, from channels.dial, means that nothing
// listens where the agent should: no socket (or directory) there, a link,
// a mount or anything but a socket in its place, or a socket no one
// listens on. A full backlog (EAGAIN) or a deadline is not.
func unreachable(err error) bool {
	for _, errno := range []error{unix.ENOENT, unix.ECONNREFUSED, unix.ELOOP, unix.EXDEV, unix.ENOTDIR, errNotSocket} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// State reports what the runtime says about sandbox id: running with its
// init's host pid (under runsc, the sandbox process's), or stopped (the
// runtime's "created" counts as stopped: its agent is not running). A
// sandbox that Stop stopped is answered from its directory alone, and one
// whose container process is alive in its cgroup (see live) from /proc:
// running. Only the rest is asked of the runtime, which under runsc
// starts a process of ≈13 ms of CPU; the sweep asks about every running
// sandbox, and asking runsc cost a host of 1,000 idle sandboxes a quarter
// of its two cores.
// OOMKilled is best effort: the memory cgroup's oom_kill counter while the
// container exists, and what Stop recorded from it after. It returns
// driver.ErrNotFound for an unknown id.
func (d *Driver) State(ctx context.Context, id string) (driver.State, error) {
	return d.state(ctx, id, true)
}

// state is State; without fast it asks the runtime about a sandbox that
// Stop did not stop, as Recover must: a `run` that a killed daemon cut
// short can leave a sandbox process alive whose container never started.
func (d *Driver) state(ctx context.Context, id string, fast bool) (driver.State, error) {
	if validID(id) != nil {
		return driver.State{}, driver.ErrNotFound
	}
	if pid, ok := d.cg.live(id); fast && ok && !d.dir.stopped(id) {
		if known, err := d.dir.known(id); err == nil && known {
			return driver.State{ID: id, Status: driver.StatusRunning, PID: pid, OOMKilled: d.cg.oom(id)}, nil
		}
	}
	// The rest under the sandbox's lock: a runtime command that races a
	// Delete can make the container's lock file in the runtime's root
	// again after the Delete removed it, and nothing would remove it.
	defer d.locks.lock(id)()
	ok, err := d.dir.known(id)
	if err != nil {
		return driver.State{}, err
	}
	if !ok {
		return driver.State{}, driver.ErrNotFound
	}
	if d.dir.stopped(id) {
		_, err := os.Stat(d.dir.oomMarker(id))
		return driver.State{ID: id, Status: driver.StatusStopped, OOMKilled: err == nil}, nil
	}
	st, err := d.rt.state(ctx, id)
	if err != nil {
		return driver.State{}, fmt.Errorf("oci: state %s: %w", id, err)
	}
	out := driver.State{ID: id, Status: driver.StatusStopped}
	if st != nil {
		switch st.Status {
		case "running", "paused":
			out.Status, out.PID = driver.StatusRunning, st.Pid
		}
		out.OOMKilled = d.cg.oom(id)
	}
	if !out.OOMKilled {
		_, err := os.Stat(d.dir.oomMarker(id))
		out.OOMKilled = err == nil
	}
	return out, nil
}

// recoverState is State, retried for a moment: a runtime command that a
// killed daemon started (a `run --detach` half way) keeps going after it,
// and until it ends the runtime lists the container but cannot state it.
// With settled (no runtime command of the dead daemon was on its way on
// id: its busy lock is free and no `run --detach` left its pid), a
// container whose process is alive in its cgroup is running, as State's
// /proc answer says, without asking the runtime (under runsc a process of
// ≈13 ms of CPU: at a thousand sandboxes, 13 s before a restarted daemon
// served); only a half-made container is running to /proc while the
// runtime says otherwise.
func (d *Driver) recoverState(ctx context.Context, id string, settled bool) (driver.State, error) {
	var st driver.State
	var err error
	for delay := 10 * time.Millisecond; ; delay *= 2 {
		st, err = d.state(ctx, id, settled)
		if err == nil || errors.Is(err, driver.ErrNotFound) || delay > time.Second {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, err
		case <-time.After(delay):
		}
	}
}

// Recover returns the state of every sandbox in the state directory. It
// thaws every sandbox it finds frozen (see Freeze): only a daemon that
// died between Freeze and Thaw leaves one, and nothing else would ever thaw
// it. It also removes runtime containers that have no directory: they are
// what an interrupted Start or Delete left, never a sandbox the host knows;
// and likewise the runtime's files (see runner.removeStrays) and network
// attachments (see networks.recover).
func (d *Driver) Recover(ctx context.Context) ([]driver.State, error) {
	entries, err := os.ReadDir(d.dir.sandboxes())
	if err != nil {
		return nil, fmt.Errorf("oci: recover: %w", err)
	}
	var states []driver.State
	dirs := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || validID(e.Name()) != nil {
			continue
		}
		dirs[e.Name()] = true
		// A runtime command the dead daemon started (a pause, the quiet
		// signal) may still be on its way: it ends first.
		idle := d.rt.waitIdle(ctx, e.Name())
		unlock := d.locks.lock(e.Name())
		d.freezer.thawLeft(e.Name())
		unlock()
		d.channels.resumeLeftQuiet(e.Name())
		st, err := d.recoverState(ctx, e.Name(), idle && !exists(d.dir.runPidFile(e.Name())))
		if errors.Is(err, driver.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			// One sandbox the runtime cannot describe must not keep the
			// daemon from starting: report it stopped, and the next start
			// of it tears down whatever the runtime holds.
			d.log.Error("recover: the runtime cannot tell this sandbox's state; reporting it stopped", "sandbox", e.Name(), "err", err)
			st = driver.State{ID: e.Name(), Status: driver.StatusStopped}
		}
		states = append(states, st)
	}
	d.images.recover()
	d.cg.lowerRaised()
	listed, err := d.rt.list(ctx, d.dir.root())
	if err != nil {
		return nil, fmt.Errorf("oci: recover: %w", err)
	}
	for _, c := range listed {
		if dirs[c.ID] || validID(c.ID) != nil {
			continue
		}
		d.log.Warn("removing a runtime container with no sandbox directory", "sandbox", c.ID, "status", c.Status)
		if err := d.Delete(ctx, c.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
			d.log.Error("remove orphan container", "sandbox", c.ID, "err", err)
		}
	}
	if err := d.net.recover(ctx, dirs); err != nil {
		return nil, fmt.Errorf("oci: recover: %w", err)
	}
	if err := d.rt.removeStrays(dirs); err != nil {
		d.log.Error("recover: remove the runtime's files of sandboxes gone", "err", err)
	}
	d.recoverHostObjects(listed, dirs)
	return states, nil
}

// recoverHostObjects releases, under runc and crun, the id ranges claimed
// for sandboxes the runtime has no container of, and the roots mounted
// while a start was under way (a running sandbox's runtime has its own):
// what a daemon killed in between left. A sandbox keeps its range while
// the shared root lists its container (listed, even one the runtime
// cannot describe) or its own root exists (dirs are the sandboxes'
// directories): the own root goes only with its container, so two
// sandboxes never share a range. A runsc sandbox's shared tmpfs is left to
// its next Start or its Delete.
func (d *Driver) recoverHostObjects(listed []specs.State, dirs map[string]bool) {
	if d.runtime == RuntimeRunsc {
		return
	}
	keep := map[string]bool{}
	for _, c := range listed {
		keep[c.ID] = true
	}
	for id := range dirs {
		if exists(d.dir.runtimeRoot(id)) {
			keep[id] = true
		}
	}
	d.ids.recover(keep)
	roots, _ := os.ReadDir(filepath.Join(d.mounts.path, "roots"))
	for _, e := range roots {
		if err := unmountAll(filepath.Join(d.mounts.path, "roots", e.Name())); err != nil {
			d.log.Error("recover: unmount a root left mounted", "path", e.Name(), "err", err)
		}
	}
}
