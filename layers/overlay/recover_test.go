//go:build linux

package overlay

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestRecover builds, by hand, each state a process killed between two
// steps of a call leaves, and checks what Open makes of it.
func TestRecover(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := s.Prepare(ctx, "img-build", "")
	must(err)
	mustWrite(t, filepath.Join(p, "etc", "hostname"), "img\n")
	must(s.Commit(ctx, "img", "img-build"))
	img := s.entries["img"].record
	before := map[string]record{}
	for _, k := range []string{"r1", "r2", "c1", "c2", "m1", "m2", "gone"} {
		p, err := s.Prepare(ctx, k, "img")
		must(err)
		mustWrite(t, filepath.Join(p, "data"), k+"\n")
		before[k] = s.entries[k].record
	}
	on := func(top string, below record) record {
		return record{ID: layers.NewID(), Kind: layers.KindActive, Parent: "img", ParentID: img.ID, Layers: append([]string{top}, below.Layers...)}
	}

	// A Reset of r1 killed before its record swap: the new upper layer
	// made and mounted, the new record half written.
	r1 := on(layers.NewID(), img)
	must(s.makeUpper(r1.Layers))
	must(s.mount(r1))
	must(os.WriteFile(filepath.Join(s.dirs.meta(), tmpPrefix+"r1"), []byte(`{"id":`), 0o600))
	// A Reset of r2 killed after its record swap, before it unmounted and
	// deleted the old upper layer.
	r2 := on(layers.NewID(), img)
	must(s.prepare("r2", r2))
	// A Snapshot of c1 killed in its copy.
	c1 := layers.NewID()
	must(copyTree(ctx, s.dirs.layer(c1), s.dirs.layer(before["c1"].Layers[0])))
	// A Snapshot of c2 killed after its record, before its mount.
	c2 := record{ID: layers.NewID(), Kind: layers.KindCommitted, Parent: "img", ParentID: img.ID, Layers: append([]string{layers.NewID()}, img.Layers...), Copied: true}
	must(copyTree(ctx, s.dirs.layer(c2.Layers[0]), s.dirs.layer(before["c2"].Layers[0])))
	must(s.records.write("c2-ck", c2))
	// A Commit of m1 killed after name's record, before it removed key's
	// (and mounted name).
	must(unmount(s.dirs.mount(before["m1"].ID), 0))
	m1 := before["m1"]
	m1.ID, m1.Kind = layers.NewID(), layers.KindCommitted
	must(s.records.write("m1-c", m1))
	// A Commit of m2 killed after it unmounted key.
	must(unmount(s.dirs.mount(before["m2"].ID), 0))
	// A Remove of gone killed after the record went.
	must(s.records.remove("gone"))
	must(s.Close())

	s, err = Open(ctx, Options{Dir: s.Dir()})
	if err != nil {
		t.Fatalf("Open after a crash = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	stat := func(key string) layers.Info {
		t.Helper()
		info, err := s.Stat(ctx, key)
		if err != nil {
			t.Fatalf("Stat(%s) after Open = %v", key, err)
		}
		return info
	}
	gone := func(what, path string) {
		t.Helper()
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s %s after Open = %v, want it gone", what, path, err)
		}
	}

	// r1 is as it was; the half-done Reset left nothing.
	if info := stat("r1"); info.Path != s.dirs.mount(before["r1"].ID) || info.Parent != "img" {
		t.Errorf("Stat(r1) = %+v, want the old path %s", info, s.dirs.mount(before["r1"].ID))
	}
	mustRead(t, filepath.Join(stat("r1").Path, "data"), "r1\n")
	gone("the half-done Reset's mount point", s.dirs.mount(r1.ID))
	gone("the half-done Reset's layer", s.dirs.layer(r1.Layers[0]))
	gone("the half-done Reset's work dir", filepath.Join(s.dirs.work(), r1.Layers[0]))
	gone("the half-written record", filepath.Join(s.dirs.meta(), tmpPrefix+"r1"))

	// r2 is reset; its old content is gone.
	if info := stat("r2"); info.Path != s.dirs.mount(r2.ID) {
		t.Errorf("Stat(r2) = %+v, want the new path %s", info, s.dirs.mount(r2.ID))
	}
	mustRead(t, filepath.Join(stat("r2").Path, "etc", "hostname"), "img\n")
	gone("r2's data after its Reset", filepath.Join(stat("r2").Path, "data"))
	gone("r2's old mount point", s.dirs.mount(before["r2"].ID))
	gone("r2's old layer", s.dirs.layer(before["r2"].Layers[0]))

	// c1's half copy is gone, and the name is free.
	gone("the half-done Snapshot's layer", s.dirs.layer(c1))
	if _, err := s.Stat(ctx, "c1-ck"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(c1-ck) = %v, want ErrNotFound", err)
	}
	must(s.Snapshot(ctx, "c1-ck", "c1"))
	mustRead(t, filepath.Join(stat("c1-ck").Path, "data"), "c1\n")

	// c2's snapshot happened, and is mounted.
	if info := stat("c2-ck"); info.Kind != layers.KindCommitted || info.Path != s.dirs.mount(c2.ID) || info.Parent != "img" {
		t.Errorf("Stat(c2-ck) = %+v, want committed at %s", info, s.dirs.mount(c2.ID))
	}
	mustRead(t, filepath.Join(s.dirs.mount(c2.ID), "data"), "c2\n")
	if err := os.WriteFile(filepath.Join(s.dirs.mount(c2.ID), "data"), nil, 0o644); err == nil {
		t.Error("c2-ck is writable after Open")
	}

	// m1's commit happened.
	if _, err := s.Stat(ctx, "m1"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(m1) = %v, want ErrNotFound: it was committed", err)
	}
	if info := stat("m1-c"); info.Kind != layers.KindCommitted || info.Parent != "img" {
		t.Errorf("Stat(m1-c) = %+v, want committed with parent img", info)
	}
	mustRead(t, filepath.Join(stat("m1-c").Path, "data"), "m1\n")
	gone("m1's work dir", filepath.Join(s.dirs.work(), m1.Layers[0]))
	gone("m1's active mount point", s.dirs.mount(before["m1"].ID))

	// m2's commit did not happen: it is active, mounted at its path again.
	if info := stat("m2"); info.Kind != layers.KindActive || info.Path != s.dirs.mount(before["m2"].ID) {
		t.Errorf("Stat(m2) = %+v, want active at %s", info, s.dirs.mount(before["m2"].ID))
	}
	mustRead(t, filepath.Join(stat("m2").Path, "data"), "m2\n")
	mustWrite(t, filepath.Join(stat("m2").Path, "more"), "writable\n")

	// gone is.
	gone("the removed snapshot's mount point", s.dirs.mount(before["gone"].ID))
	gone("the removed snapshot's layer", s.dirs.layer(before["gone"].Layers[0]))

	// Nothing else is left: every layer, mount and mount point is a
	// record's.
	var layerIDs, mountIDs []string
	for _, e := range s.entries {
		mountIDs = append(mountIDs, e.ID)
		for _, l := range e.Layers {
			if !slices.Contains(layerIDs, l) {
				layerIDs = append(layerIDs, l)
			}
		}
	}
	slices.Sort(layerIDs)
	slices.Sort(mountIDs)
	if got := testenv.DirNames(t, s.dirs.layers()); !slices.Equal(got, layerIDs) {
		t.Errorf("layers after Open = %v, want %v", got, layerIDs)
	}
	if got := testenv.DirNames(t, s.dirs.mnt()); !slices.Equal(got, mountIDs) {
		t.Errorf("mount points after Open = %v, want %v", got, mountIDs)
	}
	points, err := mountinfo.Under(s.dirs.mnt())
	must(err)
	slices.Sort(points)
	var want []string
	for _, id := range mountIDs {
		want = append(want, s.dirs.mount(id))
	}
	if !slices.Equal(points, want) {
		t.Errorf("mounts after Open = %v, want %v", points, want)
	}
}
