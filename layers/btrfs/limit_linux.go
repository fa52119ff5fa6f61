package btrfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
)

// Per-snapshot limits are btrfs qgroup limits on the exclusive bytes of an
// active snapshot's level-0 qgroup (0/<subvolume id>), which the kernel
// checks as it reserves space for a write: past the limit, the write
// fails with EDQUOT. The limit is kept twice: in the kernel's quota tree
// (persistent, but per subvolume, so a Reset's new subvolume starts with
// none) and in the key's record, which is the truth: Reset applies it to
// the new subvolume before the record swap, and Open applies it to
// any subvolume whose kernel limit differs.

// SetLimit caps the exclusive bytes of the active snapshot key (those
// Usage reports) at bytes, or removes the cap if bytes is 0. Past it,
// writes inside key fail with EDQUOT; deleting files in key brings the
// count down again at the next transaction commit (a sync), as long as no
// other snapshot holds them. The cap may be set below what key already
// holds: every later allocation fails, deletions still work, and so do
// Snapshot, Reset, Remove and Commit of key (Commit drops the cap first:
// a committed snapshot has none).
//
// With simple quotas, which hearth turns on in a backing file it formats,
// an extent is charged to the subvolume that wrote it for as long as any
// snapshot uses it. So a root prepared from an image starts near 0 and
// counts only what the sandbox writes, but what it wrote before a
// Snapshot stays charged to it while that checkpoint exists, even after
// the sandbox deletes it; removing the checkpoint, or a Reset (a new
// subvolume that starts at 0), releases it. With full qgroups (a host's
// own btrfs on which an admin ran `btrfs quota enable`) the cap counts the
// extents no other subvolume shares: a Snapshot makes what key holds
// shared, and removing it makes that exclusive to key again.
//
// The cap is set with one BTRFS_IOC_QGROUP_LIMIT and key's record is
// replaced after it (one rename); both are durable at the next transaction
// commit, and Open applies the recorded cap again. It fails with
// layers.ErrInvalid (bad key, negative bytes, key committed),
// layers.ErrNotFound, layers.ErrInUse (another call is changing key;
// Snapshots of key in flight are waited for) or layers.ErrUnsupported when
// quotas are off on the filesystem: on a Dir that is natively on btrfs,
// hearth leaves that to the admin (`btrfs quota enable --simple <mount>`,
// Linux 6.7+).
func (s *Store) SetLimit(ctx context.Context, key string, bytes int64) error {
	if err := layers.CheckArgs(ctx, key, ""); err != nil {
		return err
	}
	if bytes < 0 {
		return fmt.Errorf("set limit of %q to %d: %w", key, bytes, layers.ErrInvalid)
	}
	s.mu.Lock()
	e, err := s.active("set limit of", key)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	// Without quotas there is no cap to remove, unless a record holds
	// one from before quotas were turned off.
	if s.qgroups == "" && (bytes != 0 || e.Limit == 0) {
		s.mu.Unlock()
		if bytes == 0 {
			return nil
		}
		return fmt.Errorf("set limit of %q: quotas are off on %s: %w", key, s.dir, layers.ErrUnsupported)
	}
	if err := e.Claim(ctx, &s.mu); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("set limit of %q: %w", key, err)
	}
	old := e.record
	r := old
	r.Limit = bytes
	s.mu.Unlock()

	err = s.setLimit(key, old, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Busy = false
	if err != nil {
		return fmt.Errorf("set limit of %q to %d: %w", key, bytes, err)
	}
	// Only the limit: Remove of key's parent may have cleared Parent
	// meanwhile (the record written keeps it; load clears it again).
	e.Limit = bytes
	return nil
}

func (s *Store) setLimit(key string, old, r record) error {
	if s.qgroups == "" {
		return s.records.replace(key, r)
	}
	if err := s.subvols.limit(r.ID, r.Limit); err != nil {
		return err
	}
	if err := s.records.replace(key, r); err != nil {
		if lerr := s.subvols.limit(old.ID, old.Limit); lerr != nil {
			s.log.Error("layers: restoring the limit after a failed set", "key", key, "err", lerr)
		}
		return err
	}
	return nil
}

// limit sets the kernel's limit of the subvolume id to bytes (0: no
// limit). ENOTCONN (quotas turned off since Open) becomes
// layers.ErrUnsupported.
func (v subvols) limit(id string, bytes int64) error {
	subvol, err := subvolID(v.path(id))
	if err != nil {
		return err
	}
	err = limitQgroup(string(v), subvol, bytes)
	if errors.Is(err, unix.ENOTCONN) {
		return fmt.Errorf("quotas are off: %w: %w", layers.ErrUnsupported, err)
	}
	return err
}

// qgroupLimit returns the kernel's exclusive-bytes limit of the subvolume
// at path (0: none), from sysfs.
func qgroupLimit(qgroupsDir, path string) (int64, error) {
	subvol, err := subvolID(path)
	if err != nil {
		return 0, err
	}
	dir := filepath.Join(qgroupsDir, fmt.Sprintf("0_%d", subvol))
	flags, err := readSysfsInt(filepath.Join(dir, "limit_flags"))
	if err != nil || flags&btrfsQgroupLimitMaxExcl == 0 {
		return 0, err
	}
	return readSysfsInt(filepath.Join(dir, "max_exclusive"))
}

// inheritsLimits reports whether, on the filesystem whose sysfs qgroups
// directory is qgroupsDir, a snapshot gets its source's qgroup limits. Full
// qgroups copy them (btrfs_qgroup_inherit); simple quotas do not, and say
// so in qgroups/mode (Linux 6.7+, which has no such file before).
func inheritsLimits(qgroupsDir string) bool {
	mode, err := os.ReadFile(filepath.Join(qgroupsDir, "mode"))
	return err != nil || strings.TrimSpace(string(mode)) != "squota"
}

// fixLimits makes the kernel's limit of every active snapshot the one its
// record holds, once Open loaded the records: a crash may have lost a limit set since the
// last transaction commit, and with full qgroups a snapshot made from a
// limited one inherits a limit it should not have. A failure is logged,
// not returned: the kernel usually has the limit already, and a store
// that does not open stops every sandbox.
func (s *Store) fixLimits() {
	for key, e := range s.entries {
		if e.Kind != layers.KindActive {
			continue
		}
		log := s.log.With("key", key, "limit", e.Limit)
		if s.qgroups == "" {
			if e.Limit != 0 {
				log.Warn("layers: quotas are off: the limit is not enforced")
			}
			continue
		}
		got, err := qgroupLimit(s.qgroups, s.subvols.path(e.ID))
		if err == nil && got == e.Limit {
			continue
		}
		log.Info("layers: applying the recorded limit", "kernel", got, "err", err)
		if err := s.subvols.limit(e.ID, e.Limit); err != nil {
			log.Error("layers: applying the recorded limit", "err", err)
		}
	}
}

func readSysfsInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}
