package fetch_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/testutil/registry"
	"github.com/hearth/hearth/testutil/testenv"
)

// archiveImage is a small image of a gzip and a zstd layer.
func archiveImage(t *testing.T) v1.Image {
	return registry.Image(t,
		registry.Layer(t, compression.GZip, map[string]string{"etc/motd": "from an archive\n"}),
		registry.RandomLayer(t, compression.ZStd, 128<<10))
}

// readArchive reads b into a fresh directory and fails t on an error;
// the directory then holds the blobs only.
func readArchive(t *testing.T, b []byte) (fetch.Pulled, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "import")
	p, err := fetch.ReadArchive(t.Context(), bytes.NewReader(b), dir, fetch.Options{})
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "sha256" {
		t.Errorf("the import dir holds %v, want sha256/ only", ents)
	}
	return p, dir
}

// readArchiveErr reads b, which must fail with kind; nothing may be left
// but blobs under the directory, and nothing beside it.
func readArchiveErr(t *testing.T, b []byte, o fetch.Options, kind error) error {
	t.Helper()
	parent := t.TempDir()
	dir := filepath.Join(parent, "import")
	_, err := fetch.ReadArchive(t.Context(), bytes.NewReader(b), dir, o)
	t.Logf("ReadArchive: %v", err)
	var fe *fetch.Error
	if !errors.Is(err, kind) || !errors.As(err, &fe) {
		t.Fatalf("ReadArchive = %v, want a *fetch.Error of kind %v", err, kind)
	}
	if _, err := os.Stat(filepath.Join(dir, "spool")); !os.IsNotExist(err) {
		t.Errorf("the spool is left: %v", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) > 1 {
		t.Errorf("beside the import dir: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "sha256")); len(ents) > 0 {
		t.Errorf("the refused archive left blobs: %v", ents)
	}
	return err
}

func skopeo(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("skopeo"); err != nil {
		testenv.Skip(t, "skopeo is not installed: %v", err)
	}
	out, err := exec.CommandContext(t.Context(), "skopeo", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestReadArchiveDocker reads what go-containerregistry's tarball.Write
// writes (docker save's format): the same config and layers, named by
// the archive's tag.
func TestReadArchiveDocker(t *testing.T) {
	img := archiveImage(t)
	var buf bytes.Buffer
	tag := name.MustParseReference("127.0.0.1:5000/app:1.0")
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	p, _ := readArchive(t, buf.Bytes())
	if p.Name != "127.0.0.1:5000/app:1.0" {
		t.Errorf("Name = %q, want the archive's tag", p.Name)
	}
	if d, _ := p.Image.Digest(); p.Digest != d.String() {
		t.Errorf("Digest = %s, the image's manifest is %s", p.Digest, d)
	}
	sameContent(t, p.Image, img)
}

// TestReadArchiveSkopeo reads an OCI archive skopeo copied from the
// registry: the same image, digest and all.
func TestReadArchiveSkopeo(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := archiveImage(t)
	reg.Push(t, "app:1.0", img)
	path := filepath.Join(t.TempDir(), "app.tar")
	skopeo(t, "copy", "--src-tls-verify=false", "docker://"+reg.Ref("app:1.0"), "oci-archive:"+path+":app:1.0")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := readArchive(t, b)
	if p.Name != "app:1.0" {
		t.Errorf("Name = %q, want skopeo's ref name app:1.0", p.Name)
	}
	sameImage(t, p.Image, img)
}

// TestWriteArchive writes pulled images (OCI and Docker media types) as
// OCI archives: skopeo inspects each and copies it to the registry, where
// it pulls as the same image; ReadArchive reads it back.
func TestWriteArchive(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	for _, tc := range []struct {
		name string
		img  v1.Image
	}{
		{"oci", archiveImage(t)},
		{"docker", registry.DockerImage(t, registry.Layer(t, compression.GZip, map[string]string{"d": "docker\n"}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pulled := pull(t, reg.Push(t, tc.name+":1.0", tc.img), options(t))
			path := filepath.Join(t.TempDir(), "out.tar")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := fetch.WriteArchive(t.Context(), f, pulled.Name, pulled.Image); err != nil {
				t.Fatalf("WriteArchive: %v", err)
			}
			f.Close()
			checkSkopeoInspect(t, path, pulled.Digest, tc.img)

			skopeo(t, "copy", "--dest-tls-verify=false", "oci-archive:"+path, "docker://"+reg.Ref(tc.name+"-copy:1"))
			sameImage(t, pull(t, reg.Ref(tc.name+"-copy:1"), options(t)).Image, tc.img)

			b, _ := os.ReadFile(path)
			p, _ := readArchive(t, b)
			if p.Name != pulled.Name || p.Digest != pulled.Digest {
				t.Errorf("ReadArchive = {%q, %s}, want {%q, %s}", p.Name, p.Digest, pulled.Name, pulled.Digest)
			}
			sameImage(t, p.Image, tc.img)
		})
	}
}

// checkSkopeoInspect checks what skopeo says of the OCI archive at path:
// the manifest digest and img's layers.
func checkSkopeoInspect(t *testing.T, path, digest string, img v1.Image) {
	t.Helper()
	var inspect struct {
		Digest string
		Layers []string
	}
	if err := json.Unmarshal(skopeo(t, "inspect", "oci-archive:"+path), &inspect); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range layers(t, img) {
		d, _ := l.Digest()
		want = append(want, d.String())
	}
	if inspect.Digest != digest || !slices.Equal(inspect.Layers, want) {
		t.Errorf("skopeo inspect = %+v, want digest %s and layers %v", inspect, digest, want)
	}
}

// writeArchive is img as WriteArchive writes it.
func writeArchive(t testing.TB, img v1.Image) []byte {
	var buf bytes.Buffer
	if err := fetch.WriteArchive(context.Background(), &buf, "app:1", img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rewrite copies a tar, passing each entry through fn (nil drops it),
// and appends extra.
func rewrite(t *testing.T, b []byte, fn func(*tar.Header, []byte) (*tar.Header, []byte), extra ...tarEntry) []byte {
	t.Helper()
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if hdr, body = fn(hdr, body); hdr != nil {
			extra = append([]tarEntry{{hdr, body}}, extra...)
			writeTarEntry(t, tw, extra[0])
			extra = extra[1:]
		}
	}
	for _, e := range extra {
		writeTarEntry(t, tw, e)
	}
	tw.Close()
	return out.Bytes()
}

type tarEntry struct {
	hdr  *tar.Header
	body []byte
}

func writeTarEntry(t *testing.T, tw *tar.Writer, e tarEntry) {
	t.Helper()
	if e.hdr.Typeflag == tar.TypeReg {
		e.hdr.Size = int64(len(e.body))
	}
	if err := tw.WriteHeader(e.hdr); err != nil {
		t.Fatal(err)
	}
	tw.Write(e.body)
}

func keep(h *tar.Header, b []byte) (*tar.Header, []byte) { return h, b }

// TestReadArchiveRefuses feeds ReadArchive archives that are wrong: each
// is refused with its kind, leaving nothing behind; names that reach out
// of the archive reach nothing.
func TestReadArchiveRefuses(t *testing.T) {
	img := archiveImage(t)
	oci := writeArchive(t, img)
	layer, _ := layers(t, img)[0].Digest()
	second, _ := layers(t, img)[1].Digest() // the first is kept when the second is read
	secondEntry := "blobs/sha256/" + second.Hex
	var docker bytes.Buffer
	tarball.Write(name.MustParseReference("app:1"), img, &docker)
	var two bytes.Buffer
	tarball.MultiRefWrite(map[name.Reference]v1.Image{
		name.MustParseReference("a:1"): img, name.MustParseReference("b:1"): registry.Image(t),
	}, &two)
	other := layers(t, registry.Image(t, registry.Layer(t, compression.GZip, map[string]string{"x": "other"})))[0]
	otherBlob, _ := io.ReadAll(must(other.Compressed()))

	for _, tc := range []struct {
		name    string
		archive []byte
		opts    fetch.Options
		kind    error
	}{
		{"not a tar", bytes.Repeat([]byte("not a tar "), 200), fetch.Options{}, fetch.ErrInvalid},
		{"neither format", rewrite(t, oci, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == "index.json" {
				return nil, nil
			}
			return h, b
		}), fetch.Options{}, fetch.ErrInvalid},
		{"over MaxImageBytes", oci, fetch.Options{MaxImageBytes: 4096}, fetch.ErrTooLarge},
		{"index over MaxManifestBytes", oci, fetch.Options{MaxManifestBytes: 64}, fetch.ErrTooLarge},
		{"corrupt OCI layer", rewrite(t, oci, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == secondEntry {
				b = flip(b)
			}
			return h, b
		}), fetch.Options{}, fetch.ErrDigest},
		{"OCI layer a link out of the archive", rewrite(t, oci, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == secondEntry {
				return &tar.Header{Typeflag: tar.TypeSymlink, Name: h.Name, Linkname: "/etc/passwd"}, nil
			}
			return h, b
		}), fetch.Options{}, fetch.ErrInvalid},
		{"docker layer swapped", rewrite(t, docker.Bytes(), func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if strings.HasPrefix(h.Name, layer.Hex) {
				b = otherBlob
			}
			return h, b
		}), fetch.Options{}, fetch.ErrDigest},
		{"two images", two.Bytes(), fetch.Options{}, fetch.ErrUnsupported},
		{"an entry twice", rewrite(t, oci, keep, tarEntry{&tar.Header{Typeflag: tar.TypeReg, Name: "./index.json", Mode: 0o644}, []byte("{}")}),
			fetch.Options{}, fetch.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readArchiveErr(t, tc.archive, tc.opts, tc.kind)
		})
	}
}

// TestReadArchiveNamesStayInside reads an archive whose extra entries
// name paths out of it (.., absolute, through a link): the image reads,
// and nothing is written outside the import directory.
func TestReadArchiveNamesStayInside(t *testing.T) {
	img := archiveImage(t)
	oci := writeArchive(t, img)
	escapes := rewrite(t, oci, keep,
		tarEntry{&tar.Header{Typeflag: tar.TypeReg, Name: "../../escape", Mode: 0o644}, []byte("x")},
		tarEntry{&tar.Header{Typeflag: tar.TypeReg, Name: "/abs-escape", Mode: 0o644}, []byte("x")},
		tarEntry{&tar.Header{Typeflag: tar.TypeSymlink, Name: "up", Linkname: "../.."}, nil},
		tarEntry{&tar.Header{Typeflag: tar.TypeReg, Name: "up/escape2", Mode: 0o644}, []byte("x")})
	parent := t.TempDir()
	dir := filepath.Join(parent, "a", "import")
	p, err := fetch.ReadArchive(t.Context(), bytes.NewReader(escapes), dir, fetch.Options{})
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	sameImage(t, p.Image, img)
	filepath.Walk(parent, func(path string, info os.FileInfo, err error) error {
		if rel, _ := filepath.Rel(dir, path); strings.HasPrefix(rel, "..") && info.Name() != "a" && path != parent {
			t.Errorf("ReadArchive wrote %s, outside its dir", path)
		}
		if strings.Contains(info.Name(), "escape") {
			t.Errorf("an entry became the file %s", path)
		}
		return nil
	})
	if _, err := os.Lstat("/abs-escape"); !os.IsNotExist(err) {
		t.Errorf("/abs-escape: %v, want it not to exist", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// FuzzReadArchive feeds ReadArchive mangled archives: it must not panic,
// must return a *fetch.Error when it fails, and must leave only blobs
// it verified.
func FuzzReadArchive(f *testing.F) {
	img := registry.Image(f,
		registry.Layer(f, compression.GZip, map[string]string{"a": "gzip"}),
		registry.Layer(f, compression.ZStd, map[string]string{"b": "zstd"}))
	f.Add(writeArchive(f, img))
	var docker bytes.Buffer
	if err := tarball.Write(name.MustParseReference("app:1"), img, &docker); err != nil {
		f.Fatal(err)
	}
	f.Add(docker.Bytes())
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := filepath.Join(t.TempDir(), "import")
		p, err := fetch.ReadArchive(t.Context(), bytes.NewReader(b), dir, fetch.Options{MaxImageBytes: 1 << 20})
		var fe *fetch.Error
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("ReadArchive = %T %v, want a *fetch.Error", err, err)
		}
		if err == nil {
			for _, l := range layers(t, p.Image) {
				readLayer(t, l)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "spool")); !os.IsNotExist(err) {
			t.Errorf("the spool is left: %v", err)
		}
	})
}
