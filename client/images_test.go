package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// TestImageCalls: what the image and registry calls without a stream
// send, and what they make of the answers.
func TestImageCalls(t *testing.T) {
	img := sandbox.Image{Name: "127.0.0.1:5000/app:1.0", Tenant: "acme", Digest: "sha256:" + strings.Repeat("a", 64), Source: sandbox.ImageSourceRegistry, Current: true}
	login := sandbox.RegistryLogin{Tenant: "acme", Host: "reg.example.com:5000", Username: "me", Insecure: true}
	var (
		mu   sync.Mutex
		body map[string]any
	)
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		body = nil
		json.Unmarshal(b, &body)
		mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "GET /v1/images":
			writeJSON(w, 200, map[string]any{"images": []sandbox.Image{img, {Name: "tools"}}})
		case "GET /v1/image", "POST /v1/image/public", "POST /v1/images":
			writeJSON(w, 200, img)
		case "DELETE /v1/image":
			writeJSON(w, 409, map[string]any{"error": map[string]any{"code": "failed_precondition", "message": "in use", "hint": "destroy them"}})
		case "PUT /v1/registries/reg.example.com:5000":
			writeJSON(w, 200, login)
		case "GET /v1/registries":
			writeJSON(w, 200, map[string]any{"registries": []sandbox.RegistryLogin{login}})
		case "DELETE /v1/registries/reg.example.com:5000":
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, 404, map[string]any{"error": map[string]any{"code": "not_found", "message": "no route"}})
		}
	})
	c := client.New(d.URL, "tok", nil)
	ctx := ctxT(t)
	sentBody := func() map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return body
	}
	want := func(call string, wantReq recorded, wantBody map[string]any) {
		t.Helper()
		got := d.last(t)
		if got.Method != wantReq.Method || got.RawPath != wantReq.RawPath || got.Query != wantReq.Query {
			t.Errorf("%s sent %s %s?%s; want %s %s?%s", call, got.Method, got.RawPath, got.Query, wantReq.Method, wantReq.RawPath, wantReq.Query)
		}
		if b := sentBody(); !reflect.DeepEqual(b, wantBody) {
			t.Errorf("%s sent the body %v; want %v", call, b, wantBody)
		}
	}

	list, err := c.Images().List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != img.Name || list[1].Name != "tools" {
		t.Errorf("List = %+v, %v", list, err)
	}
	want("List", recorded{Method: "GET", RawPath: "/v1/images"}, nil)

	got, err := c.Images().Get(ctx, img.Name)
	if err != nil || got.Digest != img.Digest {
		t.Errorf("Get = %+v, %v", got, err)
	}
	want("Get", recorded{Method: "GET", RawPath: "/v1/image", Query: "name=127.0.0.1%3A5000%2Fapp%3A1.0"}, nil)

	if _, err := c.Images().SetPublic(ctx, "tools", false); err != nil {
		t.Errorf("SetPublic = %v", err)
	}
	want("SetPublic", recorded{Method: "POST", RawPath: "/v1/image/public", Query: "name=tools"}, map[string]any{"public": false})

	if _, err := c.Images().Create(ctx, "tools", "box", "ck1"); err != nil {
		t.Errorf("Create = %v", err)
	}
	want("Create", recorded{Method: "POST", RawPath: "/v1/images"}, map[string]any{"name": "tools", "from": "box", "checkpoint": "ck1"})
	if _, err := c.Images().Create(ctx, "tools", "box", ""); err != nil {
		t.Errorf("Create = %v", err)
	}
	want("Create without a checkpoint", recorded{Method: "POST", RawPath: "/v1/images"}, map[string]any{"name": "tools", "from": "box"})

	// A code this client does not know keeps its words and takes the
	// status's code.
	err = c.Images().Remove(ctx, "tools")
	var e *sandbox.Error
	if !errors.As(err, &e) || e.Message != "in use" || e.Code != "failed_precondition" && e.Details["server_code"] != "failed_precondition" {
		t.Errorf("Remove = %#v; want the daemon's error", err)
	}
	want("Remove", recorded{Method: "DELETE", RawPath: "/v1/image", Query: "name=tools"}, nil)

	l, err := c.Admin().RegistryLogin(ctx, sandbox.RegistryLogin{Tenant: "ignored", Host: "reg.example.com:5000", Username: "me", Insecure: true}, "s3cret")
	if err != nil || l != login {
		t.Errorf("RegistryLogin = %+v, %v; want %+v", l, err, login)
	}
	want("RegistryLogin", recorded{Method: "PUT", RawPath: "/v1/registries/reg.example.com:5000"}, map[string]any{"username": "me", "password": "s3cret", "insecure": true})
	logins, err := c.Admin().RegistryLogins(ctx)
	if err != nil || len(logins) != 1 || logins[0] != login {
		t.Errorf("RegistryLogins = %+v, %v", logins, err)
	}
	want("RegistryLogins", recorded{Method: "GET", RawPath: "/v1/registries"}, nil)
	if err := c.Admin().RegistryLogout(ctx, "reg.example.com:5000"); err != nil {
		t.Errorf("RegistryLogout = %v", err)
	}
	want("RegistryLogout", recorded{Method: "DELETE", RawPath: "/v1/registries/reg.example.com:5000"}, nil)
}

// progressDaemon answers an image call as the API does: with a progress
// stream when the request accepts one (events, then last), else with the
// image alone. It records the request's headers and body.
type progressDaemon struct {
	*fakeDaemon
	mu     sync.Mutex
	header http.Header
	body   []byte
}

func newProgressDaemon(t *testing.T, events []sandbox.ImageProgress, last string) *progressDaemon {
	pd := &progressDaemon{}
	pd.fakeDaemon = newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		pd.mu.Lock()
		pd.header, pd.body = r.Header.Clone(), b
		pd.mu.Unlock()
		if r.Header.Get("Accept") != "application/x-ndjson" {
			writeJSON(w, 200, sandbox.Image{Name: "plain"})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, ev := range events {
			enc.Encode(ev)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, last)
	})
	return pd
}

func (pd *progressDaemon) request() (http.Header, []byte) {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	return pd.header, pd.body
}

// TestPullProgress: a pull with a Progress asks for the stream and gets
// each event in order, then the image; one without gets the plain answer.
func TestPullProgress(t *testing.T) {
	events := []sandbox.ImageProgress{
		{Phase: "resolve", Text: "127.0.0.1:5000/app:1.0"},
		{Phase: "layer", Layer: "sha256:ab", Bytes: 1 << 20, Total: 3 << 20, Layers: 2},
		{Phase: "layer", Layer: "sha256:ab", Bytes: 3 << 20, Total: 3 << 20, Layers: 2},
		{Phase: "unpack", Layer: "sha256:ab", Bytes: 5 << 20, Layers: 2, Cached: true},
		{Phase: "done", Text: "127.0.0.1:5000/app:1.0@sha256:cd", Layers: 2},
	}
	d := newProgressDaemon(t, events, `{"image":{"name":"127.0.0.1:5000/app:1.0","digest":"sha256:cd"}}`+"\n")
	c := client.New(d.URL, "tok", nil)
	var got []sandbox.ImageProgress
	img, err := c.Images().Pull(ctxT(t), "127.0.0.1:5000/app:1.0", client.PullOptions{Insecure: true, Progress: func(ev sandbox.ImageProgress) { got = append(got, ev) }})
	if err != nil || img.Name != "127.0.0.1:5000/app:1.0" || img.Digest != "sha256:cd" {
		t.Fatalf("Pull = %+v, %v; want the stream's image", img, err)
	}
	if !reflect.DeepEqual(got, events) {
		t.Errorf("Pull's progress = %+v\nwant %+v", got, events)
	}
	h, body := d.request()
	if req := d.last(t); req.Method != "POST" || req.RawPath != "/v1/images/pull" {
		t.Errorf("Pull sent %+v", req)
	}
	if string(body) != `{"ref":"127.0.0.1:5000/app:1.0","insecure":true}` || h.Get("Content-Type") != "application/json" {
		t.Errorf("Pull sent %s (%s)", body, h.Get("Content-Type"))
	}

	img, err = c.Images().Pull(ctxT(t), "127.0.0.1:5000/app:1.0", client.PullOptions{})
	if h, body := d.request(); err != nil || img.Name != "plain" || h.Get("Accept") != "application/json" || string(body) != `{"ref":"127.0.0.1:5000/app:1.0"}` {
		t.Errorf("Pull without progress = %+v, %v, sent %s accepting %q; want the plain answer", img, err, body, h.Get("Accept"))
	}
}

// TestProgressStreamEnds: the ends of a progress stream other than its
// image.
func TestProgressStreamEnds(t *testing.T) {
	ev := sandbox.ImageProgress{Phase: "resolve"}
	for _, tt := range []struct {
		name, last string
		code       sandbox.Code
		details    map[string]any
	}{
		{"error line", `{"error":{"code":"permission_denied","message":"pull 127.0.0.1:5000/app: unauthorized","hint":"log in","details":{"registry":"127.0.0.1:5000"}}}` + "\n",
			sandbox.CodePermissionDenied, map[string]any{"registry": "127.0.0.1:5000"}},
		{"unknown code", `{"error":{"code":"brand_new","message":"what"}}` + "\n", sandbox.CodeInternal, map[string]any{"server_code": "brand_new"}},
		{"cut short", `{"phase":"lay`, sandbox.CodeUnavailable, nil},
		{"no last line", "", sandbox.CodeUnavailable, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newProgressDaemon(t, []sandbox.ImageProgress{ev}, tt.last)
			n := 0
			_, err := client.New(d.URL, "tok", nil).Images().Pull(ctxT(t), "127.0.0.1:5000/app", client.PullOptions{Progress: func(sandbox.ImageProgress) { n++ }})
			var e *sandbox.Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Fatalf("Pull = %v; want %s", err, tt.code)
			}
			for k, v := range tt.details {
				if e.Details[k] != v {
					t.Errorf("details = %v; want %s = %v", e.Details, k, v)
				}
			}
			if n != 1 {
				t.Errorf("%d progress events before the end; want 1", n)
			}
		})
	}
}

// TestImport: the archive is the body, with its length when known and
// chunked otherwise, the name in the query; a failing reader is the
// caller's error.
func TestImport(t *testing.T) {
	archive := bytes.Repeat([]byte("tar!"), 1<<18) // 1 MiB
	d := newProgressDaemon(t, []sandbox.ImageProgress{{Phase: "unpack"}}, `{"image":{"name":"tools"}}`+"\n")
	c := client.New(d.URL, "tok", nil)
	n := 0
	img, err := c.Images().Import(ctxT(t), "tools", bytes.NewReader(archive), func(sandbox.ImageProgress) { n++ })
	h, body := d.request()
	if err != nil || img.Name != "tools" || n != 1 {
		t.Fatalf("Import = %+v, %v after %d events", img, err, n)
	}
	if req := d.last(t); req.Method != "POST" || req.RawPath != "/v1/images/import" || req.Query != "name=tools" {
		t.Errorf("Import sent %+v", req)
	}
	if !bytes.Equal(body, archive) || h.Get("Content-Type") != "application/x-tar" {
		t.Errorf("Import sent %d bytes of %s; want the archive", len(body), h.Get("Content-Type"))
	}

	// A reader of unknown length is streamed.
	var lengths []int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		lengths = append(lengths, r.ContentLength, int64(len(b)))
		writeJSON(w, 200, sandbox.Image{Name: "tools"})
	}))
	t.Cleanup(srv.Close)
	c = client.New(srv.URL, "tok", nil)
	if _, err := c.Images().Import(ctxT(t), "tools", io.MultiReader(bytes.NewReader(archive)), nil); err != nil {
		t.Fatal(err)
	}
	if want := []int64{-1, int64(len(archive))}; !reflect.DeepEqual(lengths, want) {
		t.Errorf("a streamed import arrived with Content-Length and size %v; want %v", lengths, want)
	}

	boom := errors.New("disk on fire")
	_, err = c.Images().Import(ctxT(t), "tools", io.MultiReader(strings.NewReader("start"), failingReader{boom}), nil)
	var e *sandbox.Error
	if !errors.Is(err, boom) || errors.As(err, &e) {
		t.Errorf("Import with a failing reader = %v; want the reader's error", err)
	}
}

// TestBuild: the Dockerfile and the context arrive as the parts
// "dockerfile" and "context" of a multipart body, in that order.
func TestBuild(t *testing.T) {
	dockerfile := "FROM scratch\nCOPY a /a\n"
	buildContext := bytes.Repeat([]byte("ctx"), 100000)
	type part struct {
		name, contentType string
		data              []byte
	}
	var (
		mu    sync.Mutex
		parts []part
		query string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mr, err := r.MultipartReader()
		if err != nil {
			writeJSON(w, 400, map[string]any{"error": map[string]any{"code": "invalid_argument", "message": err.Error()}})
			return
		}
		mu.Lock()
		defer mu.Unlock()
		query = r.URL.RawQuery
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(p)
			parts = append(parts, part{p.FormName(), p.Header.Get("Content-Type"), b})
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"phase":"step","step":1,"text":"FROM scratch"}`+"\n"+`{"image":{"name":"app"}}`+"\n")
	}))
	t.Cleanup(srv.Close)
	var steps []sandbox.ImageProgress
	img, err := client.New(srv.URL, "tok", nil).Images().Build(ctxT(t), "app", strings.NewReader(dockerfile), bytes.NewReader(buildContext),
		client.BuildOptions{Args: map[string]string{"VERSION": "1.2"}, Network: "egress", Progress: func(ev sandbox.ImageProgress) { steps = append(steps, ev) }})
	if err != nil || img.Name != "app" || len(steps) != 1 || steps[0].Step != 1 {
		t.Fatalf("Build = %+v, %v, progress %+v", img, err, steps)
	}
	// sent returns, and forgets, what the daemon received.
	sent := func() ([]part, string) {
		mu.Lock()
		defer mu.Unlock()
		p, q := parts, query
		parts = nil
		return p, q
	}
	got, q := sent()
	if q != "name=app&network=egress" || len(got) != 3 || got[0].name != "dockerfile" || string(got[0].data) != dockerfile ||
		got[1].name != "build_args" || string(got[1].data) != `{"VERSION":"1.2"}` ||
		got[2].name != "context" || got[2].contentType != "application/x-tar" || !bytes.Equal(got[2].data, buildContext) {
		t.Errorf("Build sent ?%s and %d parts (%+v); want dockerfile, build_args, context", q, len(got), got)
	}
	if _, err := client.New(srv.URL, "tok", nil).Images().Build(ctxT(t), "app", strings.NewReader(dockerfile), bytes.NewReader(buildContext), client.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := sent(); len(got) != 2 || got[0].name != "dockerfile" || got[1].name != "context" {
		t.Errorf("Build without arguments sent the parts %+v; want dockerfile, context", got)
	}

	boom := errors.New("context unreadable")
	_, err = client.New(srv.URL, "tok", nil).Images().Build(ctxT(t), "app", strings.NewReader(dockerfile), failingReader{boom}, client.BuildOptions{})
	if !errors.Is(err, boom) {
		t.Errorf("Build with a failing context = %v; want its error", err)
	}
}

// TestExport: the archive reaches the writer; the daemon's error comes
// before any byte; a cut transfer is unavailable.
func TestExport(t *testing.T) {
	archive := bytes.Repeat([]byte("layer"), 200000)
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("name") {
		case "app":
			w.Header().Set("Content-Type", "application/x-tar")
			w.Write(archive)
		case "cut":
			w.Header().Set("Content-Type", "application/x-tar")
			w.Write(archive[:1000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		default:
			writeJSON(w, 404, map[string]any{"error": map[string]any{"code": "not_found", "message": "image not found"}})
		}
	})
	c := client.New(d.URL, "tok", nil)
	var got bytes.Buffer
	if err := c.Images().Export(ctxT(t), "app", &got); err != nil || !bytes.Equal(got.Bytes(), archive) {
		t.Fatalf("Export(app) = %d bytes, %v", got.Len(), err)
	}
	if req := d.last(t); req.Method != "GET" || req.RawPath != "/v1/image/export" || req.Query != "name=app" {
		t.Errorf("Export sent %+v", req)
	}
	got.Reset()
	if err := c.Images().Export(ctxT(t), "nope", &got); !sandbox.IsCode(err, sandbox.CodeNotFound) || got.Len() != 0 {
		t.Errorf("Export(nope) = %v after %d bytes; want not_found before any", err, got.Len())
	}
	if err := c.Images().Export(ctxT(t), "cut", io.Discard); !sandbox.IsCode(err, sandbox.CodeUnavailable) {
		t.Errorf("Export(cut) = %v; want unavailable", err)
	}
	boom := errors.New("disk full")
	if err := c.Images().Export(ctxT(t), "app", failingWriter{boom}); !errors.Is(err, boom) {
		t.Errorf("Export into a failing writer = %v; want its error", err)
	}
}
