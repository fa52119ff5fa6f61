package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/tracing"
)

// Options configure a Local node. Driver, Layers and AgentPath are
// required.
type Options struct {
	Driver driver.Driver
	Layers layers.Store
	// AgentPath is the host path of the static hearth-agent binary, every
	// sandbox's PID 1.
	AgentPath string
	// MemInfo returns the host's available and total memory in bytes;
	// nil knows of no pressure.
	MemInfo func() (available, total int64, err error)
	// Meter reads what running sandboxes use (oci.MeterOf); nil uses the
	// Driver's if it is a driver.Meter, else the node cannot tell.
	Meter driver.Meter
	// Images keeps the node's images in Layers, and ImageDir holds what
	// pulls download and imports spool (a private directory). Without
	// them the node has no image calls (the default image is a plain
	// committed snapshot, which HasImage finds).
	Images   *image.Store
	ImageDir string
	// Logger receives the node's events; nil discards.
	Logger *slog.Logger
	// Crash, set only by tests, is called at each crash point inside the
	// node's calls (between two of its durable steps), so that a test can
	// kill the daemon there: "start: root prepared", "checkpoint: frozen"
	// and "checkpoint: snapshot taken". Nil in production.
	Crash func(point string)
}

// Local is the node that runs sandboxes on this host, in process: its
// driver and layer store are the daemon's own.
type Local struct {
	localImages // the image calls
	opts        Options
	log         *slog.Logger
}

var _ Node = (*Local)(nil)
var _ AgentListeners = (*Local)(nil)

// NewLocal returns the node over opts' driver and layer store.
func NewLocal(opts Options) (*Local, error) {
	if opts.Driver == nil || opts.Layers == nil || opts.AgentPath == "" {
		return nil, errors.New("node: Driver, Layers and AgentPath are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Local{opts: opts, log: log}
	l.localImages = localImages{opts: &l.opts, log: log}
	return l, nil
}

// rootKey is the layer-store key of a sandbox's root filesystem.
func rootKey(id string) string { return "sb-" + id }

// checkpointKey is the layer-store name of a checkpoint's snapshot; its
// memory image is called by the checkpoint's id.
func checkpointKey(id string) string { return "ck-" + id }

// sandboxHostname is every sandbox's hostname (rootfs.Hostname).
const sandboxHostname = "sandbox"

// crash marks a point between two durable steps (see Options.Crash).
func (l *Local) crash(point string) {
	if l.opts.Crash != nil {
		l.opts.Crash(point)
	}
}

// Capabilities implements Node.
func (l *Local) Capabilities() Capabilities {
	c := l.opts.Driver.Capabilities()
	return Capabilities{Runtime: c.Runtime, Isolation: c.Isolation, Egress: c.Egress, MemoryCheckpoint: l.memory() != nil}
}

// memory returns the driver as a driver.MemoryCheckpointer when it is one
// and says it can checkpoint memory, nil otherwise.
func (l *Local) memory() driver.MemoryCheckpointer {
	if mc, ok := l.opts.Driver.(driver.MemoryCheckpointer); ok && l.opts.Driver.Capabilities().MemoryCheckpoint {
		return mc
	}
	return nil
}

// Start implements Node. The hostname and environment name no sandbox,
// so that a warm-pool member started before its claim looks exactly like
// a sandbox started for it.
func (l *Local) Start(ctx context.Context, spec Spec) (err error) {
	ctx, span := tracer.Start(ctx, "node.start", trace.WithAttributes(attribute.Bool("hearth.memory", spec.Memory != "")))
	defer func() { tracing.End(span, err) }()
	root, err := l.root(ctx, spec)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRoot, err)
	}
	ds := driver.Spec{
		ID:        spec.ID,
		RootFS:    root,
		AgentPath: l.opts.AgentPath,
		Hostname:  sandboxHostname,
		Resources: spec.Resources,
		Network:   spec.Network,
		Egress:    spec.Egress,
	}
	ds.Env, ds.UID, ds.GID, ds.Home, ds.WorkDir = runAs(spec.Config)
	switch mc := l.memory(); {
	case spec.Memory == "":
		return l.opts.Driver.Start(ctx, ds)
	case mc != nil:
		return mc.RestoreMemory(ctx, ds, spec.Memory)
	default:
		// Never a plain start in its place: the caller would report the
		// processes back.
		return errors.New("the driver cannot restore memory")
	}
}

// DefaultConfig is what the default image's sandboxes run under: the
// sandbox user (rootfs.User, UID, GID and Home) with a UTF-8 locale, in
// its home (which a Dockerfile FROM the default image starts in too).
var DefaultConfig = sandbox.ImageConfig{
	Env: []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
		"USER=sandbox",
		"LOGNAME=sandbox",
	},
	User: "sandbox", UID: 1000, GID: 1000, Home: "/home/sandbox", WorkingDir: "/home/sandbox",
}

// runAs is the environment, ids, home and working directory of a
// sandbox's commands under cfg (DefaultConfig when cfg has no Home). An
// image's environment without a PATH gets the default one (the driver's).
func runAs(cfg sandbox.ImageConfig) (env []string, uid, gid int, home, workdir string) {
	if cfg.Home == "" {
		cfg = DefaultConfig
	}
	return cfg.Env, cfg.UID, cfg.GID, cfg.Home, cfg.WorkingDir
}

// root returns the host path of the sandbox's root, preparing it from
// spec.Root and capping it the first time.
func (l *Local) root(ctx context.Context, spec Spec) (string, error) {
	info, err := l.opts.Layers.Stat(ctx, rootKey(spec.ID))
	if err == nil {
		return info.Path, nil
	}
	if !errors.Is(err, layers.ErrNotFound) {
		return "", fmt.Errorf("stat root: %w", err)
	}
	if spec.Root.Received {
		return "", fmt.Errorf("the root another node sent is not here: %w", err)
	}
	from := spec.Root.Image
	if spec.Root.Checkpoint != "" {
		from = checkpointKey(spec.Root.Checkpoint)
	}
	path, err := l.opts.Layers.Prepare(ctx, rootKey(spec.ID), from)
	if err != nil {
		return "", fmt.Errorf("prepare root from %s: %w", from, err)
	}
	if err := l.limitDisk(ctx, spec); err != nil {
		return "", err
	}
	l.crash("start: root prepared")
	return path, nil
}

// limitDisk caps what the sandbox's root may hold beyond its source. A
// layer store that cannot enforce limits (btrfs without quotas, the
// overlay fallback) is logged, not fatal: the sandbox then runs without a
// cap.
func (l *Local) limitDisk(ctx context.Context, spec Spec) error {
	err := l.opts.Layers.SetLimit(ctx, rootKey(spec.ID), spec.Resources.DiskBytes)
	if errors.Is(err, layers.ErrUnsupported) {
		l.log.Warn("the layer store cannot enforce disk limits", "id", spec.ID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("limit disk: %w", err)
	}
	return nil
}

// Stop implements Node.
func (l *Local) Stop(ctx context.Context, id string) (err error) {
	ctx, span := tracer.Start(ctx, "node.stop")
	defer func() { tracing.End(span, err) }()
	return l.opts.Driver.Stop(ctx, id)
}

// tracer makes the node's spans (see package tracing).
var tracer = tracing.Tracer("github.com/hearth/hearth/node")

// State implements Node.
func (l *Local) State(ctx context.Context, id string) (State, error) {
	return l.opts.Driver.State(ctx, id)
}

// Dial implements Node.
func (l *Local) Dial(ctx context.Context, id string) (net.Conn, error) {
	return l.opts.Driver.Dial(ctx, id)
}

// AgentsListening implements AgentListeners with the driver's
// (driver.AgentListeners); a driver that cannot tell leaves every id out.
func (l *Local) AgentsListening(ctx context.Context, ids []string) (map[string]bool, error) {
	al, ok := l.opts.Driver.(driver.AgentListeners)
	if !ok {
		return nil, nil
	}
	return al.AgentsListening(ctx, ids)
}

// SetEgress implements Node. A driver that is no driver.EgressSetter
// offers no egress network, so it runs no sandbox to change.
func (l *Local) SetEgress(ctx context.Context, id string, rules EgressRules) error {
	setter, ok := l.opts.Driver.(driver.EgressSetter)
	if !ok {
		return nil
	}
	return setter.SetEgress(ctx, id, rules)
}

// Delete implements Node.
func (l *Local) Delete(ctx context.Context, id string) error { return l.opts.Driver.Delete(ctx, id) }

// RemoveRoot implements Node.
func (l *Local) RemoveRoot(ctx context.Context, id string) error {
	return l.remove(ctx, rootKey(id))
}

// remove removes snapshot key; a missing one is no error.
func (l *Local) remove(ctx context.Context, key string) error {
	if err := l.opts.Layers.Remove(ctx, key); err != nil && !errors.Is(err, layers.ErrNotFound) {
		return err
	}
	return nil
}

// Rollback implements Node.
func (l *Local) Rollback(ctx context.Context, id, ck string) (err error) {
	ctx, span := tracer.Start(ctx, "node.rollback")
	defer func() { tracing.End(span, err) }()
	_, err = l.opts.Layers.Reset(ctx, rootKey(id), checkpointKey(ck))
	return err
}

// DeleteCheckpoint implements Node: the snapshot, then the memory image
// (whatever the control plane recorded: a daemon killed between the image
// and its record leaves one it does not know of).
func (l *Local) DeleteCheckpoint(ctx context.Context, ck string) error {
	err := l.remove(ctx, checkpointKey(ck))
	if mc := l.memory(); mc != nil {
		if merr := mc.DeleteMemory(ctx, ck); merr != nil {
			err = errors.Join(err, fmt.Errorf("memory image: %w", merr))
		}
	}
	return err
}

// mover is the layer store's Mover, or an error wrapping ErrUnsupported.
func (l *Local) mover() (layers.Mover, error) {
	m, ok := l.opts.Layers.(layers.Mover)
	if !ok {
		return nil, fmt.Errorf("node: this node's layer store cannot move a root to another node: %w", layers.ErrUnsupported)
	}
	return m, nil
}

// memoryMover is the driver's MemoryMover, or an error wrapping
// ErrUnsupported.
func (l *Local) memoryMover() (driver.MemoryMover, error) {
	mm, ok := l.memory().(driver.MemoryMover)
	if !ok {
		return nil, fmt.Errorf("node: this node's runtime cannot move a memory image to another node: %w", errors.ErrUnsupported)
	}
	return mm, nil
}

// transfer is the layer keys of what t names and of its base.
func transfer(t Transfer) (key, base string) {
	if t.Layer != "" {
		return t.Layer, t.Image
	}
	key, base = rootKey(t.ID), t.Image
	if t.Checkpoint != "" {
		key = checkpointKey(t.Checkpoint)
	}
	if t.Prev != "" {
		base = checkpointKey(t.Prev)
	}
	return key, base
}

// SendSnapshot implements Node. The root of a fork (t.Fork) is made from
// its checkpoint for the send, and removed after it.
func (l *Local) SendSnapshot(ctx context.Context, t Transfer, w io.Writer) error {
	if t.Memory {
		mm, err := l.memoryMover()
		if err != nil {
			return err
		}
		return mm.SendMemory(ctx, t.Checkpoint, w)
	}
	m, err := l.mover()
	if err != nil {
		return err
	}
	key, base := transfer(t)
	if t.Fork != "" && t.Checkpoint == "" {
		if _, err := l.opts.Layers.Prepare(ctx, key, checkpointKey(t.Fork)); err != nil && !errors.Is(err, layers.ErrExists) {
			return fmt.Errorf("prepare the fork's root from checkpoint %s: %w", t.Fork, err)
		}
		defer func() {
			if err := l.remove(context.WithoutCancel(ctx), key); err != nil {
				l.log.Error("remove the root of a fork sent to another node", "id", t.ID, "err", err)
			}
		}()
	}
	return m.Send(ctx, key, base, w)
}

// ReceiveSnapshot implements Node: a stream that is not SendSnapshot's is
// invalid_argument.
func (l *Local) ReceiveSnapshot(ctx context.Context, t Transfer, r io.Reader) error {
	if t.Memory {
		mm, err := l.memoryMover()
		if err != nil {
			return err
		}
		if err := mm.ReceiveMemory(ctx, t.Checkpoint, r); errors.Is(err, driver.ErrInvalidImage) {
			return sandbox.Errorf(sandbox.CodeInvalidArgument, "the stream is not a memory image another node sent: %v", err)
		} else if err != nil {
			return err
		}
		return nil
	}
	m, err := l.mover()
	if err != nil {
		return err
	}
	key, base := transfer(t)
	if _, err := m.Receive(ctx, key, base, r); err != nil {
		switch {
		case errors.Is(err, layers.ErrExists) && (t.Checkpoint != "" || t.Layer != ""):
			_, err = io.Copy(io.Discard, r)
			return err
		case errors.Is(err, layers.ErrExists):
			return sandbox.Errorf(sandbox.CodeAlreadyExists, "sandbox %s has a root on this node already", t.ID)
		case errors.Is(err, layers.ErrInvalid):
			return sandbox.Errorf(sandbox.CodeInvalidArgument, "the stream is not a snapshot another node sent: %v", err)
		}
		return err
	}
	if t.Checkpoint != "" || t.Layer != "" {
		return nil
	}
	if err := l.limitDisk(ctx, Spec{ID: t.ID, Resources: sandbox.Resources{DiskBytes: t.DiskBytes}}); err != nil {
		return errors.Join(err, l.remove(ctx, key))
	}
	return nil
}

// Usage implements Node.
func (l *Local) Usage(ctx context.Context, id string) (int64, error) {
	return l.opts.Layers.Usage(ctx, rootKey(id))
}

// Meter implements Node.
func (l *Local) Meter(ctx context.Context, id string, processes bool) (Usage, error) {
	m := l.opts.Meter
	if m == nil {
		m, _ = l.opts.Driver.(driver.Meter)
	}
	if m == nil {
		return Usage{}, fmt.Errorf("node: the runtime reports no usage: %w", errors.ErrUnsupported)
	}
	return m.Usage(ctx, id, processes)
}

// HasImage implements Node: an image is a committed snapshot.
func (l *Local) HasImage(ctx context.Context, name string) (bool, error) {
	info, err := l.opts.Layers.Stat(ctx, name)
	if errors.Is(err, layers.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.Kind == layers.KindCommitted, nil
}

// MemInfo implements Node.
func (l *Local) MemInfo(ctx context.Context) (available, total int64, err error) {
	if l.opts.MemInfo == nil {
		return 0, 0, nil
	}
	return l.opts.MemInfo()
}

// Recover implements Node: the driver's Recover (which thaws what a
// killed daemon left frozen and finishes its memory images), then what
// the layer store holds (when it can list it) and the driver's memory
// images (when it can list them).
func (l *Local) Recover(ctx context.Context) (Inventory, error) {
	var inv Inventory
	var err error
	if inv.Sandboxes, err = l.opts.Driver.Recover(ctx); err != nil {
		return Inventory{}, err
	}
	if walker, ok := l.opts.Layers.(interface {
		Walk(ctx context.Context, fn func(layers.Info) error) error
	}); ok {
		inv.Listed = true
		if err := walker.Walk(ctx, func(info layers.Info) error {
			if id, ok := strings.CutPrefix(info.Key, "sb-"); ok && info.Kind == layers.KindActive {
				inv.Roots = append(inv.Roots, id)
			}
			if id, ok := strings.CutPrefix(info.Key, "ck-"); ok && info.Kind == layers.KindCommitted {
				inv.Checkpoints = append(inv.Checkpoints, id)
			}
			if image.IsKey(info.Key) {
				inv.ImageKeys = append(inv.ImageKeys, info.Key)
			}
			return nil
		}); err != nil {
			return Inventory{}, err
		}
	}
	if lister, ok := l.memory().(interface {
		MemoryImages(ctx context.Context) ([]string, error)
	}); ok {
		if inv.MemoryImages, err = lister.MemoryImages(ctx); err != nil {
			l.log.Error("list memory images", "err", err)
		}
	}
	return inv, nil
}
