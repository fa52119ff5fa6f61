package image_test

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
)

// base is a layer with an /etc/passwd and /etc/group.
func baseLayer(t testing.TB) v1.Layer {
	return registry.TarLayer(t, compression.GZip, tarOf(t,
		directory("etc/", 0o755),
		regular("etc/passwd", testPasswd, 0o644),
		regular("etc/group", testGroup, 0o644),
	))
}

// refused unpacks img, which must fail, and checks what is left: the
// layer chains below bad (its index) committed, bad's chain and the top
// not, nothing being made, nothing beside the store changed. It returns
// the error.
func refused(t *testing.T, e *env, img v1.Image, bad int) error {
	t.Helper()
	digest := digestOf(t, img)
	_, err := e.store.Unpack(t.Context(), img, digest, nil)
	t.Logf("Unpack: %v", err)
	if err == nil {
		t.Fatalf("Unpack of a bad image succeeded")
	}
	if !strings.Contains(err.Error(), digest) {
		t.Errorf("error %q does not name the image %s", err, digest)
	}
	chains := chainKeys(t, img)
	for i, k := range chains {
		if got, want := e.has(k), i < bad; got != want {
			t.Errorf("layer %d (%s) committed: %v, want %v", i+1, k, got, want)
		}
	}
	if top, _ := image.TopKey(digest); e.has(top) {
		t.Errorf("the top %s of a bad image was committed", top)
	}
	e.checkClean()
	return err
}

// TestUnpackHostileLayers unpacks images whose layers are bad: each is
// refused, and nothing of the bad layer is kept.
func TestUnpackHostileLayers(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackHostileLayers)
}

func testUnpackHostileLayers(t *testing.T, e *env) {
	base := baseLayer(t)
	gz := func(ents ...ent) v1.Layer { return registry.TarLayer(t, compression.GZip, tarOf(t, ents...)) }

	t.Run("diff id", func(t *testing.T) {
		img := registry.Image(t, base, gz(regular("real", "what the layer holds\n", 0o644)))
		img = withConfig(t, img, func(cf *v1.ConfigFile) {
			sum := sha256.Sum256([]byte("what the config claims"))
			cf.RootFS.DiffIDs[1] = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
		})
		err := refused(t, e, img, 1)
		if !strings.Contains(err.Error(), "diff id") || !strings.Contains(err.Error(), "layer 2 of 2") {
			t.Errorf("error %q, want it to name layer 2 of 2 and its diff id", err)
		}
	})

	hostile := []struct {
		name  string
		lower []ent // a first layer, harmless, when not nil
		bad   []ent
	}{
		{"dot dot", nil, []ent{directory("ok/", 0o755), regular("../../../sentinel/pwned", "out\n", 0o644)}},
		{"dot dot inside", nil, []ent{regular("ok/../../../../sentinel/pwned", "out\n", 0o644)}},
		{"hard link dot dot", nil, []ent{hardlink("stolen", "../../../sentinel/keep")}},
		{"hard link absolute", nil, []ent{hardlink("stolen", e.sentinel+"/keep")}},
		{"through an absolute symlink", []ent{symlink("escape", e.sentinel)}, []ent{regular("escape/pwned", "out\n", 0o644)}},
		{"through a relative symlink", []ent{symlink("rel", "../../../sentinel")}, []ent{regular("rel/pwned", "out\n", 0o644)}},
		{"through a symlinked directory", []ent{symlink("escape", e.sentinel)}, []ent{directory("escape/dir/", 0o755)}},
		{"symlink then write in one layer", nil, []ent{symlink("escape", e.sentinel), regular("escape/keep", "overwritten\n", 0o644)}},
		{"hard link through a symlink", []ent{symlink("escape", e.sentinel)}, []ent{hardlink("stolen", "escape/keep")}},
	}
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			ls := []v1.Layer{base}
			if tc.lower != nil {
				ls = append(ls, gz(tc.lower...))
			}
			ls = append(ls, gz(tc.bad...))
			err := refused(t, e, registry.Image(t, ls...), len(ls)-1)
			if !errors.Is(err, layertar.ErrHostile) {
				t.Errorf("error %v, want one matching layertar.ErrHostile", err)
			}
		})
	}

	t.Run("not a tar", func(t *testing.T) {
		junk := bytes.Repeat([]byte("this is no tar header "), 100)
		err := refused(t, e, registry.Image(t, base, registry.TarLayer(t, compression.GZip, junk)), 1)
		if !errors.Is(err, layertar.ErrHostile) {
			t.Errorf("error %v, want one matching layertar.ErrHostile", err)
		}
	})
}

// TestUnpackBombs unpacks, with Limits.MaxBytes at 1 MiB, small gzip
// layers that expand to 32 MiB: in a file, and after the tar's end (where
// tar readers stop reading but the diff id still covers every byte).
// Both are refused once past the limit.
func TestUnpackBombs(t *testing.T) {
	withEnv(t, layertar.Limits{MaxBytes: bombLimit}, testUnpackBombs)
}

// bombLimit is TestUnpackBombs's Limits.MaxBytes.
const bombLimit = 1 << 20

func testUnpackBombs(t *testing.T, e *env) {
	zeros := strings.Repeat("\x00", 32<<20)
	for _, tc := range []struct {
		name string
		tar  []byte
	}{
		{"in a file", tarOf(t, regular("bomb", zeros, 0o644))},
		{"after the end", append(tarOf(t, regular("small", "small\n", 0o644)), zeros...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := registry.TarLayer(t, compression.GZip, tc.tar)
			if size, _ := l.Size(); size > bombLimit/4 {
				t.Fatalf("the bomb is %d bytes compressed, want a small one", size)
			}
			err := refused(t, e, registry.Image(t, baseLayer(t), l), 1)
			if !errors.Is(err, layertar.ErrHostile) || !strings.Contains(err.Error(), "MaxBytes") {
				t.Errorf("error %v, want one matching layertar.ErrHostile, over MaxBytes", err)
			}
		})
	}
}

// TestUnpackBadUser unpacks images whose config names a user the image
// lacks, or ids a sandbox cannot have: the layers are kept (they are
// fine), the top is not, and the error says why.
func TestUnpackBadUser(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackBadUser)
}

func testUnpackBadUser(t *testing.T, e *env) {
	for _, tc := range []struct{ user, want string }{
		{"ghost", `"ghost" is not in its /etc/passwd`},
		{"app:ghosts", `"ghosts" is not in its /etc/group`},
		{"70000", "uid 70000"},
		{"big", "uid 70000"},
		{"app:70000", "gid 70000"},
		{"-1", "uid -1"},
	} {
		t.Run(tc.user, func(t *testing.T) {
			img := withConfig(t, registry.Image(t, baseLayer(t)), func(cf *v1.ConfigFile) { cf.Config.User = tc.user })
			err := refused(t, e, img, 1)
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want invalid_argument saying %s", err, tc.want)
			}
		})
	}
}

// TestUnpackHostileTop unpacks images whose mount points, home or
// working directory lead out of the root through symlinks: the top
// refuses them (they are resolved inside the root, where they lead
// nowhere), and nothing outside the store changes.
func TestUnpackHostileTop(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackHostileTop)
}

func testUnpackHostileTop(t *testing.T, e *env) {
	for _, tc := range []struct {
		name    string
		ents    []ent
		user    string
		workdir string
		want    string // what the error says ("not a directory" if empty)
	}{
		{"run", []ent{symlink("run", e.sentinel)}, "", "/", ""},
		{"run relative", []ent{symlink("run", "../../../sentinel")}, "", "/", ""},
		{"hearth dir", []ent{symlink(".hearth", e.sentinel+"/dir")}, "", "/", ""},
		// The agent's mount point, a file the top makes, is not made through a
		// link nor over a directory.
		{"agent file", []ent{directory(".hearth/", 0o755), symlink(".hearth/hearth-agent", e.sentinel+"/agent")}, "", "/", "not a regular file"},
		{"agent file relative", []ent{directory(".hearth/", 0o755), symlink(".hearth/hearth-agent", "../../../../sentinel/etc/passwd")}, "", "/", "not a regular file"},
		{"agent file dir", []ent{directory(".hearth/hearth-agent/", 0o755)}, "", "/", "not a regular file"},
		{"home", []ent{symlink("home", e.sentinel)}, "app", "/", ""},
		{"workdir", []ent{symlink("w", "../../../sentinel/dir")}, "", "/w/sub", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := registry.Image(t, baseLayer(t), registry.TarLayer(t, compression.GZip, tarOf(t, tc.ents...)))
			img = withConfig(t, img, func(cf *v1.ConfigFile) { cf.Config.User, cf.Config.WorkingDir = tc.user, tc.workdir })
			err := refused(t, e, img, 2)
			want := cmp.Or(tc.want, "not a directory")
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want it to say %s", err, want)
			}
		})
	}
}

// zstdFrame is data as one zstd frame of raw blocks whose header asks
// for a window of 1<<windowLog bytes.
func zstdFrame(data []byte, windowLog int) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	for {
		n := min(len(data), 128<<10)
		last := 0
		if n == len(data) {
			last = 1
		}
		h := n<<3 | last // block type 0: raw
		out = append(out, byte(h), byte(h>>8), byte(h>>16))
		out = append(out, data[:n]...)
		if data = data[n:]; last == 1 {
			return out
		}
	}
}

// TestUnpackZstdWindow unpacks a valid zstd layer, a few kilobytes, whose
// frame asks for a 512 MiB window, which a decoder allocates as the
// content grows: refused, as fetch.Open refuses windows over 128 MiB.
func TestUnpackZstdWindow(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackZstdWindow)
}

func testUnpackZstdWindow(t *testing.T, e *env) {
	content := tarOf(t, regular("small", "small\n", 0o644))
	frame := zstdFrame(content, 29)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(frame)), nil
	}, tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.DiffID(); err != nil || d.Hex != fmt.Sprintf("%x", sha256.Sum256(content)) {
		t.Fatalf("the layer's diff id = %v, %v: not a valid zstd frame of the tar", d, err)
	}
	err = refused(t, e, registry.Image(t, baseLayer(t), l), 1)
	if !strings.Contains(err.Error(), "window size exceeded") {
		t.Errorf("error %v, want it to say the window is too large", err)
	}

	// The same content with an 8 MiB window is fine.
	small := zstdFrame(content, 23)
	l, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(small)), nil
	}, tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	img := registry.Image(t, baseLayer(t), l)
	u, _ := unpack(t, e.store, img, digestOf(t, img))
	if b, err := os.ReadFile(filepath.Join(e.path(u.Layers[1]), "small")); err != nil || string(b) != "small\n" {
		t.Errorf("small in the unpacked layer = %q, %v", b, err)
	}
	e.checkClean()
}
