package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemontest"
	"github.com/hearth/hearth/testutil/registry"
)

// Tokens the image tests add to the daemon in miniature.
const (
	testAdminToken    = "hearth_testtokenfortenantadmint1"
	testOperatorToken = "hearth_testtokenfortheoperator0"
)

// imageDaemon is the native API over a daemon in miniature
// (testutil/daemontest) that keeps images, and a registry with the images
// app:1.0 and other:1.0: the image verbs are tested against the real API.
type imageDaemon struct {
	d        *daemontest.Env
	url      string
	app, off string // references in the registry
}

var testImageFiles = map[string]string{
	"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\n",
	"etc/group":       "root:x:0:\n",
	"root/from-image": "yes\n",
}

func newImageDaemon(t *testing.T) *imageDaemon {
	t.Helper()
	reg := registry.Start(t, registry.Options{})
	layer := registry.Layer(t, compression.GZip, testImageFiles)
	d, url := newAPI(t)
	d.TrustRegistry(t, reg.Host)
	return &imageDaemon{d: d, url: url,
		app: reg.Push(t, "app:1.0", registry.Image(t, layer)),
		off: reg.Push(t, "other:1.0", registry.Image(t, layer, registry.RandomLayer(t, compression.GZip, 1<<20)))}
}

// newAPI serves the native API over a daemon in miniature, whose tenant
// t1 has a tenant admin and whose operator has a token besides its agents.
func newAPI(t *testing.T) (*daemontest.Env, string) {
	t.Helper()
	d := daemontest.New(t, daemontest.Options{})
	d.AddToken(t, "tok-admin", testAdminToken, sandbox.Principal{Tenant: "t1", Agent: "boss", Role: sandbox.RoleTenantAdmin})
	d.AddToken(t, "tok-op", testOperatorToken, sandbox.Principal{Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator})
	srv := httptest.NewServer(door.New(d.Svc.Tenancy, d.Svc.Sandboxes, door.Options{}).Handler(httpapi.New(d.Svc, httpapi.Options{})))
	t.Cleanup(srv.Close)
	return d, srv.URL
}

// hearth runs the CLI with token against the daemon, stdin as its input.
func (d *imageDaemon) hearth(t *testing.T, token, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	env := map[string]string{"HEARTH_URL": d.url, "HEARTH_TOKEN": token}
	var out, errb bytes.Buffer
	code = run(t.Context(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

// TestImageVerbs drives `hearth image` and `hearth registry` against the
// API: what each prints, its JSON, its progress, and its errors.
func TestImageVerbs(t *testing.T) {
	d := newImageDaemon(t)
	agent := daemontest.TokenA1

	out, errOut, code := d.hearth(t, agent, "", "image", "pull", d.app)
	if code != 0 || !strings.HasPrefix(out, "pulled image "+d.app+"\n") || !strings.Contains(out, "source:") || !strings.Contains(out, "digest:") {
		t.Fatalf("hearth image pull = %d %q %q", code, out, errOut)
	}
	for _, want := range []string{"resolving " + d.app + "\n", ": downloaded ", ": unpacked ", "stored " + d.app + "@sha256:"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("hearth image pull's progress on stderr = %q; want %q in it", errOut, want)
		}
	}
	out, errOut, code = d.hearth(t, agent, "", "image", "pull", d.app, "--json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var last struct{ Image sandbox.Image }
	if code != 0 || errOut != "" || len(lines) < 2 || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil || last.Image.Name != d.app {
		t.Fatalf("hearth image pull --json = %d %q %q; want progress lines, then {\"image\":…}", code, out, errOut)
	}
	for _, l := range lines[:len(lines)-1] {
		var ev sandbox.ImageProgress
		if json.Unmarshal([]byte(l), &ev) != nil || ev.Phase == "" {
			t.Errorf("hearth image pull --json printed %q; want a progress event", l)
		}
	}

	// list and inspect, as a table, key: value lines and JSON.
	out, _, code = d.hearth(t, agent, "", "image", "list")
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(rows) != 2 || strings.Join(strings.Fields(rows[0]), " ") != "NAME DIGEST SIZE SOURCE CURRENT PUBLIC TENANT AGE" ||
		!strings.HasPrefix(rows[1], d.app+" ") || !strings.Contains(rows[1], " registry ") {
		t.Errorf("hearth image list = %d\n%s", code, out)
	}
	out, _, code = d.hearth(t, agent, "", "image", "list", "--json")
	var list struct{ Images []sandbox.Image }
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Images) != 1 {
		t.Errorf("hearth image list --json = %d %q", code, out)
	}
	out, _, code = d.hearth(t, agent, "", "image", "inspect", d.app)
	if code != 0 || !strings.HasPrefix(out, "name:") || !strings.Contains(out, "user:") || !strings.Contains(out, last.Image.Digest) {
		t.Errorf("hearth image inspect = %d %q", code, out)
	}
	_, errOut, code = d.hearth(t, agent, "", "image", "inspect", "nope")
	if code != sandbox.CodeNotFound.ExitCode() || !strings.Contains(errOut, `error: image "nope" not found`) || !strings.Contains(errOut, "hint: ") {
		t.Errorf("hearth image inspect nope = %d %q", code, errOut)
	}

	// create --image REF pulls a reference it does not have yet, its
	// progress on stderr, and then creates the sandbox from it.
	out, errOut, code = d.hearth(t, agent, "", "create", "box", "--image", d.off, "--json")
	var sb sandbox.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.Image != d.off || !strings.Contains(errOut, "pulling it") || !strings.Contains(errOut, "stored "+d.off) {
		t.Fatalf("hearth create --image %s = %d %q %q", d.off, code, out, errOut)
	}
	if _, errOut, code = d.hearth(t, agent, "", "create", "box2", "--image", d.off); code != 0 || strings.Contains(errOut, "pulling") {
		t.Errorf("hearth create with an image already pulled = %d %q; want no pull", code, errOut)
	}

	// An image from the sandbox, now and at a checkpoint.
	out, errOut, code = d.hearth(t, agent, "", "image", "create", "snap", "--from", "box")
	if code != 0 || !strings.HasPrefix(out, "created image snap from box\n") || !strings.Contains(out, "source:      sandbox") {
		t.Errorf("hearth image create = %d %q %q", code, out, errOut)
	}
	ck, err := d.d.Svc.Checkpoints.Checkpoint(t.Context(), daemontest.AgentA1, "box", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out, _, code = d.hearth(t, agent, "", "image", "create", "snap2", "--from", "box@"+ck.ID, "--json")
	var img sandbox.Image
	if code != 0 || json.Unmarshal([]byte(out), &img) != nil || !strings.HasSuffix(img.Ref, "@"+ck.ID) {
		t.Errorf("hearth image create --from box@%s --json = %d %q", ck.ID, code, out)
	}

	// rm and public: who may.
	if _, errOut, code := d.hearth(t, agent, "", "image", "rm", "snap"); code != sandbox.CodePermissionDenied.ExitCode() {
		t.Errorf("hearth image rm as an agent = %d %q", code, errOut)
	}
	if out, errOut, code := d.hearth(t, testAdminToken, "", "image", "rm", "snap"); code != 0 || out != "image snap removed\n" {
		t.Errorf("hearth image rm as a tenant admin = %d %q %q", code, out, errOut)
	}
	if _, errOut, code := d.hearth(t, testAdminToken, "", "image", "public", "snap2"); code != sandbox.CodePermissionDenied.ExitCode() {
		t.Errorf("hearth image public as a tenant admin = %d %q", code, errOut)
	}
	if _, errOut, code := d.hearth(t, testOperatorToken, "", "image", "pull", d.app); code != 0 {
		t.Fatalf("hearth image pull as the operator = %d %q", code, errOut)
	}
	if out, errOut, code := d.hearth(t, testOperatorToken, "", "image", "public", d.app); code != 0 || !strings.Contains(out, "is public") {
		t.Errorf("hearth image public = %d %q %q", code, out, errOut)
	}
	if out, errOut, code := d.hearth(t, testOperatorToken, "", "image", "public", d.app, "--off"); code != 0 || !strings.Contains(out, "is private to tenant system") {
		t.Errorf("hearth image public --off = %d %q %q", code, out, errOut)
	}
	// --public on a pull: stored and made public in one verb.
	out, errOut, code = d.hearth(t, testOperatorToken, "", "image", "pull", d.app, "--public", "--json")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || !strings.Contains(lines[len(lines)-1], `"public":true`) {
		t.Errorf("hearth image pull --public = %d %q %q", code, out, errOut)
	}
	if _, errOut, code := d.hearth(t, agent, "", "image", "pull", d.app, "--public"); code != sandbox.CodePermissionDenied.ExitCode() {
		t.Errorf("hearth image pull --public as an agent = %d %q, want permission_denied", code, errOut)
	}

	// Registry logins: the password from stdin, never shown again.
	out, errOut, code = d.hearth(t, testAdminToken, "s3cret\n", "registry", "login", "reg.example.com:5000", "--username", "me", "--password-stdin", "--insecure")
	if code != 0 || out != "logged in to reg.example.com:5000 as me for tenant t1\n" {
		t.Errorf("hearth registry login = %d %q %q", code, out, errOut)
	}
	out, _, code = d.hearth(t, agent, "", "registry", "list")
	if rows := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(rows) != 3 || !slices.ContainsFunc(rows, func(r string) bool {
		return strings.HasPrefix(strings.Join(strings.Fields(r), " "), "reg.example.com:5000 me yes no")
	}) || strings.Contains(out, "s3cret") {
		t.Errorf("hearth registry list = %d\n%s", code, out)
	}
	if _, errOut, code := d.hearth(t, agent, "", "registry", "rm", "reg.example.com:5000"); code != sandbox.CodePermissionDenied.ExitCode() {
		t.Errorf("hearth registry rm as an agent = %d %q", code, errOut)
	}
	if out, _, code := d.hearth(t, testAdminToken, "", "registry", "rm", "reg.example.com:5000", "--json"); code != 0 || !strings.Contains(out, `"deleted": "reg.example.com:5000"`) {
		t.Errorf("hearth registry rm --json = %d %q", code, out)
	}
}

// TestImageImportExport: an archive in, from a file and from stdin, and
// out, to stdout and to a file written whole or not at all.
func TestImageImportExport(t *testing.T) {
	api, url := newAPI(t)
	d := &imageDaemon{d: api, url: url}
	agent := daemontest.TokenA1
	var archive bytes.Buffer
	if err := tarball.Write(name.MustParseReference("app:1.0"), registry.DockerImage(t, registry.Layer(t, compression.GZip, testImageFiles)), &archive); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "app.tar")
	if err := os.WriteFile(file, archive.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := d.hearth(t, agent, "", "image", "import", file, "--name", "tools")
	if code != 0 || !strings.HasPrefix(out, "imported image tools\n") || !strings.Contains(errOut, ": unpacked ") {
		t.Fatalf("hearth image import FILE = %d %q %q", code, out, errOut)
	}
	out, _, code = d.hearth(t, agent, archive.String(), "image", "import", "-", "--name", "tools2", "--json")
	if code != 0 || !strings.HasSuffix(out, "\n") || !strings.Contains(out, `{"image":{"name":"tools2"`) {
		t.Errorf("hearth image import - --json = %d %q", code, out)
	}
	_, errOut, code = d.hearth(t, agent, "not a tarball", "image", "import", "-", "--name", "bad")
	if code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(errOut, "error: import bad") {
		t.Errorf("hearth image import of garbage = %d %q", code, errOut)
	}

	out, errOut, code = d.hearth(t, agent, "", "image", "export", "tools")
	if code != 0 || !isTar(out) {
		t.Errorf("hearth image export = %d, %d bytes %q; want a tar archive on stdout", code, len(out), errOut)
	}
	dest := filepath.Join(t.TempDir(), "out.tar")
	if _, errOut, code = d.hearth(t, agent, "", "image", "export", "tools", "--output", dest); code != 0 {
		t.Errorf("hearth image export --output = %d %q", code, errOut)
	}
	if b, err := os.ReadFile(dest); err != nil || !isTar(string(b)) {
		t.Errorf("the export's file = %d bytes, %v", len(b), err)
	}
	// A failed export leaves nothing behind.
	missing := filepath.Join(filepath.Dir(dest), "missing.tar")
	if _, _, code = d.hearth(t, agent, "", "image", "export", "nope", "--output", missing); code != sandbox.CodeNotFound.ExitCode() {
		t.Errorf("hearth image export nope = %d", code)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dest)); len(entries) != 1 {
		t.Errorf("after a failed export the directory holds %d files; want only the first export", len(entries))
	}
}

// isTar reports whether s begins with a tar header.
func isTar(s string) bool {
	_, err := tar.NewReader(strings.NewReader(s)).Next()
	return err == nil
}

// TestImageBuildSends: `hearth image build NAME -f DOCKERFILE CONTEXT`
// sends the Dockerfile, its arguments and the context as a tar (links as
// links, no FIFOs, owned by 0), and shows the build's steps.
func TestImageBuildSends(t *testing.T) {
	dir := t.TempDir()
	ctxDir := filepath.Join(dir, "ctx")
	for _, f := range []string{"ctx/src/main.go", "ctx/.dockerignore", "Dockerfile.dev"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("content of "+f), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(ctxDir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ctxDir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	var (
		mu                sync.Mutex
		query, dockerfile string
		buildArgs         string
		entries           []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/images/build" {
			writeFakeError(w, sandbox.Errorf(sandbox.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
			return
		}
		mu.Lock()
		defer mu.Unlock()
		query = r.URL.RawQuery
		buildArgs = ""
		mr, err := r.MultipartReader()
		if err != nil {
			writeFakeError(w, sandbox.Errorf(sandbox.CodeInvalidArgument, "%v", err))
			return
		}
		for p, err := mr.NextPart(); err == nil; p, err = mr.NextPart() {
			switch p.FormName() {
			case "dockerfile":
				b, _ := io.ReadAll(p)
				dockerfile = string(b)
				continue
			case "build_args":
				b, _ := io.ReadAll(p)
				buildArgs = string(b)
				continue
			}
			tr := tar.NewReader(p)
			for h, err := tr.Next(); err == nil; h, err = tr.Next() {
				entries = append(entries, h.Name+" "+string(h.Typeflag)+" "+h.Linkname+" "+strings.Repeat("!", h.Uid+h.Gid))
			}
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"phase":"step","step":1,"text":"FROM scratch"}`+"\n"+`{"phase":"step","step":2,"text":"COPY . /","cached":true}`+"\n"+`{"image":{"name":"app","digest":"sha256:00"}}`+"\n")
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"HEARTH_URL": srv.URL, "HEARTH_TOKEN": "hearth_test"}
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"image", "build", "app", "-f", filepath.Join(dir, "Dockerfile.dev"), "--build-arg", "V=1", "--build-arg", "W=x=y", ctxDir}, func(k string) string { return env[k] }, nil, &out, &errb)
	if code != 0 || !strings.HasPrefix(out.String(), "built image app\n") || errb.String() != "step 1: FROM scratch\nstep 2: COPY . / (cached)\n" {
		t.Fatalf("hearth image build = %d %q %q", code, out.String(), errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{".dockerignore 0  ", "link 2 /etc/shadow ", "src/ 5  ", "src/main.go 0  "}
	if query != "name=app" || dockerfile != "content of Dockerfile.dev" || buildArgs != `{"V":"1","W":"x=y"}` || strings.Join(entries, "|") != strings.Join(want, "|") {
		t.Errorf("hearth image build sent ?%s, the Dockerfile %q, the arguments %s and the context %q; want %q", query, dockerfile, buildArgs, entries, want)
	}

}

// TestImageBuild builds an image through the API: FROM an image of the
// tenant's, COPY from the context and ENV, its steps on stderr, and a
// sandbox made from it has the copied file.
func TestImageBuild(t *testing.T) {
	api, url := newAPI(t)
	d := &imageDaemon{d: api, url: url}
	var archive bytes.Buffer
	if err := tarball.Write(name.MustParseReference("base:1"), registry.DockerImage(t, registry.Layer(t, compression.GZip, testImageFiles)), &archive); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := d.hearth(t, daemontest.TokenA1, archive.String(), "image", "import", "-", "--name", "base"); code != 0 {
		t.Fatalf("hearth image import = %d %q", code, errOut)
	}
	dir := t.TempDir()
	for f, content := range map[string]string{"Dockerfile": "FROM base\nARG GREETING=hi\nCOPY notes.txt /root/notes.txt\nENV GREETING=$GREETING\n", "notes.txt": "built\n"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := d.hearth(t, daemontest.TokenA1, "", "image", "build", "built", dir, "--build-arg", "GREETING=hello", "--network", "none")
	if code != 0 || !strings.HasPrefix(out, "built image built\n") || !strings.Contains(out, "GREETING=hello") ||
		!strings.Contains(errOut, "step 1: ") || !strings.Contains(errOut, "COPY notes.txt /root/notes.txt") {
		t.Fatalf("hearth image build = %d %q %q", code, out, errOut)
	}
	if _, errOut, code := d.hearth(t, daemontest.TokenA1, "", "create", "box", "--image", "built"); code != 0 {
		t.Fatalf("hearth create --image built = %d %q", code, errOut)
	}
	home := api.Home(t, daemontest.AgentA1, "box")
	if b, err := os.ReadFile(filepath.Join(home, "notes.txt")); err != nil || string(b) != "built\n" {
		t.Errorf("the built image's /root/notes.txt in a sandbox (home %s) = %q, %v", home, b, err)
	}
	_, errOut, code = d.hearth(t, daemontest.TokenA1, "Dockerfile: nope", "image", "build", "bad", dir, "-f", "-")
	if code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(errOut, "error: ") {
		t.Errorf("hearth image build of a bad Dockerfile = %d %q; want invalid_argument", code, errOut)
	}
}

// TestImageUsage: the image and registry verbs' usage errors, which need
// no daemon.
func TestImageUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"image"}, {"image", "frob"}, {"image", "pull"}, {"image", "pull", "a", "b"},
		{"image", "import", "f"}, {"image", "import", "--name", "x"}, {"image", "export"},
		{"image", "create", "x"}, {"image", "create", "x", "--from", "@ck"}, {"image", "inspect"}, {"image", "rm"}, {"image", "public"},
		{"image", "build", "-f", "Dockerfile"}, {"image", "build", "--build-arg", "A=1"}, {"image", "build", "app", "--data-dir", dir}, {"image", "build", "app", filepath.Join(dir, "nope")},
		{"image", "build", "app", dir}, {"image", "build", "app", dir, "extra"},
		{"registry"}, {"registry", "login", "h", "--password-stdin"}, {"registry", "login", "h", "--username", "u"}, {"registry", "login", "--password-stdin", "--username", "u"},
		{"registry", "list", "x"}, {"registry", "rm"},
	} {
		var out, errb bytes.Buffer
		code := run(t.Context(), args, func(string) string { return "http://127.0.0.1:1" }, nil, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), "error: ") {
			t.Errorf("hearth %q = %d %q, want a usage error", args, code, errb.String())
		}
	}
	// An archive is never written to, nor read from, a terminal.
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var errb bytes.Buffer
	if code := run(t.Context(), []string{"image", "export", "app"}, noEnv, nil, ptmx, &errb); code != exitUsage || !strings.Contains(errb.String(), "to a terminal") {
		t.Errorf("hearth image export to a terminal = %d %q; want a usage error", code, errb.String())
	}
	errb.Reset()
	if code := run(t.Context(), []string{"image", "import", "-", "--name", "app"}, noEnv, ptmx, io.Discard, &errb); code != exitUsage || !strings.Contains(errb.String(), "from a terminal") {
		t.Errorf("hearth image import - from a terminal = %d %q; want a usage error", code, errb.String())
	}

	var out bytes.Buffer
	if code := run(t.Context(), []string{"image", "-h"}, noEnv, nil, &out, io.Discard); code != 0 {
		t.Fatalf("hearth image -h = %d", code)
	}
	for _, op := range []string{"pull", "import", "export", "create", "build", "list", "inspect", "rm", "public"} {
		if !strings.Contains(out.String(), "\n  "+op+" ") {
			t.Errorf("hearth image -h does not list %s:\n%s", op, out.String())
		}
	}
}

// TestProgressPrinter: off a terminal, a line per step; on one, the bytes
// of a download redrawn in one line, ended before the next step.
func TestProgressPrinter(t *testing.T) {
	events := []sandbox.ImageProgress{
		{Phase: "resolve", Text: "reg/app:1"},
		{Phase: "layer", Layer: "sha256:0123456789abcdef", Bytes: 1 << 20, Total: 2 << 20},
		{Phase: "layer", Layer: "sha256:0123456789abcdef", Bytes: 2 << 20, Total: 2 << 20},
		{Phase: "layer", Layer: "sha256:fedcba9876543210", Total: 512, Cached: true},
		{Phase: "unpack", Layer: "sha256:0123456789abcdef", Bytes: 3 << 20},
		{Phase: "layer", Layer: "sha256:aaaaaaaaaaaaaaaa", Bytes: 10, Total: 20},
	}
	for _, tt := range []struct {
		tty  bool
		want string
	}{
		{false, "resolving reg/app:1\nlayer 0123456789ab: downloaded 2 MiB\nlayer fedcba987654: already here (512 B)\nlayer 0123456789ab: unpacked 3 MiB\n"},
		{true, "\r\x1b[Kresolving reg/app:1\n\r\x1b[Klayer 0123456789ab: 1 MiB of 2 MiB\r\x1b[Klayer 0123456789ab: downloaded 2 MiB\n" +
			"\r\x1b[Klayer fedcba987654: already here (512 B)\n\r\x1b[Klayer 0123456789ab: unpacked 3 MiB\n\r\x1b[Klayer aaaaaaaaaaaa: 10 B of 20 B\n"},
	} {
		var b bytes.Buffer
		p := &progressPrinter{w: &b, tty: tt.tty}
		for _, ev := range events {
			p.event(ev)
		}
		p.end()
		if b.String() != tt.want {
			t.Errorf("progress (tty %v) =\n%q\nwant\n%q", tt.tty, b.String(), tt.want)
		}
	}
}

// TestIsTerminal: a pseudo-terminal is a terminal; files and pipes are
// not.
func TestIsTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if !isTerminal(ptmx) {
		t.Error("isTerminal(/dev/ptmx) = false")
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, v := range []any{f, r, w, &bytes.Buffer{}, nil} {
		if isTerminal(v) {
			t.Errorf("isTerminal(%T) = true", v)
		}
	}
}
