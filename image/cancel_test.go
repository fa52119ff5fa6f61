package image_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/testutil/registry"
)

// signalLayer is a layer whose streams, compressed or not, close reached
// once after bytes of them have been read.
type signalLayer struct {
	v1.Layer
	after   int64
	reached chan struct{}
	once    sync.Once
}

func (l *signalLayer) Compressed() (io.ReadCloser, error) { return l.wrap(l.Layer.Compressed()) }

func (l *signalLayer) Uncompressed() (io.ReadCloser, error) { return l.wrap(l.Layer.Uncompressed()) }

func (l *signalLayer) wrap(rc io.ReadCloser, err error) (io.ReadCloser, error) {
	if err != nil {
		return nil, err
	}
	return &signalReader{ReadCloser: rc, l: l}, nil
}

type signalReader struct {
	io.ReadCloser
	l *signalLayer
	n int64
}

func (r *signalReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if r.n += int64(n); r.n >= r.l.after {
		r.l.once.Do(func() { close(r.l.reached) })
	}
	return n, err
}

// TestUnpackCancelled cancels an Unpack while it applies a 48 MiB layer:
// the layer is not kept, nor anything being made; the next Unpack of the
// image completes, with the keys the image's chain ids give, and the
// layer's files whole.
func TestUnpackCancelled(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackCancelled)
}

func testUnpackCancelled(t *testing.T, e *env) {
	rnd := rand.New(rand.NewChaCha8([32]byte{4}))
	ents := []ent{directory("big/", 0o755)}
	sums := map[string][32]byte{}
	for i := range 48 {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(rnd.Uint32())
		}
		name := fmt.Sprintf("big/%02d", i)
		ents = append(ents, regular(name, string(b), 0o644))
		sums[name] = sha256.Sum256(b)
	}
	big := &signalLayer{Layer: registry.TarLayer(t, compression.None, tarOf(t, ents...)), after: 8 << 20, reached: make(chan struct{})}
	img := registry.Image(t, baseLayer(t), big, registry.Layer(t, compression.GZip, map[string]string{"after": "the big one\n"}))
	digest := digestOf(t, img)
	chains := chainKeys(t, img)

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-big.reached
		cancel()
	}()
	_, err := e.store.Unpack(ctx, img, digest, nil)
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Unpack cancelled while applying layer 2 = %v, want context.Canceled", err)
	}
	if !e.has(chains[0]) || e.has(chains[1]) || e.has(chains[2]) {
		t.Errorf("after a cancelled Unpack the store holds %v, want layer 1's chain %s and not those above", e.keys(), chains[0])
	}
	e.checkClean()

	u, _ := unpack(t, e.store, img, digest)
	top, _ := image.TopKey(digest)
	if want := append(slices.Clone(chains), top); !slices.Equal(u.Layers, want) || !slices.Equal(e.keys(), sortedCopy(want)) {
		t.Errorf("Unpack after a cancelled one: Layers %v, Keys %v, want %v", u.Layers, e.keys(), want)
	}
	dir := e.path(top)
	for name, want := range sums {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || sha256.Sum256(b) != want {
			t.Errorf("%s in the top: %v, or its content differs from the layer's", name, err)
		}
	}
	e.checkClean()
}
