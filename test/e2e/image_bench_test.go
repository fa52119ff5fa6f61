package e2e_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
	"github.com/hearth/hearth/testutil/registry"
	"github.com/hearth/hearth/testutil/testenv"
)

// Benchmarks of images: a pull from a registry on the loopback against
// skopeo and umoci doing the same, a create from a pulled image against
// one from the default image, and a Dockerfile build against its rebuild.
// Each alternates with its baseline in one loop, so both see the same
// host; they use b.Loop, so their setup (a 500 MB image pushed, a daemon
// started) runs once. docs/BENCHMARKS.md has the commands and figures.

// pullLayers and pullLayerSize make BenchmarkPull's image: 10 layers of
// 50 MiB of random (incompressible) bytes, gzip.
const (
	pullLayers    = 10
	pullLayerSize = 50 << 20
)

// BenchmarkPull is a pull of a 500 MB, 10-layer image from a registry on
// the loopback until the daemon has stored it ("hearth-"; "download-" is
// until the last byte of the layers arrived), against `skopeo copy` of the
// same image into a fresh OCI layout followed by `umoci unpack` of it into
// a fresh bundle ("baseline-", its parts "skopeo-" and "umoci-"). Between
// pulls, outside the timer, the image is removed (its layer keys checked
// gone from the layer store, and btrfs's cleaning of their subvolumes
// waited for) and the blobs the daemon downloaded deleted, which it keeps
// after a removal ("blobs-kept" says how many it kept), so that every
// pull downloads and unpacks everything again; both sides' writes are
// synced before the next.
func BenchmarkPull(b *testing.B) {
	requireDaemon(b)
	requireTools(b, "skopeo", "umoci")
	reg := registry.Start(b, registry.Options{})
	ref := reg.Push(b, "big:1", randomOCIImage(b))
	b.Run(bins.Runtimes[0], func(b *testing.B) {
		d := newDaemon(b, bins.Runtimes[0])
		ctx := context.Background()
		before := d.layerKeys(b)
		var hearth, download, baseline, skopeo, umoci latencies
		kept := 0
		for i := 0; b.Loop(); i++ {
			for _, side := range alternate(i) {
				if side == 0 {
					total, dl := timePull(b, d, ref)
					hearth, download = append(hearth, total), append(download, dl)
					b.StopTimer()
					kept = max(kept, d.forgetPull(ctx, b, ref, before))
				} else {
					dir := b.TempDir()
					copied, unpacked := timeSkopeoUmoci(b, reg.Ref("big:1"), dir)
					skopeo, umoci = append(skopeo, copied), append(umoci, unpacked)
					baseline = append(baseline, copied+unpacked)
					b.StopTimer()
					mustRemoveAll(b, dir)
				}
				syncDisks(b)
				b.StartTimer()
			}
		}
		benchstat.Report(b, "hearth-", hearth)
		benchstat.Report(b, "download-", download)
		benchstat.Report(b, "baseline-", baseline)
		benchstat.Report(b, "skopeo-", skopeo)
		benchstat.Report(b, "umoci-", umoci)
		reportRatio(b, hearth, baseline)
		b.ReportMetric(float64(kept), "blobs-kept")
	})
}

// randomOCIImage is an image of pullLayers layers, each a file of
// pullLayerSize random bytes, gzip, with OCI media types (umoci takes no
// other).
func randomOCIImage(b *testing.B) v1.Image {
	b.Helper()
	layers := make([]v1.Layer, pullLayers)
	for i := range layers {
		body := make([]byte, pullLayerSize)
		rand.Read(body)
		name := fmt.Sprintf("random/%d-%x", i, body[:8])
		layers[i] = registry.TarLayer(b, compression.GZip, registry.Tar(b, map[string]string{name: string(body)}))
	}
	return registry.Image(b, layers...)
}

// alternate is the order of the two sides of iteration i: the first
// (0) before the second (1) in even iterations, after it in odd ones.
func alternate(i int) []int {
	if i%2 == 0 {
		return []int{0, 1}
	}
	return []int{1, 0}
}

// reportRatio reports p50(a) / p50(b) as "ratio".
func reportRatio(b *testing.B, a, base latencies) {
	if pb := benchstat.Percentile(base, 0.5); pb > 0 {
		b.ReportMetric(benchstat.Percentile(a, 0.5)/pb, "ratio")
	}
}

// requireTools skips b unless the commands are installed.
func requireTools(b *testing.B, tools ...string) {
	b.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(b, "%s is not installed: %v", tool, err)
		}
	}
}

// timePull pulls ref through the API and returns how long it took, and
// how long until the last progress event of a layer's download.
func timePull(b *testing.B, d *daemon, ref string) (total, download time.Duration) {
	b.Helper()
	var last time.Time
	start := time.Now()
	img, err := d.Client().Images().Pull(context.Background(), ref, client.PullOptions{Progress: func(ev sandbox.ImageProgress) {
		if ev.Phase == "layer" {
			last = time.Now()
		}
	}})
	total = time.Since(start)
	if err != nil {
		b.Fatalf("pull %s: %v", ref, err)
	}
	if img.Size < pullLayers*pullLayerSize {
		b.Fatalf("pull %s = an image holding %d bytes, want at least %d", ref, img.Size, pullLayers*pullLayerSize)
	}
	if last.IsZero() {
		b.Fatalf("pull %s reported no download: its layers were there already", ref)
	}
	return total, last.Sub(start)
}

// forgetPull removes the image ref, checks that the layer store holds
// again only the keys before (the pull's layer chains and top are
// gone), and deletes the blobs the pull left in the daemon's blob
// directory (<data>/spool/blobs), which the removal keeps: every pull
// after downloads again. It returns how many blobs it deleted.
func (d *daemon) forgetPull(ctx context.Context, b *testing.B, ref string, before []string) int {
	b.Helper()
	if added := keysWithout(d.layerKeys(b), before); len(added) != pullLayers+1 {
		b.Fatalf("the pull of %s added the layer keys %q; want %d chains and a top", ref, added, pullLayers)
	}
	if err := d.Client().Images().Remove(ctx, ref); err != nil {
		b.Fatalf("image rm %s: %v", ref, err)
	}
	if left := keysWithout(d.layerKeys(b), before); len(left) > 0 {
		b.Fatalf("the layer store still holds %q after the removal of %s", left, ref)
	}
	// btrfs frees a removed subvolume's extents in the background: wait
	// for it here rather than during the next pull.
	mustRun(b, "btrfs", "subvolume", "sync", filepath.Join(d.DataDir, "layers"))
	blobs := filepath.Join(d.DataDir, "spool", "blobs", "sha256")
	kept, err := os.ReadDir(blobs)
	if err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	mustRemoveAll(b, blobs)
	return len(kept)
}

// keysWithout is keys less those in drop.
func keysWithout(keys, drop []string) []string {
	return slices.DeleteFunc(keys, func(k string) bool { return slices.Contains(drop, k) })
}

// layerKeys are the keys the daemon's layer store holds (the btrfs
// store's records, <data>/layers/meta/<key>).
func (d *daemon) layerKeys(b *testing.B) []string {
	b.Helper()
	entries, err := os.ReadDir(filepath.Join(d.DataDir, "layers", "meta"))
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 0, len(entries))
	for _, e := range entries {
		keys = append(keys, e.Name())
	}
	return keys
}

// timeSkopeoUmoci copies ref (on a plain-HTTP registry) into an OCI
// layout under dir with skopeo, then unpacks it into a bundle under dir
// with umoci, and returns how long each took.
func timeSkopeoUmoci(b *testing.B, ref, dir string) (copied, unpacked time.Duration) {
	b.Helper()
	layout := filepath.Join(dir, "oci") + ":big"
	start := time.Now()
	mustRun(b, "skopeo", "copy", "--src-tls-verify=false", "docker://"+ref, "oci:"+layout)
	copied = time.Since(start)
	start = time.Now()
	mustRun(b, "umoci", "unpack", "--image", layout, filepath.Join(dir, "bundle"))
	unpacked = time.Since(start)
	if fi, err := os.Stat(filepath.Join(dir, "bundle", "rootfs", "random")); err != nil || !fi.IsDir() {
		b.Fatalf("umoci's bundle has no /random: %v", err)
	}
	return copied, unpacked
}

// mustRun runs a command, failing b with its output if it fails.
func mustRun(b *testing.B, name string, args ...string) {
	b.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
}

// mustRemoveAll removes path and what it holds.
func mustRemoveAll(b *testing.B, path string) {
	b.Helper()
	if err := os.RemoveAll(path); err != nil {
		b.Fatal(err)
	}
}

// syncDisks writes out what the last iteration left dirty, so that the
// next does not pay for it.
func syncDisks(b *testing.B) {
	b.Helper()
	mustRun(b, "sync")
}

// BenchmarkCreateFromImage is create → the first byte of `echo hi`, as
// BenchmarkCreateToFirstOutput measures it, from an image pulled from a
// registry ("image-") against the same from the default image
// ("default-"), per runtime. The pulled image is the default image's
// root filesystem as one gzip layer, with the default image's user,
// home and environment: the same files, stored through the image path
// (a layer chain and the image's top) instead of the default image's
// snapshot. Destroys run outside the timer.
func BenchmarkCreateFromImage(b *testing.B) {
	requireDaemon(b)
	reg := registry.Start(b, registry.Options{})
	ref := reg.Push(b, "rootfs:1", defaultRootImage(b))
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		img, err := c.Images().Pull(ctx, ref, client.PullOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var fromImage, fromDefault latencies
		for i := 0; b.Loop(); i++ {
			for _, side := range alternate(i) {
				req := sandbox.CreateRequest{Name: fmt.Sprintf("default-%d", i)}
				if side == 0 {
					req = sandbox.CreateRequest{Name: fmt.Sprintf("image-%d", i), Image: img.Name}
				}
				lat := timeCreate(b, c, req)
				b.StopTimer()
				if side == 0 {
					fromImage = append(fromImage, lat)
					wantImage(b, c, req.Name, img.Digest)
				} else {
					fromDefault = append(fromDefault, lat)
				}
				if err := c.Destroy(ctx, req.Name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
		benchstat.Report(b, "image-", fromImage)
		benchstat.Report(b, "default-", fromDefault)
		reportRatio(b, fromImage, fromDefault)
	})
}

// timeCreate creates the sandbox req asks for and runs `echo hi` in it,
// and returns the time from the create's call to echo's first byte.
func timeCreate(b *testing.B, c *client.Client, req sandbox.CreateRequest) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, _, err := c.Create(ctx, req); err != nil {
		b.Fatalf("create %+v: %v", req, err)
	}
	var out firstByte
	if _, err := c.Exec(ctx, req.Name, sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, nil, &out, io.Discard); err != nil || out.buf.String() != "hi\n" {
		b.Fatalf("echo hi in %s = %q, %v", req.Name, out.buf.String(), err)
	}
	return out.at.Sub(start)
}

// wantImage fails b unless the sandbox name runs the image version
// digest, as the user the default image has.
func wantImage(b *testing.B, c *client.Client, name, digest string) {
	b.Helper()
	sb, err := c.Get(context.Background(), name)
	if err != nil {
		b.Fatal(err)
	}
	if sb.ImageDigest != digest || sb.ImageConfig.UID != node.DefaultConfig.UID {
		b.Fatalf("sandbox %s runs image %q (uid %d), want %s (uid %d)", name, sb.ImageDigest, sb.ImageConfig.UID, digest, node.DefaultConfig.UID)
	}
}

// defaultRootImage is an image of one gzip layer holding the default
// image's root filesystem (from the image cache, tarred by tar(1) with
// numeric owners and extended attributes) and the default image's config.
func defaultRootImage(b *testing.B) v1.Image {
	b.Helper()
	root := filepath.Join(bins.ImageCache, "default", "rootfs")
	cmd := exec.Command("tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", root, "-cf", "-", ".")
	var tarball, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &tarball, &errOut
	if err := cmd.Run(); err != nil {
		b.Fatalf("tar the default image's root %s: %v\n%s", root, err, errOut.String())
	}
	img := registry.Image(b, registry.TarLayer(b, compression.GZip, tarball.Bytes()))
	cf, err := img.ConfigFile()
	if err != nil {
		b.Fatal(err)
	}
	cf = cf.DeepCopy()
	dc := node.DefaultConfig
	cf.Config = v1.Config{Env: dc.Env, User: dc.User, WorkingDir: dc.WorkingDir, Cmd: []string{"/bin/bash"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		b.Fatal(err)
	}
	return img
}

// buildDockerfile is BenchmarkBuild's Dockerfile: six steps that change
// the root (a RUN whose text is the build's first argument, a WORKDIR, a
// COPY, a RUN writing 500 files, a RUN of half a second, and a RUN whose
// text is the second argument), and an ENV.
const buildDockerfile = `FROM default
RUN echo %s > build-id.txt
WORKDIR /opt/app
COPY src/ ./src/
RUN mkdir gen && for i in $(seq 1 500); do echo "file $i" > gen/$i.txt; done
ENV APP_MODE=bench
RUN sleep 0.5 && echo slow > slow.txt
RUN echo %s > last.txt
`

// BenchmarkBuild is a Dockerfile build of six steps FROM the default
// image with nothing cached ("full-": the first RUN's text is new each
// time, so every step runs), against its rebuild with only the last line
// changed ("rebuild-": only the last step runs), per runtime. The
// context (a directory of 20 files of 16 KiB) is sent each time.
func BenchmarkBuild(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		images := d.Client().Images()
		bc := buildContext(b)
		build := func(name, first, last string, wantRan []int) time.Duration {
			var events []sandbox.ImageProgress
			start := time.Now()
			_, err := images.Build(ctx, name, strings.NewReader(fmt.Sprintf(buildDockerfile, first, last)), bytes.NewReader(bc),
				client.BuildOptions{Progress: func(ev sandbox.ImageProgress) { events = append(events, ev) }})
			lat := time.Since(start)
			if err != nil {
				b.Fatalf("build %s: %v", name, err)
			}
			if ran := stepsRun(events); !slices.Equal(ran, wantRan) {
				b.Fatalf("build %s ran steps %v, want %v", name, ran, wantRan)
			}
			return lat
		}
		build("app", "cached", "last-0", []int{1, 2, 3, 4, 6, 7})
		var full, rebuild latencies
		for i := 0; b.Loop(); i++ {
			for _, side := range alternate(i) {
				if side == 0 {
					full = append(full, build("full", fmt.Sprintf("full-%d", i), "last", []int{1, 2, 3, 4, 6, 7}))
					b.StopTimer()
					if err := images.Remove(ctx, "full"); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				} else {
					rebuild = append(rebuild, build("app", "cached", fmt.Sprintf("last-%d", i+1), []int{7}))
				}
			}
		}
		benchstat.Report(b, "full-", full)
		benchstat.Report(b, "rebuild-", rebuild)
		reportRatio(b, rebuild, full)
	})
}

// buildContext is BenchmarkBuild's context: a tar of src/ holding 20
// files of 16 KiB each.
func buildContext(b *testing.B) []byte {
	b.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "src/", Mode: 0o755, ModTime: mtime}))
	for i := range 20 {
		body := bytes.Repeat([]byte{'a' + byte(i)}, 16<<10)
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("src/f%02d.txt", i), Mode: 0o644, Size: int64(len(body)), ModTime: mtime}))
		_, err := tw.Write(body)
		must(err)
	}
	must(tw.Close())
	return buf.Bytes()
}
