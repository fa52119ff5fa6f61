package e2e_test

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
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
)

// probeUID is the uid of the probe image's user "app".
const probeUID = 1234

// buildProbe builds testdata/probe, static, and returns its path.
func buildProbe(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, b)
	}
	return out
}

// tarEntry is one entry of a test layer.
type tarEntry struct {
	name, body, link string
	mode             int64
	typ              byte
	uid              int
}

// layerOf is a gzip layer holding entries.
func layerOf(t *testing.T, entries ...tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Typeflag: e.typ, Linkname: e.link, Uid: e.uid, Gid: e.uid, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil && h.Size > 0 {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// probeImage is a two-layer image with no shell: the probe as /bin/probe,
// a user app (probeUID) in /etc/passwd, a file the second layer changes
// and one it whites out; it runs as app in /srv/app with FOO=bar.
func probeImage(t *testing.T, probe string) v1.Image {
	t.Helper()
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	dir := func(name string, uid int) tarEntry {
		return tarEntry{name: name, mode: 0o755, typ: tar.TypeDir, uid: uid}
	}
	base := layerOf(t,
		dir("bin/", 0), dir("etc/", 0), dir("home/", 0), dir("home/app/", probeUID), dir("srv/", 0), dir("srv/app/", probeUID), dir("tmp/", 0),
		tarEntry{name: "bin/probe", body: string(bin), mode: 0o755},
		tarEntry{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/probe\napp:x:1234:1234:app:/home/app:/bin/probe\n", mode: 0o644},
		tarEntry{name: "etc/group", body: "root:x:0:\napp:x:1234:\n", mode: 0o644},
		tarEntry{name: "srv/app/data.txt", body: "first", mode: 0o644, uid: probeUID},
		tarEntry{name: "srv/app/gone.txt", body: "whited out", mode: 0o644},
	)
	top := layerOf(t,
		tarEntry{name: "srv/app/data.txt", body: "second", mode: 0o644, uid: probeUID},
		tarEntry{name: "srv/app/.wh.gone.txt", mode: 0o644},
		tarEntry{name: "srv/app/link", link: "data.txt", typ: tar.TypeSymlink, mode: 0o777},
	)
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{User: "app", WorkingDir: "/srv/app", Env: []string{"PATH=/bin", "FOO=bar"}, Cmd: []string{"/bin/probe"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageFromRegistry: an image pulled from a registry that needs TLS
// (a test CA) and a login runs under each runtime as the image says: as
// its user, in its working directory, with its environment, with no
// shell in it, its layers applied in order (a file changed, one whited
// out); the sandbox says which version it runs; an image made from the
// sandbox carries what was written in it; and an image in use cannot be
// removed.
func TestImageFromRegistry(t *testing.T) {
	requireDaemon(t)
	reg := registry.Start(t, registry.Options{TLS: true, Username: "ci", Password: "s3cret-pw"})
	ref := reg.Push(t, "probe:1", probeImage(t, buildProbe(t)))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, reg.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := newDaemon(t, rt)
		if _, errOut, code := d.CLI("", "image", "pull", ref); code != sandbox.CodeUnavailable.ExitCode() || !strings.Contains(errOut, "--ca-file") {
			t.Fatalf("a pull without the registry's CA = %d %q, want unavailable saying to give its CA", code, errOut)
		}
		if out, errOut, code := d.CLI("s3cret-pw\n", "registry", "login", reg.Host, "--username", "ci", "--password-stdin", "--ca-file", caFile); code != 0 {
			t.Fatalf("registry login = %d %q %q", code, out, errOut)
		}
		if out, _, _ := d.CLI("", "registry", "list", "--json"); strings.Contains(out, "s3cret-pw") || !strings.Contains(out, reg.Host) {
			t.Errorf("registry list = %q: want the host, never the password", out)
		}
		// create pulls the reference it does not have yet.
		if out, errOut, code := d.CLI("", "create", "app", "--image", ref); code != 0 {
			t.Fatalf("create --image %s = %d %q %q", ref, code, out, errOut)
		}
		out, errOut, code := d.CLI("", "exec", "app", "--", "probe", "data.txt", "gone.txt", "link")
		want := "uid=1234 gid=1234 cwd=/srv/app home=/home/app foo=bar\ndata.txt: second\n" +
			"gone.txt: open gone.txt: no such file or directory\nlink: second\n"
		if code != 0 || out != want {
			t.Fatalf("exec probe = %d %q %q, want %q", code, out, errOut, want)
		}
		// MCP's sandbox_create takes the image too.
		cs := mcpConnect(t, d, d.Token, nil)
		if res := callTool(t, cs, "sandbox_create", map[string]any{"name": "app-mcp", "image": ref}, nil); res.IsError || !strings.Contains(mcpText(res), `"`+sandbox.CapImage+"sha256:") {
			t.Errorf("sandbox_create with image %s = %s", ref, mcpText(res))
		}
		if out, _, code := d.CLI("", "exec", "app-mcp", "--", "probe"); code != 0 || !strings.HasPrefix(out, "uid=1234 gid=1234 cwd=/srv/app") {
			t.Errorf("exec in the MCP-made sandbox = %d %q", code, out)
		}
		var sb sandbox.Sandbox
		getJSON(t, d, &sb, "get", "app", "--json")
		if !strings.HasPrefix(sb.ImageDigest, "sha256:") || !containsString(sb.Capabilities, sandbox.CapImage+sb.ImageDigest) || sb.ImageConfig.UID != probeUID {
			t.Errorf("the sandbox = image %q digest %q capabilities %q config %+v", sb.Image, sb.ImageDigest, sb.Capabilities, sb.ImageConfig)
		}

		// An image of the sandbox's disk, with what was written in it.
		if _, errOut, code := d.CLI("made by app\n", "fs", "write", "app", "note.txt"); code != 0 {
			t.Fatalf("fs write = %d %q", code, errOut)
		}
		if _, errOut, code := d.CLI("", "image", "create", "app-snap", "--from", "app"); code != 0 {
			t.Fatalf("image create --from app = %d %q", code, errOut)
		}
		if _, errOut, code := d.CLI("", "create", "copy", "--image", "app-snap"); code != 0 {
			t.Fatalf("create --image app-snap = %d %q", code, errOut)
		}
		if out, errOut, code := d.CLI("", "exec", "copy", "--", "probe", "note.txt"); code != 0 || !strings.Contains(out, "uid=1234") || !strings.HasSuffix(out, "note.txt: made by app\n\n") {
			t.Errorf("exec in the copy = %d %q %q", code, out, errOut)
		}
		if _, errOut, code := d.CLI("", "image", "rm", "app-snap"); code != sandbox.CodeFailedPrecondition.ExitCode() || !strings.Contains(errOut, "copy") {
			t.Errorf("image rm of an image in use = %d %q, want failed_precondition naming the sandbox copy", code, errOut)
		}
		if _, errOut, code := d.CLI("", "destroy", "copy"); code != 0 {
			t.Fatalf("destroy = %d %q", code, errOut)
		}
		if _, errOut, code := d.CLI("", "image", "rm", "app-snap"); code != 0 {
			t.Errorf("image rm of an unused image = %d %q", code, errOut)
		}
	})
}

// getJSON runs the CLI and decodes its JSON output into v.
func getJSON(t *testing.T, d *daemon, v any, args ...string) {
	t.Helper()
	out, errOut, code := d.CLI("", args...)
	if code != 0 {
		t.Fatalf("hearth %q = %d %q", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("hearth %q: %v: %q", args, err, out)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// buildEvents runs `hearth image build … --json` and returns its progress
// events and the image, or fails t.
func buildEvents(t *testing.T, d *daemon, args ...string) ([]sandbox.ImageProgress, sandbox.Image, string) {
	t.Helper()
	out, errOut, code := d.CLI("", append([]string{"image", "build"}, append(args, "--json")...)...)
	var events []sandbox.ImageProgress
	var img sandbox.Image
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var msg struct {
			sandbox.ImageProgress
			Image *sandbox.Image `json:"image"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(line), &msg) != nil {
			continue
		}
		switch {
		case msg.Image != nil:
			img = *msg.Image
		case msg.Error != nil:
			return events, img, msg.Error.Message
		default:
			events = append(events, msg.ImageProgress)
		}
	}
	if code != 0 {
		return events, img, errOut
	}
	return events, img, ""
}

// stepsRun are the numbers of the build steps events say ran (were not
// cached).
func stepsRun(events []sandbox.ImageProgress) []int {
	var ran []int
	for _, ev := range events {
		if ev.Phase == "step" && !ev.Cached {
			ran = append(ran, ev.Step)
		}
	}
	return ran
}

// TestImageBuild builds an image from a Dockerfile under each runtime:
// COPY from the context, RUN in a sandbox as the image's user with the
// build's ARG and ENV, WORKDIR and USER; a sandbox of the image runs as
// it says; a rebuild with only the last line changed runs only that
// step; a failing RUN names its step, line, exit code and output.
func TestImageBuild(t *testing.T) {
	requireDaemon(t)
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := newDaemon(t, rt)
		dir := t.TempDir()
		write := func(name, text string) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("hello.txt", "hello from the context\n")
		dockerfile := "FROM default\n" +
			"ARG GREETING=hi\n" +
			"ENV APP_MODE=built\n" +
			"WORKDIR /opt/app\n" +
			"COPY hello.txt ./\n" +
			"RUN echo \"$GREETING $APP_MODE by $(id -u) in $(pwd)\" > run.txt\n" +
			"RUN echo last > last.txt\n"
		write("Dockerfile", dockerfile)
		events, img, failed := buildEvents(t, d, "app", "-f", filepath.Join(dir, "Dockerfile"), "--build-arg", "GREETING=hello", dir)
		if failed != "" || img.Name != "app" || img.Config.WorkingDir != "/opt/app" {
			t.Fatalf("build = %q, image %+v", failed, img)
		}
		if ran := stepsRun(events); len(ran) < 3 {
			t.Errorf("the first build ran steps %v; want every step that changes the root", ran)
		}
		if _, errOut, code := d.CLI("", "create", "box", "--image", "app"); code != 0 {
			t.Fatalf("create --image app = %d %q", code, errOut)
		}
		out, errOut, code := d.CLI("", "exec", "box", "--shell", "--", `cat hello.txt run.txt last.txt; echo "$APP_MODE $(id -un)"`)
		want := "hello from the context\nhello built by 1000 in /opt/app\nlast\nbuilt sandbox\n"
		if code != 0 || out != want {
			t.Errorf("exec in the built image = %d %q %q, want %q", code, out, errOut, want)
		}

		// Only the last line changed, after a daemon restart (the cache
		// outlives it): only the last step runs.
		d.Stop()
		d.Start()
		write("Dockerfile", strings.Replace(dockerfile, "echo last", "echo changed", 1))
		events, img, failed = buildEvents(t, d, "app", "-f", filepath.Join(dir, "Dockerfile"), "--build-arg", "GREETING=hello", dir)
		if failed != "" {
			t.Fatalf("rebuild = %q", failed)
		}
		if ran := stepsRun(events); len(ran) != 1 || ran[0] != 6 {
			t.Errorf("the rebuild ran steps %v; want only step 6, the changed last line", ran)
		}

		write("Dockerfile", "FROM default\nRUN echo about to fail; echo oops >&2; exit 3\n")
		_, _, failed = buildEvents(t, d, "bad", "-f", filepath.Join(dir, "Dockerfile"), dir)
		for _, want := range []string{"step 1/1 (line 2): RUN echo about to fail", "exit code 3", "oops"} {
			if !strings.Contains(failed, want) {
				t.Errorf("a failing RUN's error = %q; want %q in it", failed, want)
			}
		}
		if out, _, _ := d.CLI("", "list", "--json"); strings.Contains(out, "build-") {
			t.Errorf("a build's sandboxes outlived it: %s", out)
		}
	})
}

// TestKillDuringPullAndBuild SIGKILLs the daemon at random moments of a
// pull of a 6-layer image and of a build, and checks after each restart
// that nothing is half imported: the image is listed whole (its call
// returned) or not at all, the layer store holds no layer or top being
// made and no layer no image names (wantWhole), and the next pull and
// build complete and run.
func TestKillDuringPullAndBuild(t *testing.T) {
	requireDaemon(t)
	reg := registry.Start(t, registry.Options{})
	ref := reg.Push(t, "big:1", registry.RandomImage(t, 6, 16<<20, compression.GZip))
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)
	r := crashRand(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM default\nRUN sleep 0.3; echo one > one.txt\nRUN echo two > two.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		pullErr := d.killDuring(ctx, time.Duration(r.IntN(1200))*time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, err := c.Images().Pull(ctx, ref, client.PullOptions{})
			return err
		})
		d.wantWhole(ctx)
		if _, err := d.Client().Images().Get(ctx, ref); pullErr == nil && err != nil {
			t.Fatalf("round %d: the pull returned, but after the restart the image is %v", round, err)
		}
		buildErr := d.killDuring(ctx, time.Duration(r.IntN(1500))*time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, _, failed := buildEvents(t, d, "built", "-f", filepath.Join(dir, "Dockerfile"), dir)
			if failed != "" {
				return errors.New(failed)
			}
			return nil
		})
		d.wantWhole(ctx)
		t.Logf("round %d: pull %v; build %v", round, pullErr, buildErr)
		if _, errOut, code := d.CLI("", "image", "rm", ref); code != 0 && code != sandbox.CodeNotFound.ExitCode() {
			t.Fatalf("round %d: image rm = %d %q", round, code, errOut)
		}
	}
	if _, errOut, code := d.CLI("", "image", "pull", ref); code != 0 {
		t.Fatalf("the pull after the kills = %d %q", code, errOut)
	}
	if _, _, failed := buildEvents(t, d, "built", "-f", filepath.Join(dir, "Dockerfile"), dir); failed != "" {
		t.Fatalf("the build after the kills = %q", failed)
	}
	if _, errOut, code := d.CLI("", "create", "box", "--image", "built"); code != 0 {
		t.Fatalf("create from the built image = %d %q", code, errOut)
	}
	if out, _, _ := d.CLI("", "exec", "box", "--", "cat", "one.txt", "two.txt"); out != "one\ntwo\n" {
		t.Errorf("the built image holds %q", out)
	}
	d.wantWhole(ctx)
}
