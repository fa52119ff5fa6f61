package oci_test

import (
	"os"
	"testing"

	"github.com/hearth/hearth/driver/drivertest"
)

// TestMain removes the btrfs layer store the tests' roots come from.
func TestMain(m *testing.M) {
	code := m.Run()
	drivertest.RemoveSnapshots()
	os.Exit(code)
}
