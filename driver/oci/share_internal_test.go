package oci

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
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

// TestShareAgentNeverReplaced: many first starts at once share one copy
// of the agent binary, and once a copy is there (a runtime may be
// bind-mounting it) no later writer replaces it: every caller sees the
// inode the last one sees. Renamed into place, later writers replaced the
// copy under runc, whose mount of it then failed with ENOENT.
func TestShareAgentNeverReplaced(t *testing.T) {
	src := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(src, make([]byte, 8<<20), 0o755); err != nil {
		t.Fatal(err)
	}
	m := &mountDir{path: t.TempDir()}
	const n = 16
	inodes := make(chan uint64, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			dst, err := m.shareAgent(src)
			if err != nil {
				t.Error(err)
				return
			}
			var st unix.Stat_t
			if err := unix.Stat(dst, &st); err != nil {
				t.Error(err)
				return
			}
			inodes <- st.Ino
		}()
	}
	close(start)
	wg.Wait()
	close(inodes)
	entries, err := os.ReadDir(m.path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("the mount directory holds %d entries after %d shares; want the one copy", len(entries), n)
	}
	info, err := entries[0].Info()
	if err != nil {
		t.Fatal(err)
	}
	final := info.Sys().(*syscall.Stat_t).Ino
	for ino := range inodes {
		if ino != final {
			t.Fatalf("a caller was handed inode %d, replaced since by %d", ino, final)
		}
	}
}
