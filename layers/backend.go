package layers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
)

// What the backends share: the bookkeeping of their in-memory index of
// snapshots, and small helpers (see the package documentation).

// Guard is the state a backend keeps for one snapshot of its index, which
// orders the calls on the snapshot. A backend's index entry embeds it (see
// Index), and the backend's mutex, the one passed to Claim, guards it:
// every field and method is used with that mutex held.
//
// A call that makes a snapshot inserts its entry before it touches the
// disk, with Visible false and Busy set, so that the key is reserved; once
// it has succeeded it sets Visible and clears Busy (else it deletes the
// entry). A call that changes a snapshot (Commit, Remove, …) sets Busy
// with Claim, and clears it when it is done, unless it has deleted the
// entry (a Remove, a Commit of the key). A call that reads a snapshot's
// content (a Prepare from it, a Snapshot of it, …) counts itself in with
// Read and out with Release, and Claim waits for those in flight.
type Guard struct {
	// Visible is set once the snapshot exists: the call that made it has
	// succeeded, or the backend loaded it from disk.
	Visible bool
	// Busy is set while a call is making or changing the snapshot.
	Busy bool

	readers int           // Reads not Released yet
	drained chan struct{} // closed when readers drops to 0, if Claim waits
}

// guard gives Index the Guard of an entry that embeds one.
func (g *Guard) guard() *Guard { return g }

// Read counts in a call that reads the snapshot, until its Release. It
// checks nothing: it is the caller's lookup that turns readers away from a
// snapshot that is not Visible or is Busy (see Index).
func (g *Guard) Read() { g.readers++ }

// Release ends a Read, and wakes a Claim waiting for the last one.
func (g *Guard) Release() {
	g.readers--
	if g.readers == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// Claim marks g Busy for a call that changes its snapshot, then waits
// until no call reads it; being Busy, the snapshot gets no new readers
// meanwhile (Index's lookups turn them away). The caller holds mu, the
// mutex that guards g, and has checked that g is Visible and not Busy;
// Claim unlocks mu while it waits and returns with mu held. It returns nil
// once no Read is in flight, even if ctx has ended by then. If ctx ends
// while Reads are still in flight, it clears Busy again, leaving g as it
// was, and returns ctx.Err().
func (g *Guard) Claim(ctx context.Context, mu *sync.Mutex) error {
	g.Busy = true
	for g.readers > 0 {
		if g.drained == nil {
			g.drained = make(chan struct{})
		}
		drained := g.drained
		mu.Unlock()
		select {
		case <-drained:
		case <-ctx.Done():
		}
		mu.Lock()
		if err := ctx.Err(); err != nil && g.readers > 0 {
			g.Busy = false
			return err
		}
	}
	return nil
}

// Entry constrains the entries of an Index: a pointer to a backend's entry
// type, which embeds a Guard (whose unexported method only embedding
// provides) and reports the kind of its snapshot.
type Entry interface {
	guard() *Guard
	// SnapshotKind is the kind of the entry's snapshot.
	SnapshotKind() Kind
}

// Index is a backend's snapshots by key, guarded by the backend's mutex
// (see Guard), with the lookups its calls share. A lookup for the call op
// on key fails with an error that reads `op "key": …` and wraps one of
// the sentinel errors. Every entry of an Index is non-nil.
type Index[E Entry] map[string]E

// Get returns the entry of key if its snapshot is Visible, else
// ErrNotFound.
func (x Index[E]) Get(op, key string) (E, error) {
	e, ok := x[key]
	if !ok || !e.guard().Visible {
		var none E
		return none, fmt.Errorf("%s %q: %w", op, key, ErrNotFound)
	}
	return e, nil
}

// Idle returns the entry of key if its snapshot is Visible and no call is
// changing it (not Busy), else ErrNotFound or ErrInUse.
func (x Index[E]) Idle(op, key string) (E, error) {
	e, err := x.Get(op, key)
	if err == nil && e.guard().Busy {
		var none E
		return none, fmt.Errorf("%s %q: %w", op, key, ErrInUse)
	}
	return e, err
}

// Active returns the entry of key if it is an active snapshot no call is
// changing, else ErrNotFound, ErrInUse, or ErrInvalid (key is committed).
func (x Index[E]) Active(op, key string) (E, error) {
	e, err := x.Idle(op, key)
	if err == nil && e.SnapshotKind() != KindActive {
		var none E
		return none, fmt.Errorf("%s %q: not active: %w", op, key, ErrInvalid)
	}
	return e, err
}

// Committed returns the entry of parent, for op on key, if it is a
// committed snapshot no call is changing. Otherwise it fails with
// ErrNotFound (no such snapshot, one not Visible yet, or a Busy one) or
// ErrInvalid (parent is active); either error reads
// `op "key": parent "parent"…`.
func (x Index[E]) Committed(op, key, parent string) (E, error) {
	var none E
	p, ok := x[parent]
	switch {
	case !ok || !p.guard().Visible || p.guard().Busy:
		return none, fmt.Errorf("%s %q: parent %q: %w", op, key, parent, ErrNotFound)
	case p.SnapshotKind() != KindCommitted:
		return none, fmt.Errorf("%s %q: parent %q is not committed: %w", op, key, parent, ErrInvalid)
	}
	return p, nil
}

// ClaimReset is how a Reset of key onto parent starts: it looks key up
// as Active and parent as Committed, Claims key (see Guard.Claim), then
// looks parent up again, since parent may have gone while Claim waited.
// The caller holds mu, the mutex that guards x, and holds it again on
// return. It returns key's entry, now Busy, and parent's; or an error
// (the lookups', or Claim's wrapped as `reset "key": …`) with key left as
// it was.
func (x Index[E]) ClaimReset(ctx context.Context, mu *sync.Mutex, key, parent string) (e, p E, err error) {
	var none E
	e, err = x.Active("reset", key)
	if err == nil {
		_, err = x.Committed("reset", key, parent)
	}
	if err != nil {
		return none, none, err
	}
	if err := e.guard().Claim(ctx, mu); err != nil {
		return none, none, fmt.Errorf("reset %q: %w", key, err)
	}
	if p, err = x.Committed("reset", key, parent); err != nil {
		e.guard().Busy = false
		return none, none, err
	}
	return e, p, nil
}

// Derive is how a call that makes the snapshot name from the active
// snapshot key starts (a Commit, a Snapshot): it looks key up as Active,
// fails with ErrExists (`op "key" as "name": …`) if name is taken, and
// inserts made(key's entry), which must be Busy and not Visible, as name.
// It returns key's entry and name's. The caller holds the mutex that
// guards x.
func (x Index[E]) Derive(op, key, name string, made func(src E) E) (src, n E, err error) {
	var none E
	if src, err = x.Active(op, key); err != nil {
		return none, none, err
	}
	if _, ok := x[name]; ok {
		return none, none, fmt.Errorf("%s %q as %q: %w", op, key, name, ErrExists)
	}
	n = made(src)
	x[name] = n
	return src, n, nil
}

// ClaimIdle is how a call that changes or deletes key starts (a Remove):
// it looks key up as Idle and Claims it (see Guard.Claim), Claim's error
// wrapped as `op "key": …`. The caller holds mu, the mutex that guards x,
// and holds it again on return; on error key is left as it was.
func (x Index[E]) ClaimIdle(ctx context.Context, mu *sync.Mutex, op, key string) (E, error) {
	e, err := x.Idle(op, key)
	if err != nil {
		return e, err
	}
	if err := e.guard().Claim(ctx, mu); err != nil {
		var none E
		return none, fmt.Errorf("%s %q: %w", op, key, err)
	}
	return e, nil
}

// Infos returns info(key, e) for every Visible entry, in no particular
// order.
func (x Index[E]) Infos(info func(key string, e E) Info) []Info {
	infos := make([]Info, 0, len(x))
	for k, e := range x {
		if e.guard().Visible {
			infos = append(infos, info(k, e))
		}
	}
	return infos
}

// WalkInfos is the body of a Store's Walk: it checks ctx, calls list with
// mu held to copy what the store holds (list may fail instead, e.g. on a
// closed store), then calls fn for each Info listed, in order, without
// holding mu, and returns the first error of list or fn.
func WalkInfos(ctx context.Context, mu *sync.Mutex, list func() ([]Info, error), fn func(Info) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mu.Lock()
	infos, err := list()
	mu.Unlock()
	if err != nil {
		return err
	}
	for _, info := range infos {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// CheckDerive checks the arguments of a call that makes the snapshot name
// of key (a Commit, a Snapshot): ctx, key and name, as CheckArgs does.
func CheckDerive(ctx context.Context, key, name string) error {
	if err := CheckArgs(ctx, key, ""); err != nil {
		return err
	}
	return ValidateKey(name)
}

// CheckArgs checks the arguments a Store call starts with, in this order,
// and returns the first error: ctx (its error, if it has ended), key
// (ValidateKey), and parent (ValidateKey) unless parent is "".
func CheckArgs(ctx context.Context, key, parent string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	if parent != "" {
		return ValidateKey(parent)
	}
	return nil
}

// NewID returns a new random id, 16 lowercase hex digits (64 bits from
// crypto/rand), for a backend to name what it makes on disk.
func NewID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Fsync makes the file or directory at path durable with fsync(2): a
// file's data and metadata, a directory's entries.
func Fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
