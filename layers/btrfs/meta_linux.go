package btrfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hearth/hearth/layers"
)

// record is the metadata of one snapshot, kept at meta/<key> as a symbolic
// link whose target is the record in JSON ({"id":…,"kind":…,"parent":…,
// "parent_id":…,"limit":…}; keys and ids hold no '/').
//
// A symlink, not a file: creating one is a single metadata operation that
// joins the running btrfs transaction, so the snapshot or set-flags ioctl
// that follows it, which commits that transaction, makes the record and
// the subvolume durable together. A regular file would need an fsync of the
// file and of the directory (≈6 ms on a loop device, more than the snapshot
// itself) to be as safe.
//
// Records are not updated when a parent goes, so Parent is the parent at
// the time the record was made (or replaced, by Reset and SetLimit);
// ParentID, the parent's subvolume id, tells load whether the snapshot now
// called Parent is still that one (see resolveParents). Records from
// before ParentID have none and trust the name.
type record struct {
	ID       string      `json:"id"`
	Kind     layers.Kind `json:"kind"`
	Parent   string      `json:"parent,omitempty"`
	ParentID string      `json:"parent_id,omitempty"`
	// Limit is the cap SetLimit put on an active snapshot's exclusive
	// bytes, 0 for none. The kernel keeps it per subvolume; this copy
	// is what Reset carries to a new subvolume and load applies again.
	Limit int64 `json:"limit,omitempty"`
}

// records is the directory of a store's records, meta/: each a symlink
// whose target is the record's JSON.
type records string

// path is the file of key's record.
func (m records) path(key string) string { return filepath.Join(string(m), key) }

// write creates key's record. It fails if one exists (see
// replace).
func (m records) write(key string, r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.Symlink(string(data), m.path(key))
}

// replace replaces key's record with r in one rename, so that a
// crash leaves the old record or the new one. It is durable at the next
// transaction commit. The caller has claimed key: two replacements of one
// record must not run at once.
func (m records) replace(key string, r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// The temporary name is not a valid key, so load never takes it for a
	// record; a stale one from a crash is replaced here.
	tmp := filepath.Join(string(m), ".new-"+key)
	os.Remove(tmp)
	if err := os.Symlink(string(data), tmp); err == nil {
		err = os.Rename(tmp, m.path(key))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func (m records) read(key string) (record, error) {
	var r record
	data, err := os.Readlink(m.path(key))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(data), &r); err != nil || r.ID == "" || (r.Kind != layers.KindActive && r.Kind != layers.KindCommitted) {
		return r, fmt.Errorf("corrupt record %s -> %q", m.path(key), data)
	}
	return r, nil
}

func (m records) remove(key string) error {
	return os.Remove(m.path(key))
}

// loader is Open's reading of the records (records, naming subvolumes
// in subvols) into the index entries, and its repairs of what a crash
// left (see load).
type loader struct {
	records records
	subvols subvols
	entries layers.Index[*entry]
	log     *slog.Logger
}

// load reads every record into the index and repairs what a crash in the
// middle of a call left behind. Every call orders its steps so that the
// ioctl that commits a btrfs transaction is the call's commit point (see
// Store), which leaves these cases:
//
//   - a record whose subvolume is missing: a Prepare or a Snapshot that did
//     not get to its snapshot ioctl, or a Remove that did not get to remove
//     the record; the record goes, and with it the name, which is free for
//     the next call (a Snapshot's source is untouched: it never changes the
//     active snapshot's record or subvolume);
//   - an active and a committed record naming one subvolume: a Commit; it
//     happened if the subvolume is read-only, so the committed record
//     stays, else the active one does;
//   - a subvolume no record names (only from older layouts or by hand): it
//     is deleted;
//   - a replaced record (Reset, SetLimit) left under its temporary name:
//     it goes, and the old record stays;
//   - a Parent that is gone (see resolveParents).
//
// (Open then fixes the limits the kernel lost: Store.fixLimits.)
func (l loader) load() error {
	byID, err := l.loadRecords()
	if err != nil {
		return err
	}
	for id, keys := range byID {
		if err := l.settleRecords(id, keys); err != nil {
			return err
		}
	}
	if err := l.removeOrphans(byID); err != nil {
		return err
	}
	l.resolveParents()
	return nil
}

// loadRecords reads every record into the index, dropping unfinished
// record replacements and the records of missing subvolumes, and returns
// the keys whose records name each subvolume id.
func (l loader) loadRecords() (map[string][]string, error) {
	des, err := os.ReadDir(string(l.records))
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	byID := make(map[string][]string) // subvolume id -> keys
	for _, de := range des {
		key := de.Name()
		if layers.ValidateKey(key) != nil {
			p := filepath.Join(string(l.records), key)
			// replaceRecord's temporary name (".reset-" before SetLimit).
			if strings.HasPrefix(key, ".new-") || strings.HasPrefix(key, ".reset-") {
				l.log.Info("layers: removing an unfinished record replacement", "file", p)
				if err := os.Remove(p); err != nil {
					return nil, fmt.Errorf("layers: %w", err)
				}
				continue
			}
			l.log.Warn("layers: ignoring stray file", "file", p)
			continue
		}
		r, err := l.records.read(key)
		if err != nil {
			return nil, fmt.Errorf("layers: %w", err)
		}
		if _, err := os.Lstat(l.subvols.path(r.ID)); errors.Is(err, fs.ErrNotExist) {
			l.log.Info("layers: dropping the record of a missing subvolume", "key", key, "id", r.ID)
			if err := l.records.remove(key); err != nil {
				return nil, fmt.Errorf("layers: %w", err)
			}
			continue
		}
		byID[r.ID] = append(byID[r.ID], key)
		l.entries[key] = &entry{record: r, Guard: layers.Guard{Visible: true}}
	}
	return byID, nil
}

// settleRecords makes the records keys of the subvolume id agree with it:
// of two (an interrupted Commit), the one of the kind its read-only flag
// says stays; a lone record sets the flag.
func (l loader) settleRecords(id string, keys []string) error {
	flags, err := subvolFlags(l.subvols.path(id))
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	ro := flags&btrfsSubvolRdonly != 0
	if len(keys) > 1 {
		want := layers.KindActive
		if ro {
			want = layers.KindCommitted
		}
		var keep string
		for _, k := range keys {
			if keep == "" && l.entries[k].Kind == want {
				keep = k
				continue
			}
			l.log.Info("layers: finishing an interrupted commit", "drop", k, "id", id)
			delete(l.entries, k)
			if err := l.records.remove(k); err != nil {
				return fmt.Errorf("layers: %w", err)
			}
		}
		if keep == "" {
			return fmt.Errorf("layers: subvolume %s: records %v and its read-only flag (%v) disagree", id, keys, ro)
		}
		keys = []string{keep}
	}
	// A lone record is the truth about its kind.
	if e := l.entries[keys[0]]; (e.Kind == layers.KindCommitted) != ro {
		l.log.Warn("layers: fixing the read-only flag", "key", keys[0], "id", id, "kind", e.Kind)
		if err := setReadonly(l.subvols.path(id), e.Kind == layers.KindCommitted); err != nil {
			return fmt.Errorf("layers: %w", err)
		}
	}
	return nil
}

// removeOrphans deletes every subvolume (or stray directory) under
// snapshots/ that no record names: byID holds the ids records name.
func (l loader) removeOrphans(byID map[string][]string) error {
	des, err := os.ReadDir(string(l.subvols))
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	for _, de := range des {
		if _, ok := byID[de.Name()]; ok {
			continue
		}
		l.log.Warn("layers: removing a subvolume no record names", "id", de.Name())
		p := filepath.Join(string(l.subvols), de.Name())
		ok, err := isSubvolume(p)
		switch {
		case err == nil && ok:
			err = l.subvols.destroy(de.Name())
		case err == nil:
			err = os.RemoveAll(p)
		}
		if err != nil {
			return fmt.Errorf("layers: removing orphan: %w", err)
		}
	}
	return nil
}

// resolveParents clears, in the index, the Parent of every snapshot whose
// parent has been removed (Remove cleared it in the index then, but records
// are never rewritten): the key is missing, or names another snapshot than
// the one the record was made from (a different id), or one that is not
// committed. A record without ParentID (older layout) gets its parent's id.
func (l loader) resolveParents() {
	for _, e := range l.entries {
		if e.Parent == "" {
			continue
		}
		p := l.entries[e.Parent]
		switch {
		case p == nil || p.Kind != layers.KindCommitted || (e.ParentID != "" && e.ParentID != p.ID):
			e.Parent, e.ParentID = "", ""
		case e.ParentID == "":
			e.ParentID = p.ID
		}
	}
}
