package node

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/hearth/hearth/sandbox"
)

// ErrNoRuntime is returned (wrapped) by every call of None that would
// need a runtime or a layer store.
var ErrNoRuntime = errors.New("node: this daemon runs no sandbox (a fleet's control plane): its nodes do")

// None is the node of a control plane whose sandboxes run on the nodes of
// a fleet (lifecycle.Options.Fleet): it holds nothing and runs nothing.
// Capabilities reports Caps, those of the fleet's nodes; Recover reports
// an empty inventory that is not Listed, so that nothing is taken for
// missing; Stop, State, Dial, SetEgress, Meter and Delete answer ErrNotFound (no
// sandbox is here); RemoveRoot, DeleteCheckpoint and RemoveImageKeys do
// nothing; every other call fails with ErrNoRuntime.
type None struct {
	Caps Capabilities
}

var _ Node = None{}

// Capabilities is n.Caps.
func (n None) Capabilities() Capabilities { return n.Caps }

// SendSnapshot fails: see None.
func (None) SendSnapshot(context.Context, Transfer, io.Writer) error { return ErrNoRuntime }

// ReceiveSnapshot fails: see None.
func (None) ReceiveSnapshot(context.Context, Transfer, io.Reader) error { return ErrNoRuntime }

// Start fails: see None.
func (None) Start(context.Context, Spec) error { return ErrNoRuntime }

// Stop answers ErrNotFound.
func (None) Stop(context.Context, string) error { return ErrNotFound }

// State answers ErrNotFound.
func (None) State(context.Context, string) (State, error) { return State{}, ErrNotFound }

// Dial answers ErrNotFound.
func (None) Dial(context.Context, string) (net.Conn, error) { return nil, ErrNotFound }

// SetEgress answers ErrNotFound.
func (None) SetEgress(context.Context, string, EgressRules) error { return ErrNotFound }

// Checkpoint fails: see None.
func (None) Checkpoint(context.Context, string, string, CheckpointOptions) error {
	return ErrNoRuntime
}

// Meter answers ErrNotFound.
func (None) Meter(context.Context, string, bool) (Usage, error) { return Usage{}, ErrNotFound }

// Rollback fails: see None.
func (None) Rollback(context.Context, string, string) error { return ErrNoRuntime }

// DeleteCheckpoint does nothing.
func (None) DeleteCheckpoint(context.Context, string) error { return nil }

// Delete answers ErrNotFound.
func (None) Delete(context.Context, string) error { return ErrNotFound }

// RemoveRoot does nothing.
func (None) RemoveRoot(context.Context, string) error { return nil }

// Usage fails: see None.
func (None) Usage(context.Context, string) (int64, error) { return 0, ErrNoRuntime }

// HasImage reports false.
func (None) HasImage(context.Context, string) (bool, error) { return false, nil }

// PullImage fails: see None.
func (None) PullImage(context.Context, PullRequest) (sandbox.Image, error) {
	return sandbox.Image{}, ErrNoRuntime
}

// ImportImage fails: see None.
func (None) ImportImage(context.Context, ImportRequest) (sandbox.Image, error) {
	return sandbox.Image{}, ErrNoRuntime
}

// CommitImage fails: see None.
func (None) CommitImage(context.Context, string, string, sandbox.ImageConfig) (sandbox.Image, error) {
	return sandbox.Image{}, ErrNoRuntime
}

// ApplyImage fails: see None.
func (None) ApplyImage(context.Context, string, string, io.Reader, sandbox.ImageConfig) (sandbox.Image, error) {
	return sandbox.Image{}, ErrNoRuntime
}

// ResolveUser fails: see None.
func (None) ResolveUser(context.Context, string, string) (int, int, error) { return 0, 0, ErrNoRuntime }

// ExportImage fails: see None.
func (None) ExportImage(context.Context, sandbox.Image, io.Writer) error { return ErrNoRuntime }

// RemoveImageKeys does nothing.
func (None) RemoveImageKeys(context.Context, []string) error { return nil }

// Recover reports an empty inventory that is not Listed.
func (None) Recover(context.Context) (Inventory, error) { return Inventory{}, nil }

// MemInfo reports that the node does not know (total 0).
func (None) MemInfo(context.Context) (int64, int64, error) { return 0, 0, nil }
