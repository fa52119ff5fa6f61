// Package layers keeps images, sandbox roots and checkpoints as
// copy-on-write snapshots, following containerd's snapshotter model:
//
//   - a committed snapshot is immutable and has a name (an image, a
//     checkpoint); it may be the parent of any number of snapshots;
//   - an active snapshot has a key, is writable, and is what a sandbox's
//     root filesystem is; Prepare makes one from a committed parent (or
//     empty), Commit turns one into a committed snapshot, and Snapshot
//     makes a committed copy of one that stays active (a checkpoint of a
//     running sandbox);
//   - every snapshot owns its content: Remove deletes either kind at any
//     time, a committed snapshot with children included, and the children
//     keep their files. Parent is lineage, not a dependency.
//
// Restoring a checkpoint is Reset of the sandbox's active root to it (or
// Remove and Prepare); forking is Prepare under another key. SetLimit caps
// the disk space an active snapshot (a sandbox's root) may take.
// The tree of a sandbox's checkpoints is the caller's to keep (in its
// database): to layers each checkpoint is a committed snapshot whose parent
// is the image the sandbox was prepared from.
//
// This package is the contract: Store, its errors and naming rule. The
// backends sit beside it: layers/btrfs, the default (subvolume snapshots:
// O(1) in the data written), and layers/overlay, the fallback for kernels
// without btrfs; layers/fake is a directory-backed Store for tests, and
// layers/layerstest the conformance suite every backend passes.
//
// Guard, Index and the helpers beside them (CheckArgs, NewID, Fsync,
// Syncfs, LockDir, WalkInfos) are what the backends share; a caller of a
// Store needs none of them.
package layers

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrNotFound: no snapshot has that key or name.
	ErrNotFound = errors.New("layers: snapshot not found")
	// ErrExists: a snapshot with that key or name already exists.
	ErrExists = errors.New("layers: snapshot exists")
	// ErrInUse: another call is changing the snapshot (committing or
	// removing it) right now. It is transient. Children never make a
	// snapshot in use, nor do calls that only read it (Prepare from it,
	// Snapshot of it).
	ErrInUse = errors.New("layers: snapshot in use")
	// ErrInvalid: a key or name breaks the naming rule, or the snapshot is
	// of the wrong kind for the call (a parent that is not committed, a
	// Commit or Snapshot of a committed snapshot), or a number is out of
	// range (a negative limit).
	ErrInvalid = errors.New("layers: invalid argument")
	// ErrUnsupported: the store cannot do this on this host, e.g.
	// SetLimit on a btrfs without quotas. It also matches
	// errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("layers: %w", errors.ErrUnsupported)
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
	Key  string
	Kind Kind
	// Parent is the committed snapshot this one descends from: the parent
	// it was prepared from, kept by Commit and Snapshot. It is "" for a
	// snapshot prepared empty, and becomes "" when that parent is removed
	// (a later snapshot that reuses the name is not the parent), so a
	// non-empty Parent always names a committed snapshot that exists.
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
	// taken, ErrInvalid if key is already committed, and ErrInUse if
	// another call is changing key.
	Commit(ctx context.Context, name, key string) error
	// Snapshot makes the committed snapshot name, read-only, holding the
	// content of the active snapshot key at the time of the call; key
	// stays active and writable, at the same path, and later writes to it
	// do not show in name. Writes that completed before the call are in
	// name (durable or not); for a consistent image of a running
	// sandbox, the caller stops its writers around the call (freezes its
	// cgroup). name's Parent is key's Parent; name and key are
	// independent from then on: either may be removed first. It costs
	// O(1) in the data key holds (btrfs: one snapshot ioctl, after the
	// kernel writes out key's dirty pages) and is durable when it
	// returns. It fails with ErrNotFound if key is missing, ErrExists if
	// name is taken, ErrInvalid if key is committed, and ErrInUse if
	// another call is changing key.
	Snapshot(ctx context.Context, name, key string) error
	// Reset replaces the content of the active snapshot key with a new
	// writable snapshot of the committed snapshot parent (a restore) and
	// returns key's path, which may change. It is atomic: after a crash,
	// key holds the old content or the new, never neither.
	Reset(ctx context.Context, key, parent string) (string, error)
	// Stat describes a snapshot, or returns ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// Remove deletes a snapshot of either kind and reclaims the space
	// nothing else shares. A committed snapshot with children may be
	// removed: they keep their content, and their Parent becomes "".
	// Removing a missing key returns ErrNotFound, and a key another call
	// is changing ErrInUse.
	Remove(ctx context.Context, key string) error
	// Usage is the number of bytes charged to the snapshot: those written
	// into it beyond the content it was made with (its parent's, for one
	// made by Prepare; Commit keeps the count). A snapshot made by
	// Snapshot has nothing written into it: its content stays charged to
	// the active snapshot that wrote it, so its Usage is about 0 when it
	// is made. Usage fails with ErrNotFound.
	Usage(ctx context.Context, key string) (int64, error)
	// SetLimit caps what the active snapshot key may hold beyond the
	// content it was made with (what Usage counts) at bytes, or removes
	// the cap if bytes is 0; a new key has none. Past the cap, writes
	// inside key fail with EDQUOT ("Disk quota exceeded") or ENOSPC. A
	// cap below what key holds already is allowed: later writes fail. The
	// cap belongs to key: Reset keeps it (the new content starts at 0
	// against it), so does a reopen of the store, and Commit drops it
	// (committed snapshots take no writes); snapshots made from key start
	// with none. It fails with ErrNotFound (no key), ErrInvalid (key is
	// committed, bytes is negative), ErrInUse (another call is changing
	// key), or ErrUnsupported if the store cannot enforce a cap on this
	// host; those that can differ in what exactly they count (see each
	// backend). Removing a cap (bytes 0) on a store that cannot enforce
	// one succeeds: there is none.
	SetLimit(ctx context.Context, key string, bytes int64) error
}

// Mover is a Store that copies active snapshots to another Store of the
// same backend, on another machine: a sandbox's root moving between
// nodes. What goes over the wire is what the snapshot holds beyond a
// base, a committed snapshot whose content the receiver holds too (the
// sandbox's image).
type Mover interface {
	// Send writes the snapshot key, active or committed, to w as a
	// stream Receive reads: its content beyond the committed snapshot
	// base, or all of it when base is "". Nothing may write to an active
	// key meanwhile (its sandbox is stopped). It fails with ErrNotFound
	// (no key or base), ErrInvalid (base is not committed) or ErrInUse
	// (another call is changing key); an error writing to w is returned
	// as it is.
	Send(ctx context.Context, key, base string, w io.Writer) error
	// Receive creates the snapshot key, of the kind the sender's was,
	// from a stream Send wrote, on parent: the committed snapshot of this store whose content is
	// that of the sender's base ("" when the stream is whole). It
	// returns key's path. key's Parent is parent, and Usage counts what
	// the stream added. It fails with ErrExists (key taken), ErrNotFound
	// (no parent), ErrInvalid (parent is not committed, or the stream
	// needs a parent and none was named, or the reverse, or it is not a
	// stream Send wrote); a failed Receive leaves nothing behind.
	Receive(ctx context.Context, key, parent string, r io.Reader) (string, error)
}
