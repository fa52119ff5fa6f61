package testenv

import (
	"os"
	"testing"
)

// DirNames returns the names of directory dir's entries, sorted by name
// (os.ReadDir's order); it fails t when dir cannot be read.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
