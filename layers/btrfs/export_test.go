//go:build linux

package btrfs

import (
	"context"

	"github.com/hearth/hearth/layers"
)

// ForceWalkUsage makes s behave as on a btrfs without quotas: Usage walks
// files and SetLimit fails with ErrUnsupported.
func ForceWalkUsage(s *Store) { s.qgroups = "" }

// KernelLimit returns the kernel's exclusive-bytes limit of the subvolume
// of key (0: none), read from sysfs.
func KernelLimit(s *Store, key string) (int64, error) {
	info, err := s.Stat(context.Background(), key)
	if err != nil {
		return 0, err
	}
	if s.qgroups == "" {
		return 0, layers.ErrUnsupported
	}
	return qgroupLimit(s.qgroups, info.Path)
}
