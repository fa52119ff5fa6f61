// Package testenv decides what a test does when the host lacks something it
// needs (root, a runtime, btrfs, the default image): skip, on a developer's
// machine, or fail, where HEARTH_TEST_STRICT is set (./scripts/test.sh and
// CI set it), so that a check that did not run is never counted as passed.
package testenv

import (
	"os"
	"testing"
)

// Skip skips t with the reason, or fails it when HEARTH_TEST_STRICT is set.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("HEARTH_TEST_STRICT") != "" {
		t.Fatalf("HEARTH_TEST_STRICT is set, so this cannot be skipped: "+format, args...)
	}
	t.Skipf(format, args...)
}
