package fetch_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
)

// TestPull pulls a three-layer image anonymously, by tag and by digest,
// and checks what it got: the manifest, the config, each layer blob in
// BlobDir and its tar through Open, and the progress events (the second
// pull finds every layer cached).
func TestPull(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := registry.Image(t,
		registry.Layer(t, compression.GZip, map[string]string{"etc/os-release": "ID=hearth\n"}),
		registry.RandomLayer(t, compression.GZip, 3<<20),
		registry.Layer(t, compression.GZip, map[string]string{"usr/bin/tool": "#!/bin/sh\necho hi\n", "work/README": "hello\n"}),
	)
	ref := reg.Push(t, "team/app:1.0", img)
	want, _ := img.Digest()

	o := options(t)
	var prog progress
	o.Progress = prog.record
	p := pull(t, ref, o)
	if p.Name != reg.Host+"/team/app:1.0" || p.Digest != want.String() || p.Index != "" {
		t.Errorf("Pull = {Name %q, Digest %q, Index %q}, want {%q, %q, \"\"}", p.Name, p.Digest, p.Index, reg.Host+"/team/app:1.0", want)
	}
	sameImage(t, p.Image, img)
	for _, l := range layers(t, img) {
		d, _ := l.Digest()
		size, _ := l.Size()
		st, err := os.Stat(filepath.Join(o.BlobDir, "sha256", d.Hex))
		if err != nil || st.Size() != size {
			t.Errorf("blob %s in BlobDir: %v (size %v), want %d bytes", d, err, st, size)
		}
	}
	if files := blobFiles(t, o.BlobDir); len(files) != 3 {
		t.Errorf("BlobDir/sha256 holds %v, want the 3 layers and nothing else", files)
	}
	files := tarFiles(t, readLayer(t, layers(t, p.Image)[2]))
	if files["usr/bin/tool"] != "#!/bin/sh\necho hi\n" || files["work/README"] != "hello\n" {
		t.Errorf("layer 3 holds %v", files)
	}
	checkProgress(t, prog.events, 3, false)

	byDigest := reg.Ref("team/app@" + want.String())
	prog = progress{}
	p2 := pull(t, byDigest, o)
	if p2.Name != byDigest || p2.Digest != want.String() {
		t.Errorf("Pull(%s) = {%q, %q}, want {%q, %q}", byDigest, p2.Name, p2.Digest, byDigest, want)
	}
	sameImage(t, p2.Image, img)
	checkProgress(t, prog.events, 3, true)

	// Once stored, the blobs go; forgetting them again is no error.
	if err := fetch.Forget(o.BlobDir, p2.Image); err != nil {
		t.Fatalf("Forget = %v", err)
	}
	if files := blobFiles(t, o.BlobDir); len(files) != 0 {
		t.Errorf("BlobDir/sha256 after Forget holds %v, want nothing", files)
	}
	if err := fetch.Forget(o.BlobDir, p2.Image); err != nil {
		t.Errorf("Forget again = %v, want nil", err)
	}
}

// checkProgress checks a pull's events: a resolve first, then for each
// of n layers a last event with all its bytes, cached or not.
func checkProgress(t *testing.T, events []sandbox.ImageProgress, n int, cached bool) {
	t.Helper()
	if len(events) == 0 || events[0].Phase != "resolve" {
		t.Fatalf("progress events %+v, want a resolve first", events)
	}
	last := map[string]sandbox.ImageProgress{}
	for _, ev := range events[1:] {
		if ev.Phase != "layer" || ev.Layers != n || ev.Total <= 0 || ev.Bytes > ev.Total {
			t.Errorf("progress event %+v, want a layer's of %d", ev, n)
		}
		last[ev.Layer] = ev
	}
	if len(last) != n {
		t.Errorf("progress told of %d layers, want %d", len(last), n)
	}
	for d, ev := range last {
		if ev.Bytes != ev.Total || ev.Cached != cached {
			t.Errorf("last event of layer %s = %+v, want all bytes, cached %v", d, ev, cached)
		}
	}
}

// TestPullMediaTypes pulls a Docker schema 2 image, and an OCI image of
// zstd, gzip and uncompressed layers.
func TestPullMediaTypes(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	for _, tc := range []struct {
		name string
		img  v1.Image
		mt   types.MediaType
	}{
		{"docker", registry.DockerImage(t,
			registry.Layer(t, compression.GZip, map[string]string{"a": "docker\n"}),
			registry.RandomLayer(t, compression.GZip, 64<<10)), types.DockerManifestSchema2},
		{"zstd", registry.Image(t,
			registry.Layer(t, compression.ZStd, map[string]string{"z/one": "zstd\n"}),
			registry.RandomLayer(t, compression.ZStd, 1<<20),
			registry.Layer(t, compression.GZip, map[string]string{"g/two": "gzip\n"}),
			registry.Layer(t, compression.None, map[string]string{"n/three": "none\n"})), types.OCIManifestSchema1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pull(t, reg.Push(t, tc.name+":1", tc.img), options(t))
			if mt, _ := p.Image.MediaType(); mt != tc.mt {
				t.Errorf("media type %s, want %s", mt, tc.mt)
			}
			sameImage(t, p.Image, tc.img)
		})
	}
	zl := layers(t, registry.Image(t, registry.Layer(t, compression.ZStd, nil)))[0]
	if mt, _ := zl.MediaType(); mt != types.OCILayerZStd {
		t.Fatalf("the zstd test layer has media type %s", mt)
	}
}

// TestPullIndex pulls an index of two platforms: the host's is picked,
// or the one Options.Platform names; a platform it lacks is refused.
func TestPullIndex(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	other := v1.Platform{OS: "linux", Architecture: "arm64"}
	if runtime.GOARCH == "arm64" {
		other.Architecture = "amd64"
	}
	host := registry.Image(t, registry.Layer(t, compression.GZip, map[string]string{"arch": runtime.GOARCH}))
	foreign := registry.ForPlatform(t, registry.Image(t, registry.Layer(t, compression.GZip, map[string]string{"arch": other.Architecture})), other)
	idx := registry.Index(t, foreign, host)
	ref := reg.PushIndex(t, "multi:1", idx)
	idxDigest, _ := idx.Digest()

	p := pull(t, ref, options(t))
	if want, _ := host.Digest(); p.Digest != want.String() || p.Index != idxDigest.String() {
		t.Errorf("Pull = {Digest %s, Index %s}, want the host's image %s of index %s", p.Digest, p.Index, want, idxDigest)
	}
	sameImage(t, p.Image, host)

	o := options(t)
	o.Platform = other
	p = pull(t, reg.Ref("multi@"+idxDigest.String()), o)
	sameImage(t, p.Image, foreign)

	o.Platform = v1.Platform{OS: "linux", Architecture: "riscv64"}
	err := pullErr(t, ref, o, fetch.ErrUnsupported)
	if !strings.Contains(err.Error(), "no image for linux/riscv64") || !strings.Contains(err.Error(), idxDigest.String()) {
		t.Errorf("error %q, want it to say no image for linux/riscv64 in index %s", err, idxDigest)
	}

	// An image (not an index) for another platform is refused too.
	single := reg.Push(t, "foreign:1", foreign)
	pullErr(t, single, options(t), fetch.ErrUnsupported)
}

// TestPullNotFound: a tag the registry lacks is ErrNotFound, and the
// error names the registry, the repository, the tag and the status.
func TestPullNotFound(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	err := pullErr(t, reg.Ref("nothing:here"), options(t), fetch.ErrNotFound)
	var fe *fetch.Error
	errors.As(err, &fe)
	if fe.Status != 404 || fe.Registry != reg.Host || fe.Repository != "nothing" || fe.Tag != "here" {
		t.Errorf("error %+v, want status 404 at %s/nothing:here", fe, reg.Host)
	}
	if !strings.Contains(err.Error(), reg.Host+"/nothing:here") || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("error %q, want the reference and HTTP 404", err)
	}
}
