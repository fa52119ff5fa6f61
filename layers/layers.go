// Package layers keeps images, sandbox roots and (later) checkpoints as
// copy-on-write snapshots, following containerd's snapshotter model:
//
//   - a committed snapshot is immutable and has a name (an image, a
//     checkpoint); it may be the parent of any number of snapshots;
//   - an active snapshot has a key, is writable, and is what a sandbox's
//     root filesystem is; Prepare makes one from a committed parent (or
//     empty), Commit turns one into a committed snapshot;
//   - Remove deletes either kind; a committed snapshot whose children are
//     still there may be refused (ErrInUse) or kept alive by the backend.
//
// The default backend is btrfs (subvolume snapshots: O(1) in the data
// written), on the data dir itself when it is btrfs, else on a sparse image
// file loop-mounted under the data dir. layerstest is the conformance suite.
package layers

import (
	"context"
	"errors"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrNotFound: no snapshot has that key or name.
	ErrNotFound = errors.New("layers: snapshot not found")
	// ErrExists: a snapshot with that key or name already exists.
	ErrExists = errors.New("layers: snapshot exists")
	// ErrInUse: a committed snapshot still has children.
	ErrInUse = errors.New("layers: snapshot in use")
)

// Kind says whether a snapshot is writable.
type Kind string

// Snapshot kinds.
const (
	KindActive    Kind = "active"
	KindCommitted Kind = "committed"
)

// Info describes one snapshot.
type Info struct {
	Key    string
	Kind   Kind
	Parent string
	// Path is the host directory holding the snapshot's files.
	Path string
}

// Store is the snapshot contract. Keys and names share one namespace of
// path-safe strings ([a-z0-9][a-z0-9._-]*, at most 128 bytes; anything else
// is rejected, so no key can name a path outside the store).
type Store interface {
	// Prepare creates the active snapshot key from the committed snapshot
	// parent ("" for an empty one) and returns its host path. It costs
	// O(1) in the size of parent.
	Prepare(ctx context.Context, key, parent string) (string, error)
	// Commit turns the active snapshot key into the committed snapshot
	// name; key no longer exists afterwards.
	Commit(ctx context.Context, name, key string) error
	// Stat describes a snapshot, or returns ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// Remove deletes a snapshot and reclaims its space once nothing else
	// shares it. Removing a missing key returns ErrNotFound.
	Remove(ctx context.Context, key string) error
	// Usage is the number of bytes the snapshot holds beyond its parent's.
	Usage(ctx context.Context, key string) (int64, error)
}
