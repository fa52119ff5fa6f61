package image_test

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
	"github.com/hearth/hearth/testutil/testenv"
)

const (
	testPasswd = "root:x:0:0:root:/root:/bin/sh\n" +
		"app:x:1000:1000:App:/home/app:/bin/sh\n" +
		"big:x:70000:70000::/big:/bin/false\n"
	testGroup = "root:x:0:\ntty:x:5:\nstaff:x:50:app\napp:x:1000:\n"
)

// capability is a security.capability value (struct vfs_cap_data,
// revision 2, effective) granting the capability numbered bit.
func capability(bit uint) string {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000001)
	binary.LittleEndian.PutUint32(b[4:], 1<<bit)
	return string(b)
}

// treeBase is the first layer of treeLayers: a base of files, directories
// and owners that later layers change.
func treeBase(t testing.TB) []byte {
	return tarOf(t,
		directory("./", 0o755),
		directory("etc/", 0o755),
		regular("etc/passwd", testPasswd, 0o644),
		regular("etc/group", testGroup, 0o644),
		regular("etc/shadow", "root:*:19000:0:99999:7:::\n", 0o640).owner(0, 42),
		directory("bin/", 0o755),
		regular("bin/sh", "#!/bin/true\n", 0o755),
		directory("usr/", 0o755),
		directory("usr/bin/", 0o755),
		regular("usr/bin/passwd", "setuid\n", 0o4755),
		regular("usr/bin/wall", "setgid\n", 0o2755).owner(0, 5),
		regular("usr/bin/both", "setuid and setgid\n", 0o6711).owner(0, 50),
		directory("tmp/", 0o1777),
		directory("srv/", 0o755),
		directory("srv/data/", 0o750).owner(1000, 1000),
		regular("srv/data/owned", "not root's\n", 0o640).owner(1234, 5678),
		directory("opt/", 0o755),
		directory("opt/lower/", 0o755),
		regular("opt/lower/a", "a\n", 0o644),
		regular("opt/lower/b", "b\n", 0o644),
		directory("opt/lower/sub/", 0o700),
		regular("opt/lower/sub/c", "c\n", 0o600),
		directory("gone/", 0o755),
		regular("gone/file", "whited out\n", 0o644),
		regular("gone/keep", "kept\n", 0o644),
		directory("rep/", 0o755),
		regular("rep/thing", "a file, then a directory\n", 0o644),
		directory("var/", 0o755),
		directory("var/empty/", 0o711),
		directory("usr/share/", 0o755),
		directory("usr/share/doc/", 0o755),
		directory("usr/share/doc/pkg/", 0o755),
		regular("usr/share/doc/pkg/README", "docs\n", 0o644),
		directory("dir2file/", 0o755),
		regular("dir2file/child", "goes with its directory\n", 0o644),
		directory("data/", 0o755),
		regular("data/orig", "original content\n", 0o644),
	)
}

// treeLayers are the tars of a seven-layer image that exercises what a
// layer can do: regular files, directories, an empty directory, setuid
// and setgid files, owners other than root, hard links (in a layer and to
// lower layers, one broken by a later rewrite, one to a lower file whose
// other names stay in the lower layer), relative, absolute and
// dangling symlinks, extended attributes (user.* and file capabilities),
// whiteouts of files and directories, opaque directories, and files,
// directories and symlinks replacing one another.
func treeLayers(t testing.TB) [][]byte {
	rnd := rand.New(rand.NewChaCha8([32]byte{1}))
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	zeros := strings.Repeat("\x00", 256<<10) + "end" + strings.Repeat("\x00", 64<<10)
	longDir := "deep/" + strings.Repeat("x", 120)
	long := longDir + "/" + strings.Repeat("y", 110) + ".txt"
	return [][]byte{
		treeBase(t), // 1: a base
		tarOf(t, // 2: links and extended attributes
			hardlink("data/link1", "data/orig"),
			directory("data/sub/", 0o755),
			hardlink("data/sub/link2", "data/orig"),
			regular("data/x", "linked in this layer\n", 0o600).owner(1000, 1000),
			hardlink("data/y", "data/x"),
			symlink("data/rel", "orig"),
			symlink("data/abs", "/etc/passwd"),
			symlink("data/dangling", "../nowhere/at/all"),
			symlink("data/dirlink", "/opt"),
			directory("caps/", 0o755),
			regular("caps/ping", "pings\n", 0o755).xattr("security.capability", capability(13)).xattr("user.note", "pinger"),
			directory("xd/", 0o755).xattr("user.dirattr", "on a directory"),
			regular("xd/f", "attributes\n", 0o644).xattr("user.a", "1").xattr("user.b", "binary\x00\xff"),
			regular("xd/g", "more attributes\n", 0o644).xattr("user.c", "3"),
		),
		tarOf(t, // 3: whiteouts and an opaque directory
			whiteout("gone/.wh.file"),
			whiteout("opt/lower/.wh..wh..opq"),
			regular("opt/lower/new", "new in layer 3\n", 0o644),
			directory("rep/thing/", 0o750),
			regular("rep/thing/inside", "in the directory that was a file\n", 0o644),
			whiteout("usr/share/.wh.doc"),
			whiteout("etc/.wh.nonexistent"),
		),
		tarOf(t, // 4: changes to what lower layers have
			regular("data/orig", "rewritten in layer 4\n", 0o644),
			directory("srv/data/", 0o700).owner(1000, 50),
			regular("bin/sh", "#!/bin/true\n", 0o750),
		),
		tarOf(t, // 5: links to lower files (one with other names), big, sparse, empty and odd names
			hardlink("bin/ash", "bin/sh"),
			hardlink("data/link3", "data/link1"),
			directory("big/", 0o755),
			regular("big/zeros", zeros, 0o644),
			regular("big/random", string(random), 0o644),
			regular("empty", "", 0o600),
			directory("deep/", 0o755),
			directory(longDir+"/", 0o755),
			regular(long, "long name\n", 0o644),
			directory("unicode/", 0o755),
			regular("unicode/名前-ü.txt", "utf-8\n", 0o644),
		),
		tarOf(t, // 6: replacements
			regular("data/abs", "a file where a symlink was\n", 0o644),
			symlink("data/x", "y"),
			regular("dir2file", "a file where a directory was\n", 0o644),
			regular("opt/lower/new2", "after the opaque layer\n", 0o644),
		),
		tarOf(t, // 7: an opaque directory this layer makes, and more whiteouts
			directory("fresh/", 0o755),
			whiteout("fresh/.wh..wh..opq"),
			regular("fresh/kept", "this layer's own\n", 0o644),
			whiteout("data/.wh.dangling"),
			whiteout("xd/.wh.g"),
		),
	}
}

// treeImage is the image of treeLayers, each compressed with c, whose
// user is app and which has an entrypoint and labels.
func treeImage(t testing.TB, c compression.Compression) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, b := range treeLayers(t) {
		ls = append(ls, registry.TarLayer(t, c, b))
	}
	return withConfig(t, registry.Image(t, ls...), func(cf *v1.ConfigFile) {
		cf.Config.User = "app"
		cf.Config.Entrypoint = []string{"/bin/sh", "-c"}
		cf.Config.Labels = map[string]string{"org.opencontainers.image.title": "tree"}
	})
}

// agentFile is the agent's mount point, which every top has: an empty
// file, root's, mode 0755.
const agentFile = "/.hearth/hearth-agent"

var agentFileNode = node{Type: "file", Mode: 0o755, Nlink: 1,
	Hash: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}

// topExtras are what an image's top adds to its layers, for an image of
// user app (home /home/app) working in /work, none of which it has.
var topExtras = map[string]node{
	"/.hearth":    {Type: "dir", Mode: 0o755},
	agentFile:     agentFileNode,
	"/run":        {Type: "dir", Mode: 0o755},
	"/run/hearth": {Type: "dir", Mode: 0o755},
	"/home":       {Type: "dir", Mode: 0o755},
	"/home/app":   {Type: "dir", Mode: 0o755, UID: 1000, GID: 1000},
	"/work":       {Type: "dir", Mode: 0o755, UID: 1000, GID: 1000},
}

// TestUnpackMatchesUmoci pushes a seven-layer image to a registry, pulls
// it with fetch.Pull and unpacks it, and compares the result, path by path,
// with what skopeo and umoci make of the same image: types, modes,
// owners, contents, link targets, hard links and extended attributes. It
// does so for gzip layers and for zstd layers.
func TestUnpackMatchesUmoci(t *testing.T) {
	for _, tool := range []string{"skopeo", "umoci"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "needs %s: %v", tool, err)
		}
	}
	reg := registry.Start(t, registry.Options{TLS: true})
	for _, tc := range []struct {
		name string
		c    compression.Compression
	}{{"gzip", compression.GZip}, {"zstd", compression.ZStd}} {
		t.Run(tc.name, func(t *testing.T) {
			img := treeImage(t, tc.c)
			ref := reg.Push(t, "tree:"+tc.name, img)
			p, err := fetch.Pull(t.Context(), ref, fetch.Options{
				BlobDir:    t.TempDir(),
				Registries: map[string]fetch.Registry{reg.Host: {CA: reg.CA}},
			})
			if err != nil {
				t.Fatalf("Pull(%s): %v", ref, err)
			}
			if want := digestOf(t, img); p.Digest != want {
				t.Fatalf("Pull(%s).Digest = %s, want %s", ref, p.Digest, want)
			}
			want := umociTree(t, reg, ref, tc.c == compression.ZStd)
			withEnv(t, layertar.Limits{}, func(t *testing.T, e *env) {
				unpackMatches(t, e, p, want)
			})
		})
	}
}

// unpackMatches unpacks the pulled image p (treeImage's) into e, twice,
// and checks what it made against want, umoci's tree of the same image.
func unpackMatches(t *testing.T, e *env, p fetch.Pulled, want tree) {
	u, events := unpack(t, e.store, p.Image, p.Digest)
	chains := chainKeys(t, p.Image)
	top, _ := image.TopKey(p.Digest)
	if want := append(slices.Clone(chains), top); !slices.Equal(u.Layers, want) {
		t.Errorf("Unpack().Layers = %v, want %v", u.Layers, want)
	}
	checkEvents(t, events, p.Image, make([]bool, len(chains)))
	if want := sortedCopy(u.Layers); !slices.Equal(e.keys(), want) {
		t.Errorf("Keys() = %v, want %v", e.keys(), want)
	}
	c := u.Config
	if c.User != "app" || c.UID != 1000 || c.GID != 1000 || c.Home != "/home/app" || c.WorkingDir != "/work" ||
		!slices.Equal(c.Entrypoint, []string{"/bin/sh", "-c"}) || c.Labels["org.opencontainers.image.title"] != "tree" {
		t.Errorf("Unpack().Config = %+v, want user app (1000:1000, home /home/app), working directory /work, the entrypoint and labels", c)
	}

	sameTree(t, "the image's last layer chain, against umoci's", readTree(t, e.path(chains[len(chains)-1])), want)
	sameTree(t, "the image's top, less the directories it adds, against umoci's", readTree(t, e.path(top)).without(t, topExtras), want)

	// Unpacked again: every layer is there already.
	again, events := unpack(t, e.store, p.Image, p.Digest)
	if !slices.Equal(again.Layers, u.Layers) || again.Config.UID != 1000 || again.Config.Home != "/home/app" {
		t.Errorf("Unpack again = %+v, want %+v", again, u)
	}
	cached := make([]bool, len(chains))
	for i := range cached {
		cached[i] = true
	}
	checkEvents(t, events, p.Image, cached)
	e.checkClean()
}

// unpack unpacks img into s as digest, failing t on an error, and returns
// what Unpack returned and reported.
func unpack(t testing.TB, s *image.Store, img v1.Image, digest string) (image.Unpacked, []sandbox.ImageProgress) {
	t.Helper()
	var events []sandbox.ImageProgress
	u, err := s.Unpack(t.Context(), img, digest, func(p sandbox.ImageProgress) { events = append(events, p) })
	if err != nil {
		t.Fatalf("Unpack(%s): %v", digest, err)
	}
	return u, events
}

// checkEvents checks an Unpack's progress: one event per layer of img, in
// order, each cached as cached says, with the bytes written for those
// that were not.
func checkEvents(t testing.TB, events []sandbox.ImageProgress, img v1.Image, cached []bool) {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != len(ls) {
		t.Fatalf("Unpack reported %d events (%+v), want one per layer, %d", len(events), events, len(ls))
	}
	for i, ev := range events {
		d, _ := ls[i].Digest()
		// Bytes: what unpacking the layer wrote, or for a cached layer
		// what its snapshot holds (btrfs counts it): never nothing.
		if ev.Phase != "unpack" || ev.Layer != d.String() || ev.Layers != len(ls) || ev.Cached != cached[i] || ev.Bytes <= 0 {
			t.Errorf("event %d = %+v, want phase unpack, layer %s of %d, cached %v, bytes it holds", i, ev, d, len(ls), cached[i])
		}
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// umociTree is the tree umoci unpacks from the image ref, copied from the
// registry reg by skopeo into an OCI layout. If umoci cannot read the
// layers as they are (zstd, when zstd is true), skopeo copies them
// recompressed with gzip instead: skopeo and umoci still decide every
// byte of the tree, independently of hearth's code.
func umociTree(t *testing.T, reg *registry.Registry, ref string, zstd bool) tree {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certs, "ca.crt"), reg.CA, 0o644); err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(dir, "oci")
	run(t, "skopeo", "--insecure-policy", "copy", "--src-cert-dir", certs, "docker://"+ref, "oci:"+layout+":t")
	bundle := filepath.Join(dir, "bundle")
	out, err := exec.Command("umoci", "unpack", "--image", layout+":t", bundle).CombinedOutput()
	if err == nil {
		return readTree(t, filepath.Join(bundle, "rootfs"))
	}
	if !zstd {
		t.Fatalf("umoci unpack: %v\n%s", err, out)
	}
	t.Logf("umoci cannot unpack zstd layers (%v: %s); comparing with skopeo's copy recompressed with gzip", err, strings.TrimSpace(string(out)))
	layout = filepath.Join(dir, "oci-gzip")
	run(t, "skopeo", "--insecure-policy", "copy", "--src-cert-dir", certs, "--dest-compress-format", "gzip", "docker://"+ref, "oci:"+layout+":t")
	checkLayerTypes(t, layout, types.OCILayer)
	bundle = filepath.Join(dir, "bundle-gzip")
	run(t, "umoci", "unpack", "--image", layout+":t", bundle)
	return readTree(t, filepath.Join(bundle, "rootfs"))
}

// checkLayerTypes checks that every layer of the one image of the OCI
// layout dir has the media type mt.
func checkLayerTypes(t testing.TB, dir string, mt types.MediaType) {
	t.Helper()
	var idx v1.IndexManifest
	readJSON(t, filepath.Join(dir, "index.json"), &idx)
	if len(idx.Manifests) != 1 {
		t.Fatalf("%s lists %d manifests, want 1", dir, len(idx.Manifests))
	}
	var m v1.Manifest
	readJSON(t, filepath.Join(dir, "blobs", "sha256", idx.Manifests[0].Digest.Hex), &m)
	for _, l := range m.Layers {
		if l.MediaType != mt {
			t.Fatalf("layer %s of %s has media type %s, want %s", l.Digest, dir, l.MediaType, mt)
		}
	}
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// run runs a command, failing t with its output if it fails.
func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
