package oci

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestReadSmallFile: the whole file, whatever its size (empty, under and
// over the first buffer, a procfs file whose size stat cannot tell), and
// a missing one as fs.ErrNotExist.
func TestReadSmallFile(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 1023, 1024, 1025, 70_000} {
		want := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		path := filepath.Join(dir, "f")
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := readSmallFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("readSmallFile of %d bytes = %d bytes, %v", n, len(got), err)
		}
	}
	want, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readSmallFile("/proc/self/mountinfo"); err != nil || len(got) < len(want)/2 || !bytes.HasPrefix(got, want[:bytes.IndexByte(want, ' ')]) {
		t.Errorf("readSmallFile(/proc/self/mountinfo) = %d bytes, %v; os.ReadFile read %d", len(got), err, len(want))
	}
	_, err = readSmallFile(filepath.Join(dir, "missing"))
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != filepath.Join(dir, "missing") {
		t.Errorf("readSmallFile of a missing file = %v, want a *fs.PathError that is fs.ErrNotExist", err)
	}
}
