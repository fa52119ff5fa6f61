package overlay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

// Options configures Open. Only Dir is required.
type Options struct {
	// Dir is the store's root, e.g. <data>/layers, created if missing. It
	// must not be on overlayfs, its filesystem must take trusted.*
	// extended attributes (ext4 and xfs do), and its path must hold no
	// ',', ':' or '\' (overlayfs's option separators).
	Dir string
	// Logger receives recovery and mount events; nil discards them.
	Logger *slog.Logger
}

// Store is the overlayfs snapshot store; see the package documentation
// for its layout, costs and limits. It is safe for concurrent use: calls
// on different keys run in parallel, and so do any number of Prepares
// from one committed snapshot and Snapshots (or Usages) of one key. A call
// that would change a key another call is changing (committing, resetting,
// removing) fails with ErrInUse rather than wait; a Commit, Reset or
// Remove of a key that calls are reading turns new readers away and waits
// for those in flight. Only one Store may have a Dir open at a time, in
// any process.
type Store struct {
	dir     string
	dirs    dirs
	records records
	log     *slog.Logger
	lock    *layers.DirLock
	// appendLowers: mount with fsopen(2) and one "lowerdir+" per layer
	// (Linux 6.8+) rather than mount(2), whose options must fit in a page.
	appendLowers bool

	mu      sync.Mutex
	entries layers.Index[*entry]
	refs    layerRefs
	closed  bool
}

var _ layers.Store = (*Store)(nil)

// entry is a snapshot in the index. Prepare, Commit and Snapshot insert
// the new key before they touch the disk (invisible, busy), so that the
// name is reserved and its layers referenced (see ref). Busy means a call
// is changing it (committing, resetting, removing it); its readers (see
// layers.Guard) are the calls reading its top layer: Snapshots of it,
// Usages of it.
type entry struct {
	record
	layers.Guard
}

// SnapshotKind is e's Kind, for layers.Index.
func (e *entry) SnapshotKind() layers.Kind { return e.Kind }

// errClosed is returned by every call on a closed Store.
var errClosed = errors.New("layers/overlay: store closed")

// Open opens (creating if needed) the store at opts.Dir. It checks that
// overlayfs works there (one probe mount), then reloads the index from
// the records and repairs what a crash in the middle of a call left
// behind (see load). A snapshot whose mount is there (the daemon
// restarted while sandboxes kept running on it) keeps it: Open never
// unmounts a snapshot that exists; one whose mount is missing (after a
// reboot) is mounted again. Open fails with ErrInUse if another Store has
// Dir open, ErrInvalid for a bad Dir, and ErrUnsupported if overlayfs
// cannot work on Dir.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: overlay.Options.Dir is empty", layers.ErrInvalid)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("layers/overlay: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("layers/overlay: %w", err)
	}
	// Mount points are listed with symlinks resolved.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, fmt.Errorf("layers/overlay: %w", err)
	}
	if strings.ContainsAny(dir, `,:\`) {
		return nil, fmt.Errorf("%w: layers/overlay: %s holds one of ',', ':', '\\', which overlayfs options cannot carry", layers.ErrInvalid, dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("layers/overlay: statfs %s: %w", dir, err)
	}
	if st.Type == unix.OVERLAYFS_SUPER_MAGIC {
		return nil, fmt.Errorf("%w: layers/overlay: %s is on overlayfs, which cannot hold upper layers; put the data dir on a disk filesystem (ext4, xfs)", layers.ErrUnsupported, dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("layers/overlay: %w", err)
	}
	s := &Store{
		dir:     dir,
		dirs:    dirs(dir),
		records: records(dirs(dir).meta()),
		log:     log.With("store", dir),
		entries: make(layers.Index[*entry]),
		refs:    make(layerRefs),
	}
	for _, d := range []string{s.dirs.meta(), s.dirs.layers(), s.dirs.work(), s.dirs.mnt(), s.dirs.empty()} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("layers/overlay: %w", err)
		}
	}
	lock, err := layers.LockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("layers/overlay: %w", err)
	}
	s.lock = lock
	if s.appendLowers, err = probe(filepath.Join(dir, "probe")); err == nil {
		err = s.load(ctx)
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	return s, nil
}

// Dir is the store's root directory.
func (s *Store) Dir() string { return s.dir }

// dirs is the layout of a store's directory (see the package doc).
type dirs string

func (d dirs) meta() string   { return filepath.Join(string(d), "meta") }
func (d dirs) layers() string { return filepath.Join(string(d), "layers") }
func (d dirs) work() string   { return filepath.Join(string(d), "work") }
func (d dirs) mnt() string    { return filepath.Join(string(d), "mnt") }
func (d dirs) empty() string  { return filepath.Join(string(d), "empty") }

// layer is the directory holding the files of layer id.
func (d dirs) layer(id string) string { return filepath.Join(d.layers(), id) }

// mount is the mount point of the snapshot whose record has ID id: its
// Info.Path.
func (d dirs) mount(id string) string { return filepath.Join(d.mnt(), id) }

// layerRefs counts, per layer id, the entries (visible or in the making)
// naming it. The store's mutex guards it.
type layerRefs map[string]int

// ref counts one more entry naming each of ids. The caller holds s.mu.
func (r layerRefs) ref(ids []string) {
	for _, id := range ids {
		r[id]++
	}
}

// unref counts one entry less naming each of ids and returns those no
// entry names any more, for removeLayers: nothing can name them again, as
// a new entry only takes layers from an existing one. The caller holds
// s.mu.
func (r layerRefs) unref(ids []string) (dead []string) {
	for _, id := range ids {
		if r[id]--; r[id] <= 0 {
			delete(r, id)
			dead = append(dead, id)
		}
	}
	return dead
}

// removeLayers deletes the files (and work dirs) of layers no entry names.
// What it fails to delete, Open deletes.
func (s *Store) removeLayers(ids []string) {
	for _, id := range ids {
		for _, p := range []string{s.dirs.layer(id), filepath.Join(s.dirs.work(), id)} {
			if err := os.RemoveAll(p); err != nil {
				s.log.Error("layers/overlay: deleting an unused layer", "path", p, "err", err)
			}
		}
	}
}

// drop takes the entry e, which a call inserted as key but could not
// finish, out of the index, and deletes the layers only it named.
func (s *Store) drop(key string, e *entry) {
	s.mu.Lock()
	if s.entries[key] == e {
		delete(s.entries, key)
	}
	dead := s.refs.unref(e.Layers)
	s.mu.Unlock()
	s.removeLayers(dead)
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
// snapshot key (see layers.Index.Derive), and references its layers. The
// caller holds s.mu.
func (s *Store) derive(op, key, name string, made func(*entry) *entry) (src, n *entry, err error) {
	if s.closed {
		return nil, nil, errClosed
	}
	src, n, err = s.entries.Derive(op, key, name, made)
	if err == nil {
		s.refs.ref(n.Layers)
	}
	return src, n, err
}

// claimIdle claims key for op, a call that changes or deletes it (see
// layers.Index.ClaimIdle). The caller holds s.mu.
func (s *Store) claimIdle(ctx context.Context, op, key string) (*entry, error) {
	if s.closed {
		return nil, errClosed
	}
	return s.entries.ClaimIdle(ctx, &s.mu, op, key)
}

// Prepare creates the active snapshot key on top of the committed
// snapshot parent, or empty if parent is "", and returns its path: a new
// empty upper layer and an overlay mount of it over parent's layers. It
// costs O(1) in the size of parent: two directories, one mount and one
// record, and makes the chain one layer deeper than parent's. It fails
// with ErrInvalid (bad key, or parent not committed), ErrExists (key
// taken) or ErrNotFound (no parent).
func (s *Store) Prepare(ctx context.Context, key, parent string) (string, error) {
	if err := layers.CheckArgs(ctx, key, parent); err != nil {
		return "", err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errClosed
	}
	if _, ok := s.entries[key]; ok {
		s.mu.Unlock()
		return "", fmt.Errorf("prepare %q: %w", key, layers.ErrExists)
	}
	r := record{ID: layers.NewID(), Kind: layers.KindActive, Layers: []string{layers.NewID()}}
	if parent != "" {
		p, err := s.entries.Committed("prepare", key, parent)
		if err != nil {
			s.mu.Unlock()
			return "", err
		}
		r.Parent, r.ParentID = parent, p.ID
		r.Layers = append(r.Layers, p.Layers...)
	}
	e := &entry{record: r, Guard: layers.Guard{Busy: true}}
	s.entries[key] = e
	s.refs.ref(r.Layers)
	s.mu.Unlock()

	if err := s.prepare(key, r); err != nil {
		s.drop(key, e)
		return "", fmt.Errorf("prepare %q: %w", key, err)
	}
	s.mu.Lock()
	e.Visible, e.Busy = true, false
	s.mu.Unlock()
	return s.dirs.mount(r.ID), nil
}

// prepare makes the upper layer of the active snapshot r, mounts it, and
// writes key's record, the commit point. On failure, it unmounts what it
// mounted; the layer is the caller's to delete.
func (s *Store) prepare(key string, r record) error {
	if err := s.makeUpper(r.Layers); err != nil {
		return err
	}
	if err := s.mount(r); err != nil {
		return err
	}
	if err := s.records.write(key, r); err != nil {
		s.unmountOrLog(r.ID)
		return err
	}
	return nil
}

// makeUpper creates the empty upper layer ids[0] and its work dir, and
// makes them durable (a record naming a layer must never outlive it). The
// upper dir is the root directory the mount shows, so it takes the owner
// and mode of the root of the layer below, ids[1], if there is one (an
// image's / is 0755 root:root, not 0700).
func (s *Store) makeUpper(ids []string) error {
	upper := s.dirs.layer(ids[0])
	uid, gid, mode := 0, 0, uint32(0o755)
	if len(ids) > 1 {
		var st unix.Stat_t
		if err := unix.Lstat(s.dirs.layer(ids[1]), &st); err != nil {
			return &os.PathError{Op: "lstat", Path: s.dirs.layer(ids[1]), Err: err}
		}
		uid, gid, mode = int(st.Uid), int(st.Gid), st.Mode&0o7777
	}
	if err := os.Mkdir(upper, 0o700); err != nil {
		return err
	}
	if err := os.Lchown(upper, uid, gid); err != nil {
		return err
	}
	if err := unix.Chmod(upper, mode); err != nil {
		return &os.PathError{Op: "chmod", Path: upper, Err: err}
	}
	if err := os.Mkdir(filepath.Join(s.dirs.work(), ids[0]), 0o700); err != nil {
		return err
	}
	if err := layers.Fsync(s.dirs.layers()); err != nil {
		return err
	}
	return layers.Fsync(s.dirs.work())
}

// Commit turns the active snapshot key into the committed snapshot name:
// key's mount is unmounted, and its upper layer becomes the top of name's
// read-only stack, mounted at a new path. It costs O(1) in the data key
// holds. Nothing may use key's mount when Commit is called (no process
// with a file open or its working directory in it): Commit then fails
// with EBUSY and key stays as it was. It fails with ErrNotFound (no key),
// ErrInvalid (key is committed, or a bad name), ErrExists (name taken) or
// ErrInUse (another call is changing key). If Snapshots or Usages of key
// are in flight, Commit waits for them.
func (s *Store) Commit(ctx context.Context, name, key string) error {
	if err := layers.CheckDerive(ctx, key, name); err != nil {
		return err
	}
	s.mu.Lock()
	e, n, err := s.derive("commit", key, name, func(e *entry) *entry {
		return &entry{record: record{ID: layers.NewID(), Kind: layers.KindCommitted, Layers: e.Layers}, Guard: layers.Guard{Busy: true}}
	})
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if err := e.Claim(ctx, &s.mu); err != nil {
		s.mu.Unlock()
		s.drop(name, n)
		return fmt.Errorf("commit %q as %q: %w", key, name, err)
	}
	// Parent may have been removed while Claim waited.
	n.Parent, n.ParentID = e.Parent, e.ParentID
	old, r := e.record, n.record
	s.mu.Unlock()

	if err := s.commit(name, key, old, r); err != nil {
		s.drop(name, n)
		s.mu.Lock()
		e.Busy = false
		s.mu.Unlock()
		return fmt.Errorf("commit %q as %q: %w", key, name, err)
	}
	s.mu.Lock()
	delete(s.entries, key)
	s.refs.unref(old.Layers) // n names them all
	n.Visible, n.Busy = true, false
	s.mu.Unlock()
	return nil
}

// commit unmounts the active snapshot old (key), mounts r (name) read-only
// over the same layers, then writes name's record, the commit point, and
// drops key's. load finishes a commit that wrote name's record and keeps
// key if it did not (see load).
func (s *Store) commit(name, key string, old, r record) error {
	if err := unmount(s.dirs.mount(old.ID), 0); err != nil {
		return err
	}
	undo := func(err error) error {
		if merr := s.mount(old); merr != nil {
			s.log.Error("layers/overlay: mounting again after a failed commit", "key", key, "err", merr)
		}
		return err
	}
	if err := s.mount(r); err != nil {
		return undo(err)
	}
	if err := s.records.write(name, r); err != nil {
		s.unmountOrLog(r.ID)
		return undo(err)
	}
	if err := s.records.remove(key); err != nil {
		// load drops it: name's record names its upper layer.
		s.log.Warn("layers/overlay: removing a committed key's record", "key", key, "err", err)
	}
	if err := os.RemoveAll(filepath.Join(s.dirs.work(), old.Layers[0])); err != nil {
		s.log.Warn("layers/overlay: removing a committed layer's work dir", "key", key, "err", err)
	}
	return nil
}

// Snapshot makes the committed snapshot name from what the active
// snapshot key holds now: key's upper layer, everything key wrote since
// it was prepared or reset, is copied into a new layer (see the package
// documentation for what is kept), synced to disk, and mounted read-only
// over key's lower layers. key stays active and mounted, untouched. It
// costs O(data key wrote), not O(1): a caller that freezes a sandbox
// around it freezes it for the copy. name's Parent is key's; either may be
// removed first. It is durable when it returns. It fails with ErrNotFound
// (no key), ErrExists (name taken), ErrInvalid (key is committed, or a
// bad name) or ErrInUse (another call is changing key).
func (s *Store) Snapshot(ctx context.Context, name, key string) error {
	if err := layers.CheckDerive(ctx, key, name); err != nil {
		return err
	}
	s.mu.Lock()
	e, n, err := s.derive("snapshot", key, name, func(e *entry) *entry {
		return &entry{record: record{
			ID:       layers.NewID(),
			Kind:     layers.KindCommitted,
			Parent:   e.Parent,
			ParentID: e.ParentID,
			Layers:   append([]string{layers.NewID()}, e.Layers[1:]...),
			Copied:   true,
		}, Guard: layers.Guard{Busy: true}}
	})
	if err != nil {
		s.mu.Unlock()
		return err
	}
	r := n.record
	e.Read()
	src := e.Layers[0]
	s.mu.Unlock()

	err = s.snapshot(ctx, name, src, r)
	s.mu.Lock()
	e.Release()
	if err == nil {
		n.Visible, n.Busy = true, false
	}
	s.mu.Unlock()
	if err != nil {
		s.drop(name, n)
		return fmt.Errorf("snapshot %q as %q: %w", key, name, err)
	}
	return nil
}

// snapshot copies the layer src into r's top layer, syncs the filesystem,
// mounts r and writes name's record, the commit point. On failure, it
// unmounts what it mounted; the layer is the caller's to delete.
func (s *Store) snapshot(ctx context.Context, name, src string, r record) error {
	dst := s.dirs.layer(r.Layers[0])
	if err := copyTree(ctx, dst, s.dirs.layer(src)); err != nil {
		return err
	}
	if err := layers.Syncfs(dst); err != nil {
		return err
	}
	if err := s.mount(r); err != nil {
		return err
	}
	if err := s.records.write(name, r); err != nil {
		s.unmountOrLog(r.ID)
		return err
	}
	return nil
}

// Reset replaces the active snapshot key with a new one on top of the
// committed snapshot parent, at a new path, which it returns: a new empty
// upper layer is made and mounted, key's record is swapped to it in one
// rename (the commit point), and only then is the old mount detached and
// its upper layer deleted. A crash leaves the old record or the new one,
// and Open deletes what the other named. Reset is O(1) plus the deletion
// of what key wrote. Whatever still runs on the old path loses its files,
// so the caller stops it first. It fails with ErrNotFound (no key or
// parent), ErrInvalid (key is not active, parent not committed or "") or
// ErrInUse (another call is changing either); Snapshots and Usages of key
// in flight are waited for.
func (s *Store) Reset(ctx context.Context, key, parent string) (string, error) {
	if err := layers.CheckArgs(ctx, key, parent); err != nil {
		return "", err
	}
	if parent == "" {
		return "", fmt.Errorf("reset %q: no parent: %w", key, layers.ErrInvalid)
	}
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
	old := e.record
	r := record{ID: layers.NewID(), Kind: layers.KindActive, Parent: parent, ParentID: p.ID, Layers: append([]string{layers.NewID()}, p.Layers...)}
	s.refs.ref(r.Layers)
	s.mu.Unlock()

	err = s.prepare(key, r)
	s.mu.Lock()
	e.Busy = false
	var dead []string
	if err == nil {
		// A Remove of parent meanwhile cleared the Parent of the entries
		// there were (r was not one yet); the record keeps it, and load
		// clears it again.
		if s.entries[parent] != p {
			r.Parent, r.ParentID = "", ""
		}
		e.record = r
		dead = s.refs.unref(old.Layers)
	} else {
		dead = s.refs.unref(r.Layers)
	}
	s.mu.Unlock()
	if err != nil {
		s.removeLayers(dead)
		return "", fmt.Errorf("reset %q to %q: %w", key, parent, err)
	}
	// The swap happened; what the old record named goes. Open deletes
	// what this leaves.
	s.unmountOrLog(old.ID)
	s.removeLayers(dead)
	return s.dirs.mount(r.ID), nil
}

// Stat describes the snapshot key, or fails with ErrNotFound or ErrInvalid.
func (s *Store) Stat(ctx context.Context, key string) (layers.Info, error) {
	if err := layers.CheckArgs(ctx, key, ""); err != nil {
		return layers.Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return layers.Info{}, errClosed
	}
	e, err := s.entries.Get("stat", key)
	if err != nil {
		return layers.Info{}, err
	}
	return s.info(key, e), nil
}

func (s *Store) info(key string, e *entry) layers.Info {
	return layers.Info{Key: key, Kind: e.Kind, Parent: e.Parent, Path: s.dirs.mount(e.ID)}
}

// Walk calls fn for every snapshot, in no particular order, for Recover and
// garbage collection. It calls fn without holding the store's lock, so fn
// may call the store; snapshots made or removed meanwhile may or may not
// be seen.
func (s *Store) Walk(ctx context.Context, fn func(layers.Info) error) error {
	return layers.WalkInfos(ctx, &s.mu, func() ([]layers.Info, error) {
		if s.closed {
			return nil, errClosed
		}
		return s.entries.Infos(s.info), nil
	}, fn)
}

// Remove deletes the snapshot key: its record (the commit point), then its
// mount (detached: a process still in it keeps what it holds open), then
// the layers no other snapshot names. A committed snapshot's layers stay
// while a snapshot made from it names them, so its children keep their
// files (their Parent becomes ""); the last snapshot to name a layer
// deletes it. The deletion is O(files deleted) and happens in the call.
// Snapshots and Usages of key in flight finish first (later ones fail
// with ErrInUse or ErrNotFound). It fails with ErrNotFound, ErrInvalid,
// or ErrInUse if another call is changing key.
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

	if err := s.records.remove(key); err != nil {
		s.mu.Lock()
		e.Busy = false
		s.mu.Unlock()
		return fmt.Errorf("remove %q: %w", key, err)
	}
	s.unmountOrLog(e.ID)
	s.mu.Lock()
	delete(s.entries, key)
	dead := s.refs.unref(e.Layers)
	// Children in the making too (a Prepare, Commit or Snapshot copies
	// Parent into an entry not yet visible): none may name key once it
	// is gone. Their records keep key's ID, so load clears it again.
	for _, c := range s.entries {
		if c.Parent == key && c.ParentID == e.ID {
			c.Parent, c.ParentID = "", ""
		}
	}
	s.mu.Unlock()
	s.removeLayers(dead)
	return nil
}

// Usage returns the bytes charged to the snapshot key: the disk blocks
// (st_blocks) of everything in its top layer, each hard-linked inode
// once, found by walking it (O(files)). For an active snapshot that is
// its upper layer, what it wrote since it was prepared or reset, which a
// Commit keeps. A snapshot made by Snapshot is charged nothing (0): its
// copy stays charged to the key that wrote it, as the contract has it,
// although on this backend the copy takes its own disk space. It fails
// with ErrNotFound, ErrInvalid, or ErrInUse if another call is changing
// key.
func (s *Store) Usage(ctx context.Context, key string) (int64, error) {
	if err := layers.CheckArgs(ctx, key, ""); err != nil {
		return 0, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, errClosed
	}
	e, err := s.entries.Idle("usage", key)
	if err != nil || e.Copied {
		s.mu.Unlock()
		return 0, err
	}
	e.Read()
	top := s.dirs.layer(e.Layers[0])
	s.mu.Unlock()

	n, err := diskUsage(ctx, top)
	s.mu.Lock()
	e.Release()
	s.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("usage %q: %w", key, err)
	}
	return n, nil
}

// SetLimit cannot cap an active snapshot here: its upper layer is a plain
// directory, and a cap would need the filesystem's project quotas. It
// fails with ErrUnsupported for any bytes > 0, and succeeds for 0 (there
// is no cap to remove). Before that it checks the key as every store
// does: ErrNotFound (no key), ErrInvalid (key is committed, bytes is
// negative) or ErrInUse (another call is changing key).
func (s *Store) SetLimit(ctx context.Context, key string, bytes int64) error {
	if err := layers.CheckArgs(ctx, key, ""); err != nil {
		return err
	}
	if bytes < 0 {
		return fmt.Errorf("set limit of %q to %d: %w", key, bytes, layers.ErrInvalid)
	}
	s.mu.Lock()
	_, err := s.active("set limit of", key)
	s.mu.Unlock()
	switch {
	case err != nil:
		return err
	case bytes != 0:
		return fmt.Errorf("set limit of %q: the overlayfs store cannot cap a snapshot's disk space: %w", key, layers.ErrUnsupported)
	}
	return nil
}

// Close releases the store's lock. It does not unmount anything: sandboxes
// keep running on the snapshots, and Open takes the mounts over. Calls
// after Close fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.lock.Close()
}
