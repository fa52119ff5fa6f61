package httpapi_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
	"github.com/hearth/hearth/testutil/testenv"
)

// Tokens of the image tests besides auditEnv's: an agent of tenant t3,
// whose disk budget holds no image.
const tokenC1 = "hearth_testtokenforagentc1oft3"

// imageFiles are the files of the test images: a user to run as, and a
// file to find.
var imageFiles = map[string]string{
	"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000::/home/sandbox:/bin/sh\n",
	"etc/group":       "root:x:0:\nsandbox:x:1000:\n",
	"home/sandbox/hi": "hello from the image\n",
}

// dockerArchive is an image of imageFiles, and of a layer of random
// bytes when fresh, as `docker save` writes it.
func dockerArchive(t *testing.T, fresh ...int) []byte {
	t.Helper()
	layers := []v1.Layer{registry.Layer(t, compression.GZip, imageFiles)}
	for _, size := range fresh {
		layers = append(layers, registry.RandomLayer(t, compression.GZip, size))
	}
	img := registry.DockerImage(t, layers...)
	var buf bytes.Buffer
	if err := tarball.Write(name.MustParseReference("app:1.0"), img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// call sends one request with header h (Authorization from token) and
// returns the response and its body.
func call(t *testing.T, method, url, token string, h http.Header, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// streamLines splits a progress stream into its lines, each a JSON object
// with its keys, and checks its framing.
func streamLines(t *testing.T, resp *http.Response, body []byte) []map[string]json.RawMessage {
	t.Helper()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("answer %d %s: %s; want 200 application/x-ndjson", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var lines []map[string]json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var line map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q of the stream is not a JSON object: %v", sc.Text(), err)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 || !bytes.HasSuffix(body, []byte("\n")) {
		t.Fatalf("stream %q: want lines, each ended by a newline", body)
	}
	return lines
}

// lastImage checks that the stream's lines are progress events and then
// the image, and returns the events' phases and the image.
func lastImage(t *testing.T, lines []map[string]json.RawMessage) ([]string, sandbox.Image) {
	t.Helper()
	var phases []string
	for _, l := range lines[:len(lines)-1] {
		var ev sandbox.ImageProgress
		raw, _ := json.Marshal(l)
		if _, ok := l["phase"]; !ok || json.Unmarshal(raw, &ev) != nil {
			t.Fatalf("stream line %s is not a progress event", raw)
		}
		phases = append(phases, ev.Phase)
	}
	var img sandbox.Image
	last := lines[len(lines)-1]
	if len(last) != 1 || last["image"] == nil || json.Unmarshal(last["image"], &img) != nil {
		t.Fatalf("the stream's last line is %v; want {\"image\": ...}", last)
	}
	return phases, img
}

func decodeImage(t *testing.T, resp *http.Response, body []byte, status int) sandbox.Image {
	t.Helper()
	var img sandbox.Image
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &img) != nil {
		t.Fatalf("answer %d %s: %s; want %d and an image", resp.StatusCode, resp.Header.Get("Content-Type"), body, status)
	}
	return img
}

// TestImageImport: an archive in the body becomes the tenant's image, with
// a progress stream when asked (by the query or Accept) and a plain answer
// otherwise; the catalog shows it to its tenant only; the query and the
// archive's errors; a refusal after progress began is the stream's last
// line; the audit log names each call.
func TestImageImport(t *testing.T) {
	e := auditEnv(t, nil)
	archive := dockerArchive(t)

	resp, body := call(t, "POST", e.url+"/v1/images/import?name=tools&progress=true", tokenA1, nil, bytes.NewReader(archive))
	phases, img := lastImage(t, streamLines(t, resp, body))
	if !slices.Contains(phases, "unpack") || phases[len(phases)-1] != "done" {
		t.Errorf("import's progress phases = %v; want unpack … done", phases)
	}
	if img.Name != "tools" || img.Tenant != "t1" || img.Source != sandbox.ImageSourceImport || !img.Current || !strings.HasPrefix(img.Digest, "sha256:") {
		t.Errorf("imported image = %+v", img)
	}
	resp, body = call(t, "POST", e.url+"/v1/images/import?name=tools2", tokenA1, http.Header{"Accept": {"application/json, application/x-ndjson"}}, bytes.NewReader(archive))
	if _, img := lastImage(t, streamLines(t, resp, body)); img.Name != "tools2" {
		t.Errorf("import accepting NDJSON = %+v", img)
	}
	resp, body = call(t, "POST", e.url+"/v1/images/import?name=plain", tokenA1, nil, bytes.NewReader(archive))
	if img := decodeImage(t, resp, body, http.StatusOK); img.Name != "plain" || img.Digest == "" {
		t.Errorf("import without progress = %+v", img)
	}

	// The catalog: t1's agents see t1's images; t2's see none of them.
	var list struct{ Images []sandbox.Image }
	resp, body = testenv.Do(t, "GET", e.url+"/v1/images", tokenA2, "")
	if json.Unmarshal(body, &list); resp.StatusCode != 200 || len(list.Images) != 3 {
		t.Errorf("GET /v1/images as a2 = %d %s; want the three images", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "GET", e.url+"/v1/images", tokenB1, "")
	if string(body) != "{\"images\":[]}\n" {
		t.Errorf("GET /v1/images as t2's b1 = %d %s; want none", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "GET", e.url+"/v1/image?name=tools", tokenA1, "")
	if got := decodeImage(t, resp, body, http.StatusOK); got.Digest != img.Digest || got.Name != "tools" {
		t.Errorf("GET /v1/image?name=tools = %+v", got)
	}
	resp, body = testenv.Do(t, "GET", e.url+"/v1/image?name=tools", tokenB1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound {
		t.Errorf("GET another tenant's image = %s; want not_found", got.Code)
	}

	for _, tt := range []struct {
		name, query, body string
		header            http.Header
		code              sandbox.Code
		says              string
	}{
		{"no name", "", "x", nil, sandbox.CodeInvalidArgument, `missing query parameter "name"`},
		{"unknown parameter", "?name=x&nme=y", "x", nil, sandbox.CodeInvalidArgument, `unknown query parameter "nme"`},
		{"bad progress", "?name=x&progress=maybe", "x", nil, sandbox.CodeInvalidArgument, "not a boolean"},
		{"bad name", "?name=Bad_Name", "x", nil, sandbox.CodeInvalidArgument, "Bad_Name"},
		{"not an archive", "?name=x&progress=true", "not a tarball", nil, sandbox.CodeInvalidArgument, "import x"},
		{"not an archive, accepting NDJSON", "?name=x", "not a tarball", http.Header{"Accept": {"application/x-ndjson"}}, sandbox.CodeInvalidArgument, "import x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Refused before any progress: the status and the error body.
			resp, body := call(t, "POST", e.url+"/v1/images/import"+tt.query, tokenA1, tt.header, strings.NewReader(tt.body))
			if got := errorOf(t, resp, body); got.Code != tt.code || !strings.Contains(got.Message, tt.says) {
				t.Errorf("import%s = %d %s; want %s saying %q", tt.query, resp.StatusCode, body, tt.code, tt.says)
			}
		})
	}

	// Tenant t3's budget holds 1 MiB of disk. An archive larger than
	// that is refused as it is spooled, before any progress; one whose
	// compressed layer fits but unpacks to more (2 MiB of text) is
	// refused once unpacked, as the stream's last line.
	if _, err := e.svc.Tenancy.CreateTenant(t.Context(), operatorP, sandbox.Tenant{Name: "t3", Allocation: sandbox.Resources{MilliCPU: 1000, MemoryBytes: 1 << 30, DiskBytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	addToken(t, e, "tok-c1", tokenC1, sandbox.Principal{Tenant: "t3", Agent: "c1", Role: sandbox.RoleAgent})
	resp, body = call(t, "POST", e.url+"/v1/images/import?name=big&progress=1", tokenC1, nil, bytes.NewReader(dockerArchive(t, 2<<20)))
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeBudgetExceeded || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("import of an archive over the budget = %d %s; want 429 budget_exceeded", resp.StatusCode, body)
	}
	text := registry.Layer(t, compression.GZip, map[string]string{"text": strings.Repeat("hearth ", 300000)})
	var bomb bytes.Buffer
	if err := tarball.Write(name.MustParseReference("zeros:1"), registry.DockerImage(t, text), &bomb); err != nil {
		t.Fatal(err)
	}
	resp, body = call(t, "POST", e.url+"/v1/images/import?name=big&progress=1", tokenC1, nil, &bomb)
	lines := streamLines(t, resp, body)
	last := lines[len(lines)-1]
	var failed sandbox.Error
	if len(lines) < 2 || last["error"] == nil || json.Unmarshal(last["error"], &failed) != nil || failed.Code != sandbox.CodeBudgetExceeded || failed.Hint == "" {
		t.Errorf("import over the budget streamed %s; want progress, then the budget_exceeded error as the last line", body)
	}

	var verbs []string
	for _, ev := range stored(t, e) {
		if strings.HasPrefix(ev.Verb, "image.") {
			verbs = append(verbs, ev.Verb+" "+string(ev.Code))
		}
	}
	want := []string{"image.import ", "image.import ", "image.import ", "image.list ", "image.list ", "image.get ", "image.get not_found",
		"image.import invalid_argument", "image.import invalid_argument", "image.import invalid_argument", "image.import invalid_argument",
		"image.import invalid_argument", "image.import invalid_argument", "image.import budget_exceeded", "image.import budget_exceeded"}
	slices.Sort(verbs)
	slices.Sort(want)
	if !slices.Equal(verbs, want) {
		t.Errorf("audited %q\nwant %q", verbs, want)
	}
}

// TestImagePull pulls from a real registry: the progress stream, the
// plain answer, the client's calls over the same API, and the errors.
func TestImagePull(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	ref := reg.Push(t, "app:1.0", registry.Image(t, registry.Layer(t, compression.GZip, imageFiles), registry.RandomLayer(t, compression.GZip, 3<<20)))
	e := auditEnv(t, nil)
	// Without a login for it, t1's agent may not have the daemon pull from
	// a registry on loopback.
	resp, body := testenv.Do(t, "POST", e.url+"/v1/images/pull", tokenA1, `{"ref":"`+ref+`"}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "private network") {
		t.Fatalf("pull from loopback without a login = %d %s; want 403 saying why", resp.StatusCode, body)
	}
	e.d.TrustRegistry(t, reg.Host)

	resp, body = testenv.Do(t, "POST", e.url+"/v1/images/pull", tokenA1, `{"ref":"`+ref+`","progress":true}`)
	phases, img := lastImage(t, streamLines(t, resp, body))
	for _, p := range []string{"resolve", "layer", "unpack", "done"} {
		if !slices.Contains(phases, p) {
			t.Errorf("pull's progress phases = %v; want %s among them", phases, p)
		}
	}
	if img.Name != ref || img.Source != sandbox.ImageSourceRegistry || img.Tenant != "t1" {
		t.Errorf("pulled image = %+v", img)
	}

	// The client, over the same API: progress as it comes, then the image.
	var events []sandbox.ImageProgress
	got, err := e.client().Images().Pull(t.Context(), ref, client.PullOptions{Progress: func(ev sandbox.ImageProgress) { events = append(events, ev) }})
	if err != nil || got.Digest != img.Digest || len(events) == 0 || events[len(events)-1].Phase != "done" {
		t.Errorf("client Pull = %+v, %v after %+v", got, err, events)
	}
	resp, body = testenv.Do(t, "POST", e.url+"/v1/images/pull", tokenA1, `{"ref":"`+ref+`"}`)
	if got := decodeImage(t, resp, body, http.StatusOK); got.Digest != img.Digest {
		t.Errorf("pull without progress = %+v; want the same version", got)
	}

	// A tenant admin's login for the registry that requires TLS: an
	// insecure pull would send its password in the clear, and is refused.
	resp, body = testenv.Do(t, "PUT", e.url+"/v1/registries/"+reg.Host, tokenAdminT1, `{"username":"me","password":"pw"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/registries/%s = %d %s", reg.Host, resp.StatusCode, body)
	}
	for _, tt := range []struct {
		name, body string
		code       sandbox.Code
		says       string
	}{
		{"no ref", `{}`, sandbox.CodeInvalidArgument, `missing field "ref"`},
		{"unknown field", `{"ref":"x","tag":"y"}`, sandbox.CodeInvalidArgument, "unknown field"},
		{"bad ref", `{"ref":"Not A Ref"}`, sandbox.CodeInvalidArgument, "image name"},
		{"no such tag", `{"ref":"` + reg.Ref("app:9.9") + `"}`, sandbox.CodeNotFound, "app:9.9"},
		{"insecure without a host", `{"ref":"app:1.0","insecure":true}`, sandbox.CodeInvalidArgument, "names its registry"},
		{"insecure against the login", `{"ref":"` + ref + `","insecure":true}`, "failed_precondition", "requires TLS"},
		{"insecure, refused before any progress", `{"ref":"` + ref + `","insecure":true,"progress":true}`, "failed_precondition", "requires TLS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, "POST", e.url+"/v1/images/pull", tokenA1, tt.body)
			if got := errorOf(t, resp, body); got.Code != tt.code || !strings.Contains(got.Message, tt.says) {
				t.Errorf("pull %s = %d %s; want %s saying %q", tt.body, resp.StatusCode, body, tt.code, tt.says)
			}
		})
	}
}

// TestRegistryLogins drives /v1/registries: who may log in and out, what
// a login answers (never the password), its errors, and the audit verbs.
func TestRegistryLogins(t *testing.T) {
	e := auditEnv(t, nil)
	const host = "registry.example.com:5000"
	resp, body := testenv.Do(t, "PUT", e.url+"/v1/registries/"+host, tokenAdminT1, `{"username":"me","password":"s3cret-pw","insecure":true}`)
	var login sandbox.RegistryLogin
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &login) != nil || login.Host != host || login.Tenant != "t1" || login.Username != "me" || !login.Insecure {
		t.Fatalf("PUT /v1/registries/%s = %d %s", host, resp.StatusCode, body)
	}
	if strings.Contains(string(body), "s3cret-pw") {
		t.Errorf("the login's answer holds its password: %s", body)
	}
	for _, tt := range []struct {
		name, path, token, body string
		code                    sandbox.Code
	}{
		{"as an agent", "/v1/registries/" + host, tokenA1, `{"username":"me","password":"pw"}`, sandbox.CodePermissionDenied},
		{"no password", "/v1/registries/" + host, tokenAdminT1, `{"username":"me"}`, sandbox.CodeInvalidArgument},
		{"no username", "/v1/registries/" + host, tokenAdminT1, `{"password":"pw"}`, sandbox.CodeInvalidArgument},
		{"a CA that is not PEM", "/v1/registries/" + host, tokenAdminT1, `{"username":"me","password":"pw","ca":"nope"}`, sandbox.CodeInvalidArgument},
		{"a host that is none", "/v1/registries/me@host", tokenAdminT1, `{"username":"me","password":"pw"}`, sandbox.CodeInvalidArgument},
		{"a query", "/v1/registries/" + host + "?tenant=t2", tokenAdminT1, `{"username":"me","password":"pw"}`, sandbox.CodeInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, "PUT", e.url+tt.path, tt.token, tt.body)
			if got := errorOf(t, resp, body); got.Code != tt.code {
				t.Errorf("PUT %s %s = %s %q; want %s", tt.path, tt.body, got.Code, got.Message, tt.code)
			}
		})
	}

	// Every agent of the tenant sees its logins; another tenant does not.
	list, err := e.client().Admin().RegistryLogins(t.Context())
	if err != nil || len(list) != 1 || list[0].Host != host || list[0].Username != "me" {
		t.Errorf("RegistryLogins as a1 = %+v, %v", list, err)
	}
	resp, body = testenv.Do(t, "GET", e.url+"/v1/registries", tokenB1, "")
	if string(body) != "{\"registries\":[]}\n" {
		t.Errorf("GET /v1/registries as t2's b1 = %d %s; want none", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "DELETE", e.url+"/v1/registries/"+host, tokenA1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodePermissionDenied {
		t.Errorf("DELETE as an agent = %s", got.Code)
	}
	admin := client.New(e.url, tokenAdminT1, nil).Admin()
	if err := admin.RegistryLogout(t.Context(), host); err != nil {
		t.Errorf("RegistryLogout = %v", err)
	}
	if err := admin.RegistryLogout(t.Context(), host); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("RegistryLogout again = %v; want not_found", err)
	}

	var verbs []string
	for _, ev := range stored(t, e) {
		if strings.HasPrefix(ev.Verb, "registry.") && !slices.Contains(verbs, ev.Verb) {
			verbs = append(verbs, ev.Verb)
		}
	}
	if slices.Sort(verbs); !slices.Equal(verbs, []string{"registry.list", "registry.login", "registry.logout"}) {
		t.Errorf("audited verbs %q", verbs)
	}
}

// TestImageFromSandbox: an image made from a sandbox's disk, now and at
// a checkpoint, holds its files, and a sandbox created from it has them.
func TestImageFromSandbox(t *testing.T) {
	e := auditEnv(t, nil)
	e.create(t, "box")
	if err := os.WriteFile(filepath.Join(e.home(t, "box"), "notes"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck, err := e.client().Checkpoint(t.Context(), "box", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.home(t, "box"), "notes"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body := testenv.Do(t, "POST", e.url+"/v1/images", tokenA1, `{"name":"now","from":"box"}`)
	if img := decodeImage(t, resp, body, http.StatusCreated); img.Name != "now" || img.Source != sandbox.ImageSourceSandbox {
		t.Errorf("POST /v1/images from box = %+v", img)
	}
	img, err := e.client().Images().Create(t.Context(), "then", "box", ck.ID)
	if err != nil || img.Name != "then" || !strings.Contains(img.Ref, ck.ID) {
		t.Fatalf("Create(then, box, %s) = %+v, %v", ck.ID, img, err)
	}
	for image, want := range map[string]string{"now": "after", "then": "before"} {
		if _, _, err := e.client().Create(t.Context(), sandbox.CreateRequest{Name: "from-" + image, Image: image}); err != nil {
			t.Fatalf("create from %s: %v", image, err)
		}
		if b, err := os.ReadFile(filepath.Join(e.home(t, "from-"+image), "notes")); string(b) != want {
			t.Errorf("notes in a sandbox from image %s = %q, %v; want %q", image, b, err, want)
		}
	}

	for _, tt := range []struct {
		name, body string
		code       sandbox.Code
	}{
		{"no name", `{"from":"box"}`, sandbox.CodeInvalidArgument},
		{"no sandbox", `{"name":"x"}`, sandbox.CodeInvalidArgument},
		{"no such sandbox", `{"name":"x","from":"nope"}`, sandbox.CodeNotFound},
		{"no such checkpoint", `{"name":"x","from":"box","checkpoint":"ck-nope"}`, sandbox.CodeNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, "POST", e.url+"/v1/images", tokenA1, tt.body)
			if got := errorOf(t, resp, body); got.Code != tt.code {
				t.Errorf("POST /v1/images %s = %s %q; want %s", tt.body, got.Code, got.Message, tt.code)
			}
		})
	}
	// Another tenant's sandbox is not_found, and the audit log names it.
	resp, body = testenv.Do(t, "POST", e.url+"/v1/images", tokenB1, `{"name":"x","from":"t1/agent-a1-box"}`)
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound {
		t.Errorf("an image from another tenant's sandbox = %s", got.Code)
	}
	named := false
	for _, ev := range stored(t, e) {
		named = named || ev.Verb == "image.create" && ev.Sandbox != "" && ev.Code == ""
	}
	if !named {
		t.Error("no audit event image.create names its sandbox")
	}
}

// TestImagePublicAndRemove: only an operator publishes (its own
// tenant's images), which every tenant then sees; only a tenant admin
// removes, and not while a sandbox uses the image.
func TestImagePublicAndRemove(t *testing.T) {
	e := auditEnv(t, nil)
	archive := dockerArchive(t)
	for _, token := range []string{tokenA1, tokenOperator} {
		if resp, body := call(t, "POST", e.url+"/v1/images/import?name=base", token, nil, bytes.NewReader(archive)); resp.StatusCode != http.StatusOK {
			t.Fatalf("import = %d %s", resp.StatusCode, body)
		}
	}
	for _, tt := range []struct {
		name, token, body string
		code              sandbox.Code
	}{
		{"as an agent", tokenA1, `{"public":true}`, sandbox.CodePermissionDenied},
		{"as a tenant admin", tokenAdminT1, `{"public":true}`, sandbox.CodePermissionDenied},
		{"without public", tokenOperator, `{}`, sandbox.CodeInvalidArgument},
		{"public not a boolean", tokenOperator, `{"public":"yes"}`, sandbox.CodeInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, "POST", e.url+"/v1/image/public?name=base", tt.token, tt.body)
			if got := errorOf(t, resp, body); got.Code != tt.code {
				t.Errorf("POST /v1/image/public %s = %s %q; want %s", tt.body, got.Code, got.Message, tt.code)
			}
		})
	}
	img, err := client.New(e.url, tokenOperator, nil).Images().SetPublic(t.Context(), "base", true)
	if err != nil || !img.Public || img.Tenant != sandbox.SystemTenant {
		t.Fatalf("SetPublic(base) as the operator = %+v, %v", img, err)
	}
	// t2 sees the system tenant's public base; t1 sees its own base first.
	got, err := client.New(e.url, tokenB1, nil).Images().Get(t.Context(), "base")
	if err != nil || got.Tenant != sandbox.SystemTenant {
		t.Errorf("Get(base) as t2's b1 = %+v, %v; want the public one", got, err)
	}
	if got, err := e.client().Images().Get(t.Context(), "base"); err != nil || got.Tenant != "t1" {
		t.Errorf("Get(base) as t1's a1 = %+v, %v; want its own", got, err)
	}

	e.client().Create(t.Context(), sandbox.CreateRequest{Name: "user", Image: "base"})
	admin := client.New(e.url, tokenAdminT1, nil).Images()
	if err := e.client().Images().Remove(t.Context(), "base"); !sandbox.IsCode(err, sandbox.CodePermissionDenied) {
		t.Errorf("Remove(base) as an agent = %v; want permission_denied", err)
	}
	resp, body := testenv.Do(t, "DELETE", e.url+"/v1/image?name=base", tokenAdminT1, "")
	if got := errorOf(t, resp, body); resp.StatusCode != http.StatusConflict || got.Code != "failed_precondition" || got.Details["sandbox"] == nil {
		t.Errorf("DELETE an image in use = %d %s; want failed_precondition naming the sandbox", resp.StatusCode, body)
	}
	if err := e.client().Destroy(t.Context(), "user"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Remove(t.Context(), "base"); err != nil {
		t.Errorf("Remove(base) as a tenant admin = %v", err)
	}
	// t1 now sees the public base.
	if got, err := e.client().Images().Get(t.Context(), "base"); err != nil || got.Tenant != sandbox.SystemTenant {
		t.Errorf("Get(base) after removing t1's = %+v, %v; want the public one", got, err)
	}
}

// TestImageExport: the archive is streamed as an OCI archive, named for
// the image; an error before it is the API's error.
func TestImageExport(t *testing.T) {
	e := auditEnv(t, nil)
	if resp, body := call(t, "POST", e.url+"/v1/images/import?name=127.0.0.1:5000/app:1.0", tokenA1, nil, bytes.NewReader(dockerArchive(t))); resp.StatusCode != http.StatusOK {
		t.Fatalf("import = %d %s", resp.StatusCode, body)
	}
	resp, body := testenv.Do(t, "GET", e.url+"/v1/image/export?name=127.0.0.1:5000/app:1.0", tokenA1, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-tar" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename="1.0.tar"` {
		t.Fatalf("export = %d %v %.200s", resp.StatusCode, resp.Header, body)
	}
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names[h.Name] = true
	}
	if !names["oci-layout"] || !names["index.json"] {
		t.Errorf("the export holds %v; want an OCI layout (oci-layout, index.json)", names)
	}
	// The archive reads back as an image.
	resp, body2 := call(t, "POST", e.url+"/v1/images/import?name=again", tokenA1, nil, bytes.NewReader(body))
	if img := decodeImage(t, resp, body2, http.StatusOK); img.Name != "again" {
		t.Errorf("import of the export = %+v", img)
	}

	resp, body = testenv.Do(t, "GET", e.url+"/v1/image/export?name=nope", tokenA1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound || resp.Header.Get("Content-Disposition") != "" {
		t.Errorf("export of nothing = %s %v; want not_found, no attachment", got.Code, resp.Header)
	}
	resp, body = testenv.Do(t, "GET", e.url+"/v1/image/export", tokenA1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeInvalidArgument {
		t.Errorf("export without a name = %s", got.Code)
	}
	var out bytes.Buffer
	if err := e.client().Images().Export(t.Context(), "127.0.0.1:5000/app:1.0", &out); err != nil || out.Len() == 0 {
		t.Errorf("client Export = %d bytes, %v", out.Len(), err)
	}
}
