package node

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/tracing"
)

// Checkpoint implements Node. The root's dirty data is written out first
// (a snapshot's cost grows with what the sandbox wrote lately, ≈300 ms
// for 500 MB), so that the time the sandbox is held still is the
// snapshot itself. With opts.Stop a running sandbox ends stopped: at the
// snapshot's instant with its memory, stopped before it without.
func (l *Local) Checkpoint(ctx context.Context, id, ck string, opts CheckpointOptions) (err error) {
	ctx, span := tracer.Start(ctx, "node.checkpoint", trace.WithAttributes(attribute.Bool("hearth.memory", opts.Memory)))
	defer func() { tracing.End(span, err) }()
	if info, err := l.opts.Layers.Stat(ctx, rootKey(id)); err == nil {
		layers.Syncfs(info.Path)
	}
	if opts.Memory {
		mc := l.memory()
		if mc == nil {
			return errors.New("the driver cannot checkpoint memory")
		}
		return l.checkpointMemory(ctx, id, ck, opts.Stop, mc)
	}
	if opts.Stop && opts.Running {
		if err := l.Stop(ctx, id); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
		opts.Running = false
	}
	return l.snapshot(ctx, id, ck, opts.Running)
}

// snapshot takes checkpoint ck of sandbox id's root, freezing a running
// sandbox around it when the driver can and the snapshot needs it.
func (l *Local) snapshot(ctx context.Context, id, ck string, running bool) error {
	if fr, ok := l.opts.Driver.(driver.Freezer); ok && running && l.freezeForSnapshots() {
		if err := fr.Freeze(ctx, id); err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		// A killed daemon runs no defer: Recover's driver.Recover thaws
		// what it left frozen.
		defer func() {
			if err := fr.Thaw(context.WithoutCancel(ctx), id); err != nil {
				l.log.Error("thaw after checkpoint", "id", id, "err", err)
			}
		}()
		l.crash("checkpoint: frozen")
	}
	if err := l.opts.Layers.Snapshot(ctx, checkpointKey(ck), rootKey(id)); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	l.crash("checkpoint: snapshot taken")
	return nil
}

// atomicSnapshotter is a layer store whose Snapshot captures the active
// snapshot at one instant (btrfs: one snapshot ioctl), so that a snapshot
// of a running sandbox is crash-consistent without a freeze: it holds
// every write that completed before it and none after, as a power cut
// would.
type atomicSnapshotter interface{ AtomicSnapshots() bool }

// freezeForSnapshots says whether a live checkpoint freezes the sandbox:
// always when freezing is cheap (a cgroup freezer), and otherwise (gVisor's
// pause, ≈30 ms) only when the layer store copies rather than snapshots at
// one instant.
func (l *Local) freezeForSnapshots() bool {
	if l.opts.Driver.Capabilities().CheapFreeze {
		return true
	}
	a, ok := l.opts.Layers.(atomicSnapshotter)
	return !ok || !a.AtomicSnapshots()
}

// checkpointMemory takes checkpoint ck of running sandbox id with its
// memory: the driver holds the sandbox still while the root's snapshot is
// taken, and saves its memory as the image called ck; with stop it leaves
// the sandbox stopped there. A failure leaves neither.
func (l *Local) checkpointMemory(ctx context.Context, id, ck string, stop bool, mc driver.MemoryCheckpointer) error {
	snapped := false
	err := mc.CheckpointMemory(ctx, id, ck, driver.MemoryOptions{Stop: stop, Paused: func() error {
		l.crash("checkpoint: frozen")
		if err := l.opts.Layers.Snapshot(ctx, checkpointKey(ck), rootKey(id)); err != nil {
			return err
		}
		snapped = true
		l.crash("checkpoint: snapshot taken")
		return nil
	}})
	if err == nil {
		return nil
	}
	if snapped {
		if rerr := l.remove(ctx, checkpointKey(ck)); rerr != nil {
			l.log.Error("remove the snapshot of a failed memory checkpoint", "checkpoint", ck, "err", rerr)
		}
	}
	// The image may be whole when what failed came after it (resuming
	// the sandbox): no checkpoint owns it now.
	if derr := mc.DeleteMemory(ctx, ck); derr != nil {
		l.log.Error("remove a checkpoint's memory image", "checkpoint", ck, "err", derr)
	}
	return err
}
