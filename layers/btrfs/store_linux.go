package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

// DefaultImageSize is the size of the sparse backing file when the data dir
// is not on btrfs. It is sparse, so this is a ceiling, not an allocation.
const DefaultImageSize = 64 << 30

// Options configures Open. Only Dir is required.
type Options struct {
	// Dir is the store's root, e.g. <data>/layers. It is created if missing.
	// If it is on btrfs it is used as it is; otherwise the store lives in a
	// backing file beside it (Dir + ".btrfs") loop-mounted at Dir.
	Dir string
	// ImageSize is the size in bytes of a new backing file (default
	// DefaultImageSize). It does not resize an existing one.
	ImageSize int64
	// Logger receives recovery and mount events; nil discards them.
	Logger *slog.Logger
}

// Store is the btrfs snapshot store: every snapshot is a subvolume,
// committed ones read-only, and Prepare and Snapshot are one snapshot ioctl
// each, O(1) in the size of the source. A snapshot's extents are reference
// counted, so every subvolume owns its content and any of them can be
// deleted at any time; the blocks go when the last one using them does.
//
// On disk, under Dir:
//
//	snapshots/<id>  one subvolume per snapshot; id is random and never
//	                changes, so Commit does not move an active snapshot
//	meta/<key>      its record: a symlink to {"id":…,"kind":…,"parent":…,
//	                "parent_id":…,"limit":…}
//	lock            flock'ed while a Store has the store open
//	moving/<stage>  a Send's or Receive's snapshots in the making (see
//	                move_linux.go); Open removes what a crash left
//
// Each call's commit point is an ioctl that commits a btrfs transaction:
// Prepare writes the record, then snapshots (or creates) the subvolume;
// Snapshot writes the new record, then snapshots the active subvolume
// read-only; Commit writes the new record, then sets the read-only flag,
// then drops the old record; Remove deletes the subvolume, then the record;
// SetLimit sets the kernel's limit, then replaces the record. So Prepare,
// Snapshot and Commit are durable when they return, with no fsync, and
// Open repairs whatever a crash between two steps left (see load).
// Remove and SetLimit are durable at the next transaction commit (at most
// 30 s by default).
//
// Dir, snapshots/ and meta/ are mode 0700: a sandbox's root holds setuid
// files that no host user may reach.
//
// A Store is safe for concurrent use. Calls on different keys run in
// parallel, and so do any number of Prepares from one parent and Snapshots
// of one key (they read it). A call that would change or read a key that
// another call is changing (committing, removing) fails with layers.ErrInUse
// rather than wait; a Commit or Remove of a key that calls are reading
// turns new readers away and waits for those in flight, one ioctl each.
// Only one Store may have a Dir open at a time, in any process.
type Store struct {
	dir, snapDir, metaDir string
	records               records
	subvols               subvols
	stages                stages
	backing               string // "" when Dir is natively on btrfs
	log                   *slog.Logger
	lock                  *layers.DirLock
	qgroups               string // sysfs qgroups dir when quotas are on, else ""
	inherits              bool   // quotas are full qgroups: snapshots inherit limits

	mu      sync.Mutex
	entries layers.Index[*entry]
	closed  bool
}

var _ layers.Store = (*Store)(nil)

// entry is a snapshot in the index. A Prepare, Commit or Snapshot inserts
// the new key before it touches the disk (invisible, busy) so that the name
// is reserved; Prepare, Reset and Snapshot also Read their source so that
// its subvolume stays while the ioctl reads it (see layers.Guard). Busy means a
// call is changing it (committing, resetting, removing it, setting its
// limit); its readers are the calls snapshotting it: Prepares from it,
// Resets to it, Snapshots of it.
type entry struct {
	record
	layers.Guard
}

// SnapshotKind is e's Kind, for layers.Index.
func (e *entry) SnapshotKind() layers.Kind { return e.Kind }

var errClosed = errors.New("layers: store closed")

// Open opens (creating if needed) the btrfs store at opts.Dir, mounting
// its backing file first if Dir is not on btrfs and not mounted yet. A
// mount that is already there is reused: the daemon restarts while
// sandboxes keep running on subvolumes inside it. A backing file that
// exists is mounted as it is, never reformatted. Open never unmounts;
// see Unmount and Destroy.
//
// Open then repairs what a crash in the middle of a call left behind (see
// Store) and loads the index. It fails with layers.ErrInUse if another Store
// has Dir open.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: btrfs.Options.Dir is empty", layers.ErrInvalid)
	}
	dir, err := makeDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		dir:     dir,
		snapDir: filepath.Join(dir, "snapshots"),
		metaDir: filepath.Join(dir, "meta"),
		records: records(filepath.Join(dir, "meta")),
		subvols: subvols(filepath.Join(dir, "snapshots")),
		stages:  stages{dir: filepath.Join(dir, "moving"), log: log.With("store", dir)},
		log:     log.With("store", dir),
		entries: make(layers.Index[*entry]),
	}
	if err := s.mount(ctx, opts.ImageSize); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	for _, d := range []string{s.snapDir, s.metaDir} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("layers: %w", err)
		}
	}
	if id, err := fsid(dir); err == nil {
		q := filepath.Join("/sys/fs/btrfs", id, "qgroups")
		if _, err := os.Stat(q); err == nil {
			s.qgroups = q
			s.inherits = inheritsLimits(q)
		}
	}
	lock, err := layers.LockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	s.lock = lock
	if err := (loader{records: s.records, subvols: s.subvols, entries: s.entries, log: s.log}).load(); err != nil {
		lock.Close()
		return nil, err
	}
	s.fixLimits()
	if err := s.stages.clear(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("layers: %w", err)
	}
	return s, nil
}

// makeDir creates dir (mode 0700) if missing and returns its absolute
// path with symlinks resolved, as mount points are listed.
func makeDir(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("layers: %w", err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return "", fmt.Errorf("layers: %w", err)
	}
	return dir, nil
}

// mount makes s.dir a btrfs, if it is not one: it mounts the backing file
// beside it, first formatting one of size bytes (DefaultImageSize if 0)
// if there is none. It sets s.backing when the store is on a backing
// file, mounted now or by an earlier Open.
func (s *Store) mount(ctx context.Context, size int64) error {
	dir, backing := s.dir, s.dir+".btrfs"
	native, err := isBtrfs(dir)
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	if native {
		if _, err := os.Stat(backing); err == nil && mountSource(dir) != "" {
			s.backing = backing // mounted by an earlier Open
		}
		return nil
	}
	// Never mount over files: a Dir that is not btrfs yet must be empty
	// (or hold only what a failed mount left: nothing).
	if des, err := os.ReadDir(dir); err != nil {
		return fmt.Errorf("layers: %w", err)
	} else if len(des) > 0 {
		return fmt.Errorf("layers: %s is not on btrfs and not empty: refusing to mount %s over it: %w", dir, backing, layers.ErrInvalid)
	}
	s.backing = backing
	if size <= 0 {
		size = DefaultImageSize
	}
	created := false
	if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
		s.log.Info("layers: formatting backing file", "file", backing, "size", size)
		if err := formatBacking(ctx, backing, size); err != nil {
			return fmt.Errorf("layers: format %s: %w", backing, err)
		}
		created = true
	}
	s.log.Info("layers: mounting backing file", "file", backing)
	if err := mountBacking(backing, dir); err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	if ok, err := isBtrfs(dir); err != nil || !ok {
		return fmt.Errorf("layers: %s after mounting %s: %w", dir, backing, errNotBtrfs)
	}
	if created {
		// Simple quotas cost nothing at snapshot time and give Usage (and
		// later per-sandbox limits) an exact number. They are only turned
		// on for a filesystem hearth made: on a host's own btrfs that is
		// the admin's decision.
		if err := enableQuota(dir); err != nil {
			s.log.Warn("layers: simple quotas unavailable; Usage walks the files", "err", err)
		}
	}
	return nil
}

// Dir is the store's root directory.
func (s *Store) Dir() string { return s.dir }

// Prepare creates the active snapshot key as a writable snapshot of the
// committed snapshot parent, or as an empty subvolume if parent is "", and
// returns its path. It fails with layers.ErrInvalid (bad key, or parent not
// committed), layers.ErrExists (key taken) or layers.ErrNotFound (no parent).
func (s *Store) Prepare(ctx context.Context, key, parent string) (string, error) {
	if err := layers.CheckArgs(ctx, key, parent); err != nil {
		return "", err
	}
	e, p, err := s.reserve("prepare", key, parent, layers.KindActive)
	if err != nil {
		return "", err
	}
	err = s.settle(key, e, p, s.prepare(key, e.record))
	if err != nil {
		return "", fmt.Errorf("prepare %q: %w", key, err)
	}
	return s.subvols.path(e.ID), nil
}

// reserve inserts key, a new snapshot of kind that op makes from the
// committed snapshot parent ("" for none): busy and not visible, with a
// new id, and parent read meanwhile (see layers.Guard). It fails with
// ErrExists when key is taken, and as Committed does for parent. settle
// ends what it starts.
func (s *Store) reserve(op, key, parent string, kind layers.Kind) (e, p *entry, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errClosed
	}
	if _, ok := s.entries[key]; ok {
		return nil, nil, fmt.Errorf("%s %q: %w", op, key, layers.ErrExists)
	}
	if parent != "" {
		if p, err = s.entries.Committed(op, key, parent); err != nil {
			return nil, nil, err
		}
		p.Read()
	}
	e = &entry{record: record{ID: layers.NewID(), Kind: kind}, Guard: layers.Guard{Busy: true}}
	if p != nil {
		e.Parent, e.ParentID = parent, p.ID
	}
	s.entries[key] = e
	return e, p, nil
}

// settle ends a reserve of key, whose making ended with err: parent p is
// released, and key becomes visible, or goes on an error. It returns err.
func (s *Store) settle(key string, e, p *entry, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p != nil {
		p.Release()
	}
	if err != nil {
		delete(s.entries, key)
		return err
	}
	e.Visible, e.Busy = true, false
	return nil
}

// active returns the entry of key for op when it is an active snapshot no
// call is changing (see layers.Index.Active). The caller holds s.mu.
func (s *Store) active(op, key string) (*entry, error) {
	if s.closed {
		return nil, errClosed
	}
	return s.entries.Active(op, key)
}

// derive reserves name for op, a call that makes it from the active
// snapshot key (see layers.Index.Derive). The caller holds s.mu.
func (s *Store) derive(op, key, name string, made func(*entry) *entry) (src, n *entry, err error) {
	if s.closed {
		return nil, nil, errClosed
	}
	return s.entries.Derive(op, key, name, made)
}

// claimIdle claims key for op, a call that changes or deletes it (see
// layers.Index.ClaimIdle). The caller holds s.mu.
func (s *Store) claimIdle(ctx context.Context, op, key string) (*entry, error) {
	if s.closed {
		return nil, errClosed
	}
	return s.entries.ClaimIdle(ctx, &s.mu, op, key)
}

func (s *Store) prepare(key string, r record) error {
	if err := s.records.write(key, r); err != nil {
		return err
	}
	var err error
	if r.ParentID == "" {
		err = subvolCreate(s.snapDir, r.ID)
	} else {
		err = snapshot(s.subvols.path(r.ParentID), s.snapDir, r.ID, false)
		if err == nil && s.qgroups != "" && s.inherits {
			// A new key has no limit, whatever its parent had.
			if err = s.subvols.limit(r.ID, 0); err != nil {
				if derr := s.subvols.destroy(r.ID); derr != nil {
					s.log.Error("layers: cleaning up failed prepare", "key", key, "err", derr)
				}
			}
		}
	}
	if err != nil {
		if rerr := s.records.remove(key); rerr != nil {
			s.log.Error("layers: cleaning up failed prepare", "key", key, "err", rerr)
		}
		return err
	}
	return nil
}

// Commit turns the active snapshot key into the committed snapshot name by
// making its subvolume read-only in place: O(1), and the path does not
// change. Commit is meant for a snapshot nothing writes to any more; a
// process that still holds a file open for writing can change it. It fails
// with layers.ErrNotFound (no key), layers.ErrInvalid (key is committed, or
// a bad name), layers.ErrExists (name taken) or layers.ErrInUse (another
// call is changing key). If Snapshots of key are in flight, Commit waits for
// them.
func (s *Store) Commit(ctx context.Context, name, key string) error {
	if err := layers.CheckDerive(ctx, key, name); err != nil {
		return err
	}
	s.mu.Lock()
	e, n, err := s.derive("commit", key, name, func(e *entry) *entry {
		return &entry{record: record{ID: e.ID, Kind: layers.KindCommitted, Parent: e.Parent, ParentID: e.ParentID}, Guard: layers.Guard{Busy: true}}
	})
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if err := e.Claim(ctx, &s.mu); err != nil {
		delete(s.entries, name)
		s.mu.Unlock()
		return fmt.Errorf("commit %q as %q: %w", key, name, err)
	}
	// Parent may have been removed while Claim waited.
	n.Parent, n.ParentID = e.Parent, e.ParentID
	r, limit := n.record, e.Limit
	s.mu.Unlock()

	err = s.commit(name, key, r, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		delete(s.entries, name)
		e.Busy = false
		return fmt.Errorf("commit %q as %q: %w", key, name, err)
	}
	delete(s.entries, key)
	n.Visible, n.Busy = true, false
	return nil
}

// commit makes key, whose limit is limit, the committed snapshot name,
// whose record is r.
func (s *Store) commit(name, key string, r record, limit int64) error {
	if err := s.records.write(name, r); err != nil {
		return err
	}
	// A committed snapshot has no limit, and the flag change below
	// fails with EDQUOT in a subvolume over its limit. Should the commit
	// not happen, key's record still holds the limit, and load applies it.
	limited := limit != 0 && s.qgroups != ""
	if limited {
		if err := s.subvols.limit(r.ID, 0); err != nil {
			if rerr := s.records.remove(name); rerr != nil {
				s.log.Error("layers: undoing failed commit", "key", key, "err", rerr)
			}
			return err
		}
	}
	// The commit point: the flag change commits the transaction that
	// holds name's record too.
	if err := setReadonly(s.subvols.path(r.ID), true); err != nil {
		if limited {
			if lerr := s.subvols.limit(r.ID, limit); lerr != nil {
				s.log.Error("layers: restoring the limit after a failed commit", "key", key, "err", lerr)
			}
		}
		if rerr := s.records.remove(name); rerr != nil {
			s.log.Error("layers: undoing failed commit", "key", key, "err", rerr)
		}
		return err
	}
	if err := s.records.remove(key); err != nil {
		// Open drops it: the subvolume is read-only.
		s.log.Warn("layers: removing committed key's record", "key", key, "err", err)
	}
	return nil
}

// Snapshot makes the committed snapshot name, a read-only snapshot of the
// active snapshot key, which stays active and writable at the same path.
// It is one BTRFS_IOC_SNAP_CREATE_V2 with the read-only flag: O(1) in the
// data key holds, except that the kernel first writes out key's dirty
// pages (so a caller that freezes a sandbox around Snapshot keeps the
// freeze short by syncing the sandbox's files before freezing it). The
// ioctl commits a transaction, which makes name's record (written just
// before) and its subvolume durable together when Snapshot returns; a
// crash in between leaves a record without a subvolume, which Open
// drops.
//
// name's Parent is key's; the two subvolumes share extents but not
// lifetimes: either may be removed first, and the blocks go with the last
// subvolume that uses them.
//
// It fails with layers.ErrNotFound (no key), layers.ErrExists (name taken),
// layers.ErrInvalid (key is committed, or a bad name) or layers.ErrInUse
// (another call is changing key).
func (s *Store) Snapshot(ctx context.Context, name, key string) error {
	if err := layers.CheckDerive(ctx, key, name); err != nil {
		return err
	}
	id := layers.NewID()
	s.mu.Lock()
	e, n, err := s.derive("snapshot", key, name, func(e *entry) *entry {
		return &entry{record: record{ID: id, Kind: layers.KindCommitted, Parent: e.Parent, ParentID: e.ParentID}, Guard: layers.Guard{Busy: true}}
	})
	if err != nil {
		s.mu.Unlock()
		return err
	}
	e.Read()
	s.mu.Unlock()

	err = s.snapshot(name, e.ID, n.record)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Release()
	if err != nil {
		delete(s.entries, name)
		return fmt.Errorf("snapshot %q as %q: %w", key, name, err)
	}
	n.Visible, n.Busy = true, false
	return nil
}

func (s *Store) snapshot(name, srcID string, r record) error {
	if err := s.records.write(name, r); err != nil {
		return err
	}
	// The commit point: creating a snapshot commits the transaction
	// that holds name's record too.
	if err := snapshot(s.subvols.path(srcID), s.snapDir, r.ID, true); err != nil {
		if rerr := s.records.remove(name); rerr != nil {
			s.log.Error("layers: cleaning up failed snapshot", "key", name, "err", rerr)
		}
		return err
	}
	return nil
}

// Reset replaces the content of the active snapshot key with a new writable
// snapshot of the committed snapshot parent and returns key's new path; the
// old content is deleted. It is atomic across a crash: the new subvolume is
// made first (the snapshot ioctl commits it) and given key's limit (see
// SetLimit), key's record is then swapped to name it with one rename, and
// only then is the old subvolume deleted, so load finds either the old
// record (and deletes the new subvolume, which no record names) or the new
// one (and deletes the old). Like Remove, the swap is durable at the next
// transaction commit. It fails with layers.ErrNotFound (no key or parent),
// layers.ErrInvalid (key is not active, or parent not committed) or
// layers.ErrInUse (another call is changing either); Snapshots of key in
// flight are waited for.
func (s *Store) Reset(ctx context.Context, key, parent string) (string, error) {
	if err := layers.CheckArgs(ctx, key, parent); err != nil {
		return "", err
	}
	if parent == "" {
		return "", fmt.Errorf("reset %q: no parent: %w", key, layers.ErrInvalid)
	}
	id := layers.NewID()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errClosed
	}
	e, p, err := s.entries.ClaimReset(ctx, &s.mu, key, parent)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	p.Read()
	old, r := e.record, record{ID: id, Kind: layers.KindActive, Parent: parent, ParentID: p.ID, Limit: e.Limit}
	s.mu.Unlock()

	err = s.reset(key, old, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	p.Release()
	e.Busy = false
	if err != nil {
		return "", fmt.Errorf("reset %q to %q: %w", key, parent, err)
	}
	e.record = r
	return s.subvols.path(id), nil
}

func (s *Store) reset(key string, old, r record) error {
	if err := snapshot(s.subvols.path(r.ParentID), s.snapDir, r.ID, false); err != nil {
		return err
	}
	// key's limit, on the new subvolume before it becomes key's (under
	// full qgroups, also to drop the one it may inherit from parent).
	var err error
	if s.qgroups != "" && (r.Limit != 0 || s.inherits) {
		err = s.subvols.limit(r.ID, r.Limit)
	}
	if err == nil {
		err = s.records.replace(key, r)
	}
	if err != nil {
		if derr := s.subvols.destroy(r.ID); derr != nil {
			s.log.Error("layers: cleaning up failed reset", "key", key, "err", derr)
		}
		return err
	}
	if err := s.subvols.destroy(old.ID); err != nil {
		// The swap happened; the old subvolume, which no record names
		// any more, is deleted by the next load.
		s.log.Error("layers: deleting the old content after a reset", "key", key, "id", old.ID, "err", err)
	}
	return nil
}

// Stat describes the snapshot key, or fails with layers.ErrNotFound or
// layers.ErrInvalid.
func (s *Store) Stat(ctx context.Context, key string) (layers.Info, error) {
	if err := layers.CheckArgs(ctx, key, ""); err != nil {
		return layers.Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.entries.Get("stat", key)
	if err != nil {
		return layers.Info{}, err
	}
	return s.subvols.info(key, e), nil
}

// AtomicSnapshots reports that Snapshot captures an active snapshot at one
// instant (one snapshot ioctl, in one transaction): every write that
// completed before it is in the snapshot and none after, as after a power
// cut, so a crash-consistent copy of a running sandbox needs no freeze.
func (s *Store) AtomicSnapshots() bool { return true }

// Walk calls fn for every snapshot, in no particular order, for Recover and
// garbage collection. fn must not call back into the store.
func (s *Store) Walk(ctx context.Context, fn func(layers.Info) error) error {
	return layers.WalkInfos(ctx, &s.mu, func() ([]layers.Info, error) { return s.entries.Infos(s.subvols.info), nil }, fn)
}

// Remove deletes the snapshot key, including any subvolumes a sandbox
// created inside it. Its children, if it is committed, are subvolumes of
// their own and keep their content; their Parent becomes "". btrfs frees the
// blocks no other subvolume uses in the background. Prepares from key and
// Snapshots of it that are in flight finish first (Remove waits for them;
// later ones fail with layers.ErrNotFound and layers.ErrInUse). It fails
// with layers.ErrNotFound, layers.ErrInvalid, or layers.ErrInUse if another
// call is changing key.
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := layers.CheckArgs(ctx, key, ""); err != nil {
		return err
	}
	s.mu.Lock()
	e, err := s.claimIdle(ctx, "remove", key)
	s.mu.Unlock()
	if err != nil {
		return err
	}

	err = s.subvols.destroy(e.ID)
	if err == nil {
		if rerr := s.records.remove(key); rerr != nil {
			// The subvolume is gone, so the key is; Open drops
			// the stale record.
			s.log.Warn("layers: removing record", "key", key, "err", rerr)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		e.Busy = false
		return fmt.Errorf("remove %q: %w", key, err)
	}
	delete(s.entries, key)
	// Children in the making too (a Commit or Snapshot of a child copies
	// its Parent into an entry not yet visible): none may name key once
	// it is gone. Their records keep key's id, so load drops the Parent
	// again, even if the name has been reused by then.
	for _, c := range s.entries {
		if c.Parent == key {
			c.Parent, c.ParentID = "", ""
		}
	}
	return nil
}

// Usage returns the bytes charged to the snapshot key beyond what it shares
// with its parent. With quotas on (hearth turns simple quotas on in a
// backing file it formats) it is the subvolume's exclusive qgroup count,
// after a sync of the filesystem so recent writes are included (one
// transaction commit): simple quotas charge an extent to the subvolume
// that wrote it, for as long as the extent lives, so a snapshot made by
// Snapshot stays at its own metadata (≈16 KiB) and key keeps the charge.
// Without quotas it walks the snapshot and adds up the extents no other
// snapshot shares (FIEMAP): what removing it would free, 0 for a new
// Snapshot, growing as key rewrites what they share. That costs time in
// the number of files. It fails with layers.ErrNotFound or layers.ErrInvalid.
func (s *Store) Usage(ctx context.Context, key string) (int64, error) {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return 0, err
	}
	var n int64
	if s.qgroups != "" {
		n, err = qgroupUsage(s.qgroups, info.Path)
	} else {
		n, err = walkUsage(ctx, info.Path)
	}
	if err != nil {
		return 0, fmt.Errorf("usage %q: %w", key, err)
	}
	return n, nil
}

// Close releases the store's lock. It does not unmount anything: sandboxes
// keep running on the snapshots. Calls after Close fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.lock.Close()
}

// Unmount closes the store and, if it lives in a backing file, unmounts it,
// which also detaches its loop device. The data stays; Open mounts it
// again. It is for tests and for taking a host out of service: any sandbox
// still running on a snapshot keeps the mount busy and Unmount fails.
func (s *Store) Unmount(ctx context.Context) error {
	if err := s.Close(); err != nil {
		return err
	}
	if s.backing == "" {
		return nil
	}
	if err := unmount(s.dir); err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	return nil
}

// Destroy deletes every snapshot and the store itself (its backing file
// too), leaving nothing behind.
func (s *Store) Destroy(ctx context.Context) error {
	if s.backing == "" {
		s.mu.Lock()
		ids := make([]string, 0, len(s.entries))
		for _, e := range s.entries {
			ids = append(ids, e.ID)
		}
		s.mu.Unlock()
		for _, id := range ids {
			if err := s.subvols.destroy(id); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("layers: destroy: %w", err)
			}
		}
	}
	if err := s.Unmount(ctx); err != nil {
		return err
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("layers: destroy: %w", err)
	}
	if s.backing != "" {
		if err := os.Remove(s.backing); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("layers: destroy: %w", err)
		}
	}
	return nil
}

// subvols is the directory of a store's subvolumes, snapshots/, one per
// snapshot, named by its record's ID.
type subvols string

// path is the subvolume id: the Info.Path of the snapshot whose record has
// ID id.
func (v subvols) path(id string) string { return filepath.Join(string(v), id) }

// info describes snapshot key, whose entry is e.
func (v subvols) info(key string, e *entry) layers.Info {
	return layers.Info{Key: key, Kind: e.Kind, Parent: e.Parent, Path: v.path(e.ID)}
}

// destroy deletes the subvolume id and every subvolume nested in it.
func (v subvols) destroy(id string) error {
	return destroyTree(string(v), id)
}

// destroyTree deletes the subvolume dir/name. A subvolume that holds
// others (a sandbox can make them, e.g. Docker's btrfs driver) cannot be
// deleted until they are, so on ENOTEMPTY it deletes the nested ones
// depth first, making each writable so that its children can be unlinked.
func destroyTree(dir, name string) error {
	err := subvolDestroy(dir, name)
	if !errors.Is(err, unix.ENOTEMPTY) {
		return err
	}
	root := filepath.Join(dir, name)
	if err := setReadonly(root, false); err != nil {
		return err
	}
	werr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root || !d.IsDir() {
			return err
		}
		if ok, err := isSubvolume(p); err != nil || !ok {
			return err
		}
		if err := destroyTree(filepath.Dir(p), filepath.Base(p)); err != nil {
			return err
		}
		return filepath.SkipDir
	})
	if werr != nil {
		return werr
	}
	return subvolDestroy(dir, name)
}
