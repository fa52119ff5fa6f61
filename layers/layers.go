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
	"fmt"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrNotFound: no snapshot has that key or name.
	ErrNotFound = errors.New("layers: snapshot not found")
	// ErrExists: a snapshot with that key or name already exists.
	ErrExists = errors.New("layers: snapshot exists")
	// ErrInUse: a committed snapshot still has children, or another call
	// is changing the snapshot right now.
	ErrInUse = errors.New("layers: snapshot in use")
	// ErrInvalid: a key or name breaks the naming rule, or the snapshot is
	// of the wrong kind for the call (a parent that is not committed, a
	// Commit of a committed snapshot).
	ErrInvalid = errors.New("layers: invalid argument")
)

// MaxKeyLen is the longest key or name, in bytes.
const MaxKeyLen = 128

// ValidateKey checks the naming rule every Store enforces on keys, names
// and parents: 1 to MaxKeyLen bytes of [a-z0-9._-], starting with a letter
// or digit. A valid key is a single path element that is neither "." nor
// "..", so a backend may use it as a file name. The error wraps ErrInvalid.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key %q must be 1 to %d bytes", ErrInvalid, key, MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("%w: key %q: byte %q at %d is not allowed (want [a-z0-9][a-z0-9._-]*)", ErrInvalid, key, c, i)
		}
	}
	return nil
}

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
// path-safe strings (see ValidateKey; anything else is rejected with
// ErrInvalid, so no key can name a path outside the store). Every method
// is safe for concurrent use; layerstest checks all of this.
type Store interface {
	// Prepare creates the active snapshot key from the committed snapshot
	// parent ("" for an empty one) and returns its host path, a writable
	// directory. It costs O(1) in the size of parent. It fails with
	// ErrExists if key is taken, ErrNotFound if parent is missing, and
	// ErrInvalid if parent is not committed.
	Prepare(ctx context.Context, key, parent string) (string, error)
	// Commit turns the active snapshot key into the committed snapshot
	// name, read-only from then on; key no longer exists afterwards. It
	// fails with ErrNotFound if key is missing, ErrExists if name is
	// taken, and ErrInvalid if key is already committed.
	Commit(ctx context.Context, name, key string) error
	// Stat describes a snapshot, or returns ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// Remove deletes a snapshot and reclaims its space once nothing else
	// shares it. Removing a missing key returns ErrNotFound; a committed
	// snapshot with children may be refused with ErrInUse.
	Remove(ctx context.Context, key string) error
	// Usage is the number of bytes the snapshot holds beyond its parent's,
	// or ErrNotFound.
	Usage(ctx context.Context, key string) (int64, error)
}
