// Package fake is a layers.Store over plain directories, for the tests of
// the packages that use one (lifecycle, the doors). It passes
// layers/layerstest, so code tested against it meets the same contract as
// against the btrfs backend.
//
// What it emulates: the snapshot model (active and committed snapshots,
// keys, names, parents, the errors of every call), snapshots that survive a
// reopen on the same directory, committed snapshots that cannot be
// written, Usage as the bytes of the regular files that differ from the
// parent's (0 for a snapshot made by Snapshot), and SetLimit: it keeps
// each active snapshot's limit (across Reset and a reopen) for Limit to
// report, with the errors of the contract.
//
// What it does not: enforce limits (writes past one succeed; a test that
// needs EDQUOT runs on the btrfs backend), and copy-on-write. Prepare
// copies the parent's files and Snapshot the active snapshot's, so they
// cost O(size of the source), not O(1); keep test images small. Copies
// are what make every snapshot independent of its parent, as on btrfs:
// Remove of a parent never touches its children. Only directories, regular files and symlinks are copied
// (Prepare and Snapshot fail on any other kind of file), and ownership is
// kept only when the test runs as root. A committed snapshot is made
// read-only with the immutable attribute (chattr +i) when the test runs as
// root, since root ignores permission bits, and by clearing its write bits
// otherwise; Destroy (or Remove) undoes either, but a tree left behind by a
// killed test run as root needs `chattr -R -i` before `rm -rf`. Calls are
// serialised by one mutex, so this store never returns ErrInUse for a
// snapshot being changed.
package fake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hearth/hearth/layers"
)

// Store is the directory-backed layers.Store. Its files live under Dir():
// fs/<key> holds a snapshot's files and meta/<key>.json what Stat reports.
// It is safe for concurrent use.
type Store struct {
	dir string

	mu     sync.Mutex
	snaps  map[string]*record
	closed bool
}

var _ layers.Store = (*Store)(nil)

// record is a snapshot's metadata, as kept in meta/<key>.json.
type record struct {
	Kind   layers.Kind `json:"kind"`
	Parent string      `json:"parent,omitempty"`
	// Modes holds, by slash-separated path relative to the snapshot's
	// root, the mode bits of every file and directory whose write bits
	// Commit cleared to make it read-only (when it could not set the
	// immutable attribute); Prepare gives children the original modes.
	Modes map[string]fs.FileMode `json:"modes,omitempty"`
	// Snapshot is set on a snapshot made by Snapshot: nothing was written
	// into it, so its Usage is 0, as on btrfs.
	Snapshot bool `json:"snapshot,omitempty"`
	// Limit is what SetLimit set on an active snapshot, 0 for none.
	Limit int64 `json:"limit,omitempty"`
}

// errClosed is returned by every call on a closed Store.
var errClosed = errors.New("layers/fake: store is closed")

// Open opens the store kept in dir, creating dir if needed, with every
// snapshot a previous Store on dir left. A snapshot whose files or record
// a killed process left half made is dropped, and a Parent that a killed
// Remove left naming a missing snapshot is cleared.
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir, snaps: map[string]*record{}}
	for _, d := range []string{s.fsDir(), s.metaDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("layers/fake: %w", err)
		}
	}
	metas, err := os.ReadDir(s.metaDir())
	if err != nil {
		return nil, fmt.Errorf("layers/fake: %w", err)
	}
	for _, de := range metas {
		key, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || layers.ValidateKey(key) != nil {
			os.Remove(filepath.Join(s.metaDir(), de.Name())) // a temporary file
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.metaDir(), de.Name()))
		if err != nil {
			return nil, fmt.Errorf("layers/fake: %w", err)
		}
		r := &record{}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("layers/fake: record of %q: %w", key, err)
		}
		if _, err := os.Lstat(s.path(key)); err != nil {
			os.Remove(filepath.Join(s.metaDir(), de.Name()))
			continue
		}
		s.snaps[key] = r
	}
	for key, r := range s.snaps {
		if p := s.snaps[r.Parent]; r.Parent != "" && (p == nil || p.Kind != layers.KindCommitted) {
			if err := s.orphan(key, r); err != nil {
				return nil, fmt.Errorf("layers/fake: %w", err)
			}
		}
	}
	trees, err := os.ReadDir(s.fsDir())
	if err != nil {
		return nil, fmt.Errorf("layers/fake: %w", err)
	}
	for _, de := range trees {
		if s.snaps[de.Name()] == nil {
			if err := removeTree(filepath.Join(s.fsDir(), de.Name())); err != nil {
				return nil, fmt.Errorf("layers/fake: %w", err)
			}
		}
	}
	return s, nil
}

// New returns an empty Store in t.TempDir(), destroyed when t ends.
func New(t testing.TB) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Errorf("layers/fake: Destroy() = %v", err)
		}
	})
	return s
}

// Dir is the directory the store keeps its snapshots in, for Open.
func (s *Store) Dir() string { return s.dir }

func (s *Store) fsDir() string             { return filepath.Join(s.dir, "fs") }
func (s *Store) metaDir() string           { return filepath.Join(s.dir, "meta") }
func (s *Store) path(key string) string    { return filepath.Join(s.fsDir(), key) }
func (s *Store) recPath(key string) string { return filepath.Join(s.metaDir(), key+".json") }

// check validates the call's arguments and the store's state; the caller
// holds s.mu.
func (s *Store) check(ctx context.Context, keys ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := layers.ValidateKey(k); err != nil {
			return err
		}
	}
	if s.closed {
		return errClosed
	}
	return nil
}

// Prepare copies the committed snapshot parent (or nothing) into the new
// active snapshot key. See layers.Store.
func (s *Store) Prepare(ctx context.Context, key, parent string) (string, error) {
	keys := []string{key}
	if parent != "" {
		keys = append(keys, parent)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, keys...); err != nil {
		return "", fmt.Errorf("prepare %q: %w", key, err)
	}
	if s.snaps[key] != nil {
		return "", fmt.Errorf("prepare %q: %w", key, layers.ErrExists)
	}
	r := &record{Kind: layers.KindActive, Parent: parent}
	dst := s.path(key)
	if parent == "" {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return "", fmt.Errorf("prepare %q: %w", key, err)
		}
	} else {
		p := s.snaps[parent]
		switch {
		case p == nil:
			return "", fmt.Errorf("prepare %q: parent %q: %w", key, parent, layers.ErrNotFound)
		case p.Kind != layers.KindCommitted:
			return "", fmt.Errorf("prepare %q: parent %q is not committed: %w", key, parent, layers.ErrInvalid)
		}
		if err := copyTree(dst, s.path(parent), p.Modes); err != nil {
			removeTree(dst)
			return "", fmt.Errorf("prepare %q from %q: %w", key, parent, err)
		}
	}
	if err := s.writeRecord(key, r); err != nil {
		removeTree(dst)
		return "", fmt.Errorf("prepare %q: %w", key, err)
	}
	s.snaps[key] = r
	return dst, nil
}

// Commit renames the active snapshot key to name and makes it read-only.
// See layers.Store.
func (s *Store) Commit(ctx context.Context, name, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, name, key); err != nil {
		return fmt.Errorf("commit %q as %q: %w", key, name, err)
	}
	r := s.snaps[key]
	switch {
	case r == nil:
		return fmt.Errorf("commit %q: %w", key, layers.ErrNotFound)
	case s.snaps[name] != nil:
		return fmt.Errorf("commit %q: name %q: %w", key, name, layers.ErrExists)
	case r.Kind != layers.KindActive:
		return fmt.Errorf("commit %q: already committed: %w", key, layers.ErrInvalid)
	}
	if err := os.Rename(s.path(key), s.path(name)); err != nil {
		return fmt.Errorf("commit %q: %w", key, err)
	}
	c := &record{Kind: layers.KindCommitted, Parent: r.Parent}
	modes, err := freeze(s.path(name))
	if err == nil {
		c.Modes = modes
		err = s.writeRecord(name, c)
	}
	if err != nil {
		thaw(s.path(name), modes)
		os.Rename(s.path(name), s.path(key))
		return fmt.Errorf("commit %q: %w", key, err)
	}
	s.snaps[name] = c
	delete(s.snaps, key)
	os.Remove(s.recPath(key)) // Open would drop it: its files are gone
	return nil
}

// Snapshot copies the active snapshot key into the new committed snapshot
// name, with key's Parent, and makes the copy read-only; key stays as it
// is. See layers.Store.
func (s *Store) Snapshot(ctx context.Context, name, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, name, key); err != nil {
		return fmt.Errorf("snapshot %q as %q: %w", key, name, err)
	}
	r := s.snaps[key]
	switch {
	case r == nil:
		return fmt.Errorf("snapshot %q: %w", key, layers.ErrNotFound)
	case r.Kind != layers.KindActive:
		return fmt.Errorf("snapshot %q: not active: %w", key, layers.ErrInvalid)
	case s.snaps[name] != nil:
		return fmt.Errorf("snapshot %q: name %q: %w", key, name, layers.ErrExists)
	}
	dst := s.path(name)
	if err := copyTree(dst, s.path(key), nil); err != nil {
		removeTree(dst)
		return fmt.Errorf("snapshot %q as %q: %w", key, name, err)
	}
	c := &record{Kind: layers.KindCommitted, Parent: r.Parent, Snapshot: true}
	modes, err := freeze(dst)
	if err == nil {
		c.Modes = modes
		err = s.writeRecord(name, c)
	}
	if err != nil {
		removeTree(dst)
		return fmt.Errorf("snapshot %q as %q: %w", key, name, err)
	}
	s.snaps[name] = c
	return nil
}

// Reset replaces the files of the active snapshot key with a copy of the
// committed snapshot parent, swapped in with one rename. See layers.Store.
func (s *Store) Reset(ctx context.Context, key, parent string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, key, parent); err != nil {
		return "", fmt.Errorf("reset %q: %w", key, err)
	}
	r, p := s.snaps[key], s.snaps[parent]
	switch {
	case r == nil:
		return "", fmt.Errorf("reset %q: %w", key, layers.ErrNotFound)
	case r.Kind != layers.KindActive:
		return "", fmt.Errorf("reset %q: not active: %w", key, layers.ErrInvalid)
	case p == nil:
		return "", fmt.Errorf("reset %q: parent %q: %w", key, parent, layers.ErrNotFound)
	case p.Kind != layers.KindCommitted:
		return "", fmt.Errorf("reset %q: parent %q is not committed: %w", key, parent, layers.ErrInvalid)
	}
	dst := s.path(key)
	tmp, old := dst+".reset", dst+".old"
	if err := copyTree(tmp, s.path(parent), p.Modes); err != nil {
		removeTree(tmp)
		return "", fmt.Errorf("reset %q to %q: %w", key, parent, err)
	}
	if err := os.Rename(dst, old); err != nil {
		removeTree(tmp)
		return "", fmt.Errorf("reset %q: %w", key, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Rename(old, dst)
		removeTree(tmp)
		return "", fmt.Errorf("reset %q: %w", key, err)
	}
	removeTree(old)
	return dst, nil
}

// Stat describes the snapshot key. See layers.Store.
func (s *Store) Stat(ctx context.Context, key string) (layers.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, key); err != nil {
		return layers.Info{}, fmt.Errorf("stat %q: %w", key, err)
	}
	r := s.snaps[key]
	if r == nil {
		return layers.Info{}, fmt.Errorf("stat %q: %w", key, layers.ErrNotFound)
	}
	return s.info(key, r), nil
}

func (s *Store) info(key string, r *record) layers.Info {
	return layers.Info{Key: key, Kind: r.Kind, Parent: r.Parent, Path: s.path(key)}
}

// Walk calls fn for every snapshot, in no particular order, as the btrfs
// backend's Walk does for Recover. fn may call back into the store.
func (s *Store) Walk(ctx context.Context, fn func(layers.Info) error) error {
	return layers.WalkInfos(ctx, &s.mu, func() ([]layers.Info, error) {
		if err := s.check(ctx); err != nil {
			return nil, err
		}
		infos := make([]layers.Info, 0, len(s.snaps))
		for k, r := range s.snaps {
			infos = append(infos, s.info(k, r))
		}
		return infos, nil
	}, fn)
}

// Remove deletes the snapshot key. Its children hold copies of its files,
// so they stay as they are; their Parent becomes "". See layers.Store.
func (s *Store) Remove(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, key); err != nil {
		return fmt.Errorf("remove %q: %w", key, err)
	}
	if s.snaps[key] == nil {
		return fmt.Errorf("remove %q: %w", key, layers.ErrNotFound)
	}
	if err := removeTree(s.path(key)); err != nil {
		return fmt.Errorf("remove %q: %w", key, err)
	}
	delete(s.snaps, key)
	if err := os.Remove(s.recPath(key)); err != nil {
		return fmt.Errorf("remove %q: %w", key, err)
	}
	// Last, so that a crash before leaves Parents that Open clears.
	for k, c := range s.snaps {
		if c.Parent == key {
			if err := s.orphan(k, c); err != nil {
				return fmt.Errorf("remove %q: child %q: %w", key, k, err)
			}
		}
	}
	return nil
}

// orphan clears the Parent of key, whose parent is gone, in its record too
// (so that a snapshot that later takes the parent's name is not taken for
// it).
func (s *Store) orphan(key string, r *record) error {
	c := *r
	c.Parent = ""
	if err := s.writeRecord(key, &c); err != nil {
		return err
	}
	*r = c
	return nil
}

// Usage is the size of the regular files of key that its parent does not
// hold with the same content, or 0 for a snapshot made by Snapshot. See
// layers.Store.
func (s *Store) Usage(ctx context.Context, key string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, key); err != nil {
		return 0, fmt.Errorf("usage %q: %w", key, err)
	}
	r := s.snaps[key]
	if r == nil {
		return 0, fmt.Errorf("usage %q: %w", key, layers.ErrNotFound)
	}
	if r.Snapshot {
		return 0, nil
	}
	root := s.path(key)
	var n int64
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		if r.Parent != "" {
			rel, _ := filepath.Rel(root, p)
			if same, err := sameFile(p, filepath.Join(s.path(r.Parent), rel), fi.Size()); err != nil || same {
				return err
			}
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("usage %q: %w", key, err)
	}
	return n, nil
}

// SetLimit records bytes as the limit of the active snapshot key (0: none),
// for Limit to report; nothing enforces it. Reset keeps it and Commit
// drops it. It fails as layers.Store says, never with ErrUnsupported.
func (s *Store) SetLimit(ctx context.Context, key string, bytes int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, key); err != nil {
		return fmt.Errorf("set limit of %q: %w", key, err)
	}
	if bytes < 0 {
		return fmt.Errorf("set limit of %q to %d: %w", key, bytes, layers.ErrInvalid)
	}
	r := s.snaps[key]
	switch {
	case r == nil:
		return fmt.Errorf("set limit of %q: %w", key, layers.ErrNotFound)
	case r.Kind != layers.KindActive:
		return fmt.Errorf("set limit of %q: not active: %w", key, layers.ErrInvalid)
	}
	c := *r
	c.Limit = bytes
	if err := s.writeRecord(key, &c); err != nil {
		return fmt.Errorf("set limit of %q: %w", key, err)
	}
	*r = c
	return nil
}

// Limit returns the limit SetLimit set on the active snapshot key, or 0 if
// it has none or there is no such active snapshot.
func (s *Store) Limit(key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.snaps[key]; r != nil && r.Kind == layers.KindActive {
		return r.Limit
	}
	return 0
}

// Import makes the committed snapshot name holding a copy of fsys (an
// fstest.MapFS, say), as rootfs.Import does from a real root filesystem.
func (s *Store) Import(ctx context.Context, name string, fsys fs.FS) error {
	build := name + "-import"
	if len(build) > layers.MaxKeyLen {
		build = "import"
	}
	p, err := s.Prepare(ctx, build, "")
	if err != nil {
		return err
	}
	if err := os.CopyFS(p, fsys); err != nil {
		s.Remove(ctx, build)
		return fmt.Errorf("import %q: %w", name, err)
	}
	if err := s.Commit(ctx, name, build); err != nil {
		s.Remove(ctx, build)
		return err
	}
	return nil
}

// Close releases the store: every later call fails. Its snapshots stay in
// Dir() for the next Open.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Destroy closes the store and removes Dir() with every snapshot in it,
// read-only ones included.
func (s *Store) Destroy() error {
	s.Close()
	return removeTree(s.dir)
}

// writeRecord stores r as key's record, atomically.
func (s *Store) writeRecord(key string, r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// A valid key never starts with '.', so the temporary file is never a
	// record.
	tmp := filepath.Join(s.metaDir(), "."+key+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.recPath(key))
}

// copyTree copies src to the new directory dst: directories, regular files
// and symlinks, with their mode bits (modes, by relative path, overriding
// src's), modification times and, as root, owners.
func copyTree(dst, src string, modes map[string]fs.FileMode) error {
	type dir struct {
		path string
		fi   fs.FileInfo
		mode fs.FileMode
	}
	var dirs []dir // set their modes and times last, children first
	err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if m, ok := modes[filepath.ToSlash(rel)]; ok {
			mode = m
		}
		mode &= fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
		target := filepath.Join(dst, rel)
		switch {
		case de.IsDir():
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dir{target, fi, mode})
			return nil
		case de.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case de.Type().IsRegular():
			if err := copyFile(target, p, mode); err != nil {
				return err
			}
			if err := os.Chtimes(target, fi.ModTime(), fi.ModTime()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: %v files are not supported", p, de.Type())
		}
		return chown(target, fi)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := chown(d.path, d.fi); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chtimes(d.path, d.fi.ModTime(), d.fi.ModTime()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(dst, src string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// chown gives path the owner of fi when the test runs as root.
func chown(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	return os.Lchown(path, int(st.Uid), int(st.Gid))
}

// sameFile reports whether the regular file b exists with a's size and
// content.
func sameFile(a, b string, size int64) (bool, error) {
	fi, err := os.Lstat(b)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return false, nil
	}
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, errA := io.ReadFull(fa, ba)
		nb, errB := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return errB == io.EOF || errB == io.ErrUnexpectedEOF, nil
		}
		if errA != nil {
			return false, errA
		}
		if errB != nil {
			return false, errB
		}
	}
}

// freeze makes the tree at root read-only: immutable when the process may
// set that attribute (root), else without write bits, in which case it
// returns the modes it changed.
func freeze(root string) (map[string]fs.FileMode, error) {
	if os.Geteuid() == 0 {
		return nil, walkNoLinks(root, func(p string, _ fs.FileInfo) error {
			return setImmutable(p, true)
		})
	}
	modes := map[string]fs.FileMode{}
	err := walkNoLinks(root, func(p string, fi fs.FileInfo) error {
		mode := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if mode&0o222 == 0 {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		modes[filepath.ToSlash(rel)] = mode
		return os.Chmod(p, mode&^0o222)
	})
	return modes, err
}

// thaw undoes freeze as far as it can.
func thaw(root string, modes map[string]fs.FileMode) {
	walkNoLinks(root, func(p string, fi fs.FileInfo) error {
		setImmutable(p, false)
		if rel, err := filepath.Rel(root, p); err == nil {
			if m, ok := modes[filepath.ToSlash(rel)]; ok {
				os.Chmod(p, m)
			}
		}
		return nil
	})
}

// removeTree removes path and everything below it, read-only (immutable or
// write-protected) files and directories included.
func removeTree(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	walkNoLinks(path, func(p string, fi fs.FileInfo) error {
		setImmutable(p, false)
		if fi.IsDir() && fi.Mode().Perm()&0o700 != 0o700 {
			os.Chmod(p, fi.Mode().Perm()|0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}

// walkNoLinks calls fn for root and every directory and regular file below
// it, parents first; it does not follow symlinks.
func walkNoLinks(root string, fn func(string, fs.FileInfo) error) error {
	return filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		return fn(p, fi)
	})
}
