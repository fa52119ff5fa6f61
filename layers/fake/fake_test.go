package fake_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/layers/layerstest"
)

func TestConformance(t *testing.T) {
	layerstest.Run(t, func(t *testing.T) layers.Store { return fake.New(t) }, layerstest.Options{
		Reopen: func(t *testing.T, s layers.Store) layers.Store {
			t.Helper()
			old := s.(*fake.Store)
			if err := old.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			s2, err := fake.Open(old.Dir())
			if err != nil {
				t.Fatalf("Open(%s) = %v", old.Dir(), err)
			}
			return s2
		},
		Limit: func(t *testing.T, s layers.Store, key string) int64 { return s.(*fake.Store).Limit(key) },
	})
}

func TestWalk(t *testing.T) {
	ctx := context.Background()
	s := fake.New(t)
	if err := s.Import(ctx, "img", fstest.MapFS{"etc/hostname": {Data: []byte("img\n")}}); err != nil {
		t.Fatalf("Import(img) = %v", err)
	}
	if _, err := s.Prepare(ctx, "root", "img"); err != nil {
		t.Fatalf("Prepare(root, img) = %v", err)
	}
	got := map[string]layers.Info{}
	if err := s.Walk(ctx, func(info layers.Info) error { got[info.Key] = info; return nil }); err != nil {
		t.Fatalf("Walk() = %v", err)
	}
	if len(got) != 2 || got["img"].Kind != layers.KindCommitted || got["root"].Kind != layers.KindActive || got["root"].Parent != "img" {
		t.Errorf("Walk() visited %+v, want img (committed) and root (active, parent img)", got)
	}
	b, err := os.ReadFile(filepath.Join(got["root"].Path, "etc", "hostname"))
	if err != nil || string(b) != "img\n" {
		t.Errorf("root's etc/hostname = %q, %v, want %q", b, err, "img\n")
	}

	stop := errors.New("stop")
	if err := s.Walk(ctx, func(layers.Info) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Walk(fn failing) = %v, want fn's error", err)
	}
	// fn may call back into the store.
	if err := s.Walk(ctx, func(info layers.Info) error {
		if info.Kind == layers.KindActive {
			return s.Remove(ctx, info.Key)
		}
		return nil
	}); err != nil {
		t.Errorf("Walk(fn removing) = %v", err)
	}
	if _, err := s.Stat(ctx, "root"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(root) after a Walk removed it = %v, want ErrNotFound", err)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	s := fake.New(t)
	s.Close()
	if _, err := s.Prepare(ctx, "a", ""); err == nil {
		t.Error("Prepare(a) on a closed store succeeded, want an error")
	}
	if err := s.Walk(ctx, func(layers.Info) error { return nil }); err == nil {
		t.Error("Walk() on a closed store succeeded, want an error")
	}
}
