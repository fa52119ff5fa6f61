package overlay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/layers"
)

// tmpPrefix starts the name of a record being written, which is not a
// valid key, so load never takes it for a record.
const tmpPrefix = ".tmp-"

// record is the metadata of one snapshot, kept at meta/<key> as JSON
// ({"id":…,"kind":…,"parent":…,"parent_id":…,"layers":[…],"copied":…}).
//
// Records are not rewritten when a parent goes, so Parent is the parent
// at the time the record was written; ParentID, the parent's ID, tells
// load whether the snapshot now called Parent is still that one (see
// resolveParents).
type record struct {
	// ID names the snapshot's mount point, mnt/<id>. It is new for every
	// record a call writes (Commit and Reset too), so a mount at a
	// record's mount point is always that record's.
	ID       string      `json:"id"`
	Kind     layers.Kind `json:"kind"`
	Parent   string      `json:"parent,omitempty"`
	ParentID string      `json:"parent_id,omitempty"`
	// Layers are the ids of the snapshot's layers, topmost first. An
	// active snapshot's first is its upper dir; a committed snapshot's
	// first is its own (the upper dir it was committed from, or the copy
	// Snapshot made), and the rest are its parent's at the time.
	Layers []string `json:"layers"`
	// Copied marks a snapshot made by Snapshot, whose Usage is 0.
	Copied bool `json:"copied,omitempty"`
}

// records is the directory of a store's records, meta/.
type records string

// path is the file of key's record.
func (m records) path(key string) string { return filepath.Join(string(m), key) }

// writeRecord writes key's record, creating or replacing it in one rename
// of a synced file, so that a crash leaves the old record (or none) or the
// new one; it is durable when writeRecord returns. The caller has reserved
// or claimed key: two writes of one record never run at once.
func (m records) write(key string, r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(string(m), tmpPrefix+key)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, m.path(key))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return layers.Fsync(string(m))
}

// removeRecord removes key's record, durably.
func (m records) remove(key string) error {
	if err := os.Remove(m.path(key)); err != nil {
		return err
	}
	return layers.Fsync(string(m))
}

func (m records) read(key string) (record, error) {
	var r record
	data, err := os.ReadFile(m.path(key))
	if err != nil {
		return r, err
	}
	bad := json.Unmarshal(data, &r) != nil || !isID(r.ID) || (r.Kind != layers.KindActive && r.Kind != layers.KindCommitted) || len(r.Layers) == 0
	for _, id := range r.Layers {
		bad = bad || !isID(id)
	}
	if bad {
		return r, fmt.Errorf("corrupt record %s: %q", m.path(key), data)
	}
	return r, nil
}

// isID reports whether id can be an id layers.NewID made, and so is safe
// in a path.
func isID(id string) bool {
	return len(id) == 16 && strings.Trim(id, "0123456789abcdef") == ""
}

// load reads every record into the index and repairs what a crash in the
// middle of a call left behind. Every call writes the record that makes
// it happen (its commit point) after what the record names exists, and
// deletes what a record named only after the record is gone, which leaves
// these cases:
//
//   - a record being written (under its temporary name): it goes, and the
//     old record, if any, stays (a Reset or a Snapshot that did not
//     happen);
//   - a mount at a mount point no record names: a Prepare, Snapshot, Reset
//     or Commit killed before its record, or a Remove or Reset killed
//     after it; it is detached and its mount point removed;
//   - a layer no record names (the new upper of such a Prepare or Reset,
//     the copy of such a Snapshot, what such a Remove or Reset left): it
//     is deleted, with its work dir; so is the work dir of a layer that
//     is no active snapshot's upper (a Commit that did not get to it);
//   - an active and a committed record naming one top layer: a Commit
//     that wrote name's record (its commit point) but did not remove
//     key's; the committed record stays;
//   - a record's mount missing (a reboot, or a Commit killed between its
//     unmount and its record): it is mounted again;
//   - a record naming a layer that is missing (a filesystem that lost
//     what it had made durable): the snapshot cannot be mounted, and
//     goes, with an error in the log;
//   - a Parent that is gone (see resolveParents).
//
// Mounts that a record names are kept as they are: sandboxes run on them.
func (s *Store) load(ctx context.Context) error {
	des, err := os.ReadDir(s.dirs.meta())
	if err != nil {
		return fmt.Errorf("layers/overlay: %w", err)
	}
	records := make(map[string]record)
	for _, de := range des {
		key := de.Name()
		if layers.ValidateKey(key) != nil {
			p := filepath.Join(s.dirs.meta(), key)
			if !strings.HasPrefix(key, tmpPrefix) {
				s.log.Warn("layers/overlay: ignoring a stray file", "file", p)
				continue
			}
			s.log.Info("layers/overlay: removing an unfinished record", "file", p)
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("layers/overlay: %w", err)
			}
			continue
		}
		r, err := s.records.read(key)
		if err != nil {
			return fmt.Errorf("layers/overlay: %w", err)
		}
		records[key] = r
	}
	if err := s.dropBroken(records); err != nil {
		return err
	}
	if err := s.finishCommits(records); err != nil {
		return err
	}
	ids := make(map[string]string) // record ID -> key
	for k, r := range records {
		s.entries[k] = &entry{record: r, Guard: layers.Guard{Visible: true}}
		s.refs.ref(r.Layers)
		ids[r.ID] = k
	}
	s.resolveParents()
	if err := s.repairMounts(ctx, ids); err != nil {
		return err
	}
	return s.collectLayers()
}

// dropBroken removes the records that name a missing layer.
func (s *Store) dropBroken(records map[string]record) error {
	for k, r := range records {
		for _, id := range r.Layers {
			if _, err := os.Lstat(s.dirs.layer(id)); err == nil {
				continue
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("layers/overlay: %w", err)
			}
			s.log.Error("layers/overlay: dropping a snapshot whose layer is missing", "key", k, "layer", id)
			if err := s.records.remove(k); err != nil {
				return fmt.Errorf("layers/overlay: %w", err)
			}
			delete(records, k)
			break
		}
	}
	return nil
}

// finishCommits removes the active record of every interrupted Commit:
// one whose top layer a committed record names too.
func (s *Store) finishCommits(records map[string]record) error {
	byTop := make(map[string]string) // top layer -> key
	for k, r := range records {
		other, ok := byTop[r.Layers[0]]
		if !ok {
			byTop[r.Layers[0]] = k
			continue
		}
		keep, drop := other, k
		if records[other].Kind == layers.KindActive {
			keep, drop = k, other
		}
		if records[keep].Kind != layers.KindCommitted || records[drop].Kind != layers.KindActive {
			return fmt.Errorf("layers/overlay: records %q and %q both name layer %s", keep, drop, r.Layers[0])
		}
		s.log.Info("layers/overlay: finishing an interrupted commit", "key", drop, "name", keep)
		if err := s.records.remove(drop); err != nil {
			return fmt.Errorf("layers/overlay: %w", err)
		}
		delete(records, drop)
		byTop[r.Layers[0]] = keep
	}
	return nil
}

// resolveParents clears, in the index, the Parent of every snapshot whose
// parent has been removed (Remove cleared it in the index then, but
// records are never rewritten): the key is missing, or names another
// snapshot than the one the record was made from (a different ID), or one
// that is not committed.
func (s *Store) resolveParents() {
	for _, e := range s.entries {
		if e.Parent == "" {
			continue
		}
		if p := s.entries[e.Parent]; p == nil || p.Kind != layers.KindCommitted || p.ID != e.ParentID {
			e.Parent, e.ParentID = "", ""
		}
	}
}

// repairMounts detaches the mounts under mnt/ that no record names and
// removes their mount points, and mounts every snapshot whose mount is
// missing; ids maps record IDs to keys.
func (s *Store) repairMounts(ctx context.Context, ids map[string]string) error {
	points, err := mountinfo.Under(s.dirs.mnt())
	if err != nil {
		return fmt.Errorf("layers/overlay: %w", err)
	}
	mounted := make(map[string]bool)
	for _, p := range points {
		// Mounts below a snapshot's mount are not the store's.
		if filepath.Dir(p) != s.dirs.mnt() {
			continue
		}
		id := filepath.Base(p)
		if _, ok := ids[id]; ok {
			mounted[id] = true
			continue
		}
		s.log.Info("layers/overlay: unmounting what no record names", "path", p)
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && err != unix.EINVAL {
			return fmt.Errorf("layers/overlay: umount %s: %w", p, err)
		}
	}
	des, err := os.ReadDir(s.dirs.mnt())
	if err != nil {
		return fmt.Errorf("layers/overlay: %w", err)
	}
	for _, de := range des {
		if _, ok := ids[de.Name()]; ok {
			continue
		}
		if err := os.Remove(filepath.Join(s.dirs.mnt(), de.Name())); err != nil {
			s.log.Warn("layers/overlay: removing a stray mount point", "err", err)
		}
	}
	for id, key := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		if mounted[id] {
			continue
		}
		e := s.entries[key]
		if e.Kind == layers.KindActive {
			// overlayfs empties the work dir; it must only be there.
			if err := os.MkdirAll(filepath.Join(s.dirs.work(), e.Layers[0]), 0o700); err != nil {
				return fmt.Errorf("layers/overlay: %w", err)
			}
		}
		s.log.Info("layers/overlay: mounting", "key", key, "path", s.dirs.mount(id))
		if err := s.mount(e.record); err != nil {
			return fmt.Errorf("layers/overlay: mounting %q: %w", key, err)
		}
	}
	return nil
}

// collectLayers deletes the layers no record names, and the work dirs of
// layers that are no active snapshot's upper.
func (s *Store) collectLayers() error {
	uppers := make(map[string]bool)
	for _, e := range s.entries {
		if e.Kind == layers.KindActive {
			uppers[e.Layers[0]] = true
		}
	}
	for _, c := range []struct {
		dir  string
		keep func(id string) bool
	}{
		{s.dirs.layers(), func(id string) bool { return s.refs[id] > 0 }},
		{s.dirs.work(), func(id string) bool { return uppers[id] }},
	} {
		des, err := os.ReadDir(c.dir)
		if err != nil {
			return fmt.Errorf("layers/overlay: %w", err)
		}
		for _, de := range des {
			if c.keep(de.Name()) {
				continue
			}
			p := filepath.Join(c.dir, de.Name())
			s.log.Info("layers/overlay: deleting what no record names", "path", p)
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("layers/overlay: %w", err)
			}
		}
	}
	return nil
}
