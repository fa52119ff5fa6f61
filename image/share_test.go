package image_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
)

// sharingImages are two images whose first three layers are the same:
// a of four layers, b of five.
func sharingImages(t testing.TB) (a, b v1.Image) {
	t.Helper()
	var shared []v1.Layer
	for range 3 {
		shared = append(shared, registry.RandomLayer(t, compression.GZip, 1<<20))
	}
	a = registry.Image(t, append(slices.Clone(shared), registry.RandomLayer(t, compression.GZip, 1<<20))...)
	b = registry.Image(t, append(slices.Clone(shared),
		registry.RandomLayer(t, compression.ZStd, 1<<20),
		registry.Layer(t, compression.GZip, map[string]string{"etc/b": "b\n"}))...)
	return a, b
}

// TestUnpackSharesLayers unpacks two images that share their first three
// layers, one after the other: the second finds the shared chains stored
// (reported cached) and adds only its own.
func TestUnpackSharesLayers(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackSharesLayers)
}

func testUnpackSharesLayers(t *testing.T, e *env) {
	a, b := sharingImages(t)
	ua, events := unpack(t, e.store, a, digestOf(t, a))
	checkEvents(t, events, a, []bool{false, false, false, false})
	before := e.keys()

	ub, events := unpack(t, e.store, b, digestOf(t, b))
	checkEvents(t, events, b, []bool{true, true, true, false, false})
	// A layer unpacked reports the bytes of its files; one found stored,
	// what its snapshot holds, as its backend counts it (see
	// backend.layerOverhead).
	for i, ev := range events[:4] {
		const data = 1 << 20
		if lo, hi := int64(data), int64(data)+e.backend.layerOverhead; ev.Cached && (ev.Bytes < lo || ev.Bytes > hi) || !ev.Cached && ev.Bytes != data {
			t.Errorf("%s: layer %d of b, 1 MiB of random data, cached %v, reported %d bytes; want %d unpacked, %d to %d cached", e.backend.name, i+1, ev.Cached, ev.Bytes, data, lo, hi)
		}
	}
	topB, _ := image.TopKey(digestOf(t, b))
	wantNew := sortedCopy(append(chainKeys(t, b)[3:], topB))
	if got := newKeys(before, e.keys()); !slices.Equal(got, wantNew) {
		t.Errorf("the second Unpack added the keys %v, want only %v", got, wantNew)
	}
	if !slices.Equal(ua.Layers[:3], ub.Layers[:3]) || ua.Layers[3] == ub.Layers[3] {
		t.Errorf("Unpack(a).Layers = %v, Unpack(b).Layers = %v, want the first three alike, the rest not", ua.Layers, ub.Layers)
	}
	e.checkClean()
}

// countingLayers is a layer store that counts the commits of each name.
type countingLayers struct {
	layerStore
	mu      sync.Mutex
	commits map[string]int
}

func (c *countingLayers) Commit(ctx context.Context, name, key string) error {
	c.mu.Lock()
	c.commits[name]++
	c.mu.Unlock()
	return c.layerStore.Commit(ctx, name, key)
}

// TestUnpackConcurrent unpacks two images that share layers, each twice,
// all four at once: every layer chain and top is made (committed) once,
// the other Unpacks wait for it and report it cached, and the results
// agree.
func TestUnpackConcurrent(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackConcurrent)
}

func testUnpackConcurrent(t *testing.T, e *env) {
	counting := &countingLayers{layerStore: e.layers, commits: map[string]int{}}
	s, err := image.New(image.Options{Layers: counting})
	if err != nil {
		t.Fatal(err)
	}
	a, b := sharingImages(t)
	imgs := []v1.Image{a, b, a, b}
	results := make([]image.Unpacked, len(imgs))
	events := make([][]sandbox.ImageProgress, len(imgs))
	errs := make([]error, len(imgs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, img := range imgs {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Unpack(t.Context(), img, digestOf(t, img), func(p sandbox.ImageProgress) {
				events[i] = append(events[i], p)
			})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Unpack %d: %v", i, err)
		}
	}
	if !slices.Equal(results[0].Layers, results[2].Layers) || !slices.Equal(results[1].Layers, results[3].Layers) {
		t.Errorf("Unpack results differ for one image: %v and %v, %v and %v", results[0].Layers, results[2].Layers, results[1].Layers, results[3].Layers)
	}

	want := map[string]int{}
	for _, img := range []v1.Image{a, b} {
		top, _ := image.TopKey(digestOf(t, img))
		for _, k := range append(chainKeys(t, img), top) {
			want[k] = 1
		}
	}
	for k, n := range counting.commits {
		if want[k] != n {
			t.Errorf("%s was committed %d times, want %d", k, n, want[k])
		}
	}
	if len(counting.commits) != len(want) {
		t.Errorf("committed %v, want each of %v once", counting.commits, want)
	}

	// Each layer was unpacked by one Unpack; every other reported it cached.
	made, seen := map[string]int{}, map[string]int{}
	for _, evs := range events {
		for _, ev := range evs {
			seen[ev.Layer]++
			if !ev.Cached {
				made[ev.Layer]++
			}
		}
	}
	for layer, n := range seen {
		if made[layer] != 1 {
			t.Errorf("layer %s: %d of the %d Unpacks that reported it unpacked it, want 1", layer, made[layer], n)
		}
	}
	if len(seen) != 6 {
		t.Errorf("the Unpacks reported %d layers, want the 6 of the two images", len(seen))
	}
	if want := slices.Sorted(maps.Keys(want)); !slices.Equal(e.keys(), want) {
		t.Errorf("Keys() = %v, want %v", e.keys(), want)
	}
	e.checkClean()
}
