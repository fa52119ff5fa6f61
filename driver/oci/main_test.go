package oci_test

import (
	"os"
	"testing"

	"github.com/hearth/hearth/driver/drivertest"
)

// TestMain removes the btrfs layer store the tests' roots come from, and
// the default cgroup parent ("hearth") that the tests' drivers, which name
// none, made in every hierarchy, if nothing is left in it: a sandbox the
// tests left behind keeps it, and so does a daemon of the default
// instance running on the same host.
func TestMain(m *testing.M) {
	code := m.Run()
	drivertest.RemoveSnapshots()
	dirs, _ := drivertest.CgroupDirs("hearth")
	for _, dir := range dirs {
		os.Remove(dir) // an empty directory only
	}
	os.Exit(code)
}
