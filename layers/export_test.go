//go:build linux

package layers

import "context"

// ForceWalkUsage makes s behave as on a btrfs without quotas: Usage walks
// files and SetLimit fails with ErrUnsupported.
func ForceWalkUsage(s *Btrfs) { s.qgroups = "" }

// KernelLimit returns the kernel's exclusive-bytes limit of the subvolume
// of key (0: none), read from sysfs.
func KernelLimit(s *Btrfs, key string) (int64, error) {
	info, err := s.Stat(context.Background(), key)
	if err != nil {
		return 0, err
	}
	if s.qgroups == "" {
		return 0, ErrUnsupported
	}
	return qgroupLimit(s.qgroups, info.Path)
}
