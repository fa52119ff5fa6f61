package kernfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRead reads a file whole, one longer than its first buffer
// included, and a missing one as fs.ErrNotExist.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 1023, 1024, 1025, 70000} {
		want := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Read(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d bytes: Read = %d bytes, %v", n, len(got), err)
		}
	}
	// A procfs file: the same as os.ReadFile's (this process's limits do
	// not change between the reads).
	want, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Read("/proc/self/limits"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("/proc/self/limits: Read = %q, %v; want %q", got, err, want)
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := Read(dir); err == nil {
		t.Errorf("a directory: read with no error")
	}
}

// TestDirNames lists a directory longer than one getdents buffer,
// without "." and "..", and this process in /proc.
func TestDirNames(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 600 { // ≈ 30 KiB of entries: several getdents
		name := strings.Repeat("n", 30) + fmt.Sprintf("%04d", i)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	got, err := DirNames(dir)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("DirNames = %d names, %v; want the %d made", len(got), err, len(want))
	}
	procs, err := DirNames("/proc")
	if err != nil || !slices.Contains(procs, strconv.Itoa(os.Getpid())) || slices.Contains(procs, ".") || slices.Contains(procs, "..") {
		t.Errorf("DirNames(/proc) = %d names, %v: want this process's pid, no . or ..", len(procs), err)
	}
	if _, err := DirNames(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing directory: err = %v, want fs.ErrNotExist", err)
	}
}
