package registry

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// HostPlatform is the platform a pull picks by default: linux on this
// machine's architecture.
func HostPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// Tar is a tar stream of files (path → content: regular files, mode 0644,
// owned by root, in path order).
func Tar(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(files[p])), ModTime: time.Unix(1700000000, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, files[p]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Layer is a layer holding files (see Tar), compressed with c:
// compression.GZip, compression.ZStd, or compression.None for an
// uncompressed layer. A gzip layer has Docker's media type (as
// go-containerregistry makes it), the others the OCI one.
func Layer(t testing.TB, c compression.Compression, files map[string]string) v1.Layer {
	t.Helper()
	mt := types.DockerLayer
	if c != compression.GZip {
		mt = ociLayerType(c)
	}
	return layerOf(t, c, Tar(t, files), mt)
}

// TarLayer is a layer whose uncompressed content is the tar stream b
// (taken as it is: any entries, whiteouts, or bytes that are no tar at
// all), compressed with c as for Layer, with the OCI media type for c
// whatever it is (tools such as umoci take nothing else in an OCI image).
func TarLayer(t testing.TB, c compression.Compression, b []byte) v1.Layer {
	t.Helper()
	return layerOf(t, c, b, ociLayerType(c))
}

// ociLayerType is the OCI media type of a layer compressed with c.
func ociLayerType(c compression.Compression) types.MediaType {
	switch c {
	case compression.GZip:
		return types.OCILayer
	case compression.ZStd:
		return types.OCILayerZStd
	}
	return types.OCIUncompressedLayer
}

// layerOf is the layer of the tar b, compressed with c, of media type mt.
func layerOf(t testing.TB, c compression.Compression, b []byte, mt types.MediaType) v1.Layer {
	t.Helper()
	if c == compression.None {
		return static.NewLayer(b, mt)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithCompression(c), tarball.WithCompressedCaching, tarball.WithMediaType(mt))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// RandomLayer is a layer holding one file, "random/<n>", of size random
// (incompressible) bytes, compressed with c.
func RandomLayer(t testing.TB, c compression.Compression, size int) v1.Layer {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	return Layer(t, c, map[string]string{fmt.Sprintf("random/%x", b[:8]): string(b)})
}

// Image is an OCI image of layers (bottom first) for the host's platform,
// with an environment, a working directory and a command in its config.
func Image(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return build(t, img, HostPlatform(), layers)
}

// DockerImage is Image with Docker's media types (image manifest v2,
// schema 2).
func DockerImage(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	return build(t, empty.Image, HostPlatform(), layers)
}

// RandomImage is an OCI image of n layers of size random bytes each,
// compressed with c.
func RandomImage(t testing.TB, n, size int, c compression.Compression) v1.Image {
	t.Helper()
	layers := make([]v1.Layer, n)
	for i := range layers {
		layers[i] = RandomLayer(t, c, size)
	}
	return Image(t, layers...)
}

// ForPlatform is img with its config's platform set to p.
func ForPlatform(t testing.TB, img v1.Image, p v1.Platform) v1.Image {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	out, err := mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Index is an OCI image index of imgs, each described with the platform
// its config names.
func Index(t testing.TB, imgs ...v1.Image) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		mt, err := img.MediaType()
		if err != nil {
			t.Fatal(err)
		}
		p := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: mt, Platform: &p},
		})
	}
	return idx
}

func build(t testing.TB, base v1.Image, p v1.Platform, layers []v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = p.OS, p.Architecture
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HEARTH_TEST=1"}
	cfg.Config.WorkingDir = "/work"
	cfg.Config.Cmd = []string{"/bin/sh"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}
