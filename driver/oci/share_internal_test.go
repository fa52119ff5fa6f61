package oci

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/mountinfo"
)

// TestSweepOrphans mounts three mount directories beside a driver's own:
// one whose state directory is gone (with a root mounted inside), one
// whose state directory exists, one without an owner file. The driver's
// first mount unmounts and removes the first only.
func TestSweepOrphans(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	parent := t.TempDir()
	live, gone := t.TempDir(), filepath.Join(t.TempDir(), "deleted")
	mounted := func(dir string) bool {
		under, err := mountinfo.Under(parent)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(under, dir)
	}
	orphan := &mountDir{path: filepath.Join(parent, "orphan"), owner: gone}
	kept := &mountDir{path: filepath.Join(parent, "kept"), owner: live}
	anon := &mountDir{path: filepath.Join(parent, "anon"), owner: gone}
	for _, m := range []*mountDir{orphan, kept, anon} {
		if err := m.ensure(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(m.path, unix.MNT_DETACH) })
	}
	if err := os.Remove(filepath.Join(anon.path, ownerFile)); err != nil {
		t.Fatal(err)
	}
	inner := orphan.rootMount("sb1")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	self := &mountDir{path: filepath.Join(parent, "self"), owner: live, sweep: true}
	if err := self.ensure(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(self.path, unix.MNT_DETACH) })
	if mounted(orphan.path) || mounted(inner) {
		t.Errorf("the orphan's mounts stay: %v", must(mountinfo.Under(parent)))
	}
	if _, err := os.Lstat(orphan.path); !os.IsNotExist(err) {
		t.Errorf("the orphan's directory stays: %v", err)
	}
	for _, dir := range []string{kept.path, anon.path, self.path} {
		if !mounted(dir) {
			t.Errorf("%s was unmounted", dir)
		}
	}
	if b, err := os.ReadFile(filepath.Join(self.path, ownerFile)); err != nil || string(b) != live {
		t.Errorf("owner file = %q, %v; want %q", b, err, live)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
