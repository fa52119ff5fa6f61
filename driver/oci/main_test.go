package oci_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/internal/mountinfo"
)

// TestMain removes the btrfs layer store the tests' roots come from, and
// the default cgroup parent ("hearth") that the tests' drivers, which name
// none, made in every hierarchy, if nothing is left in it: a sandbox the
// tests left behind keeps it, and so does a daemon of the default
// instance running on the same host.
func TestMain(m *testing.M) {
	code := m.Run()
	drivertest.RemoveSnapshots()
	if mounts, err := mountinfo.Read("/proc/self/mountinfo"); err == nil {
		for _, mnt := range mounts {
			if (mnt.FSType == "cgroup" || mnt.FSType == "cgroup2") && mnt.Root == "/" {
				os.Remove(filepath.Join(mnt.Point, "hearth")) // an empty directory only
			}
		}
	}
	os.Exit(code)
}
