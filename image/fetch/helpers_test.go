package fetch_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/sandbox"
)

// options are Options for a test: blobs in a temporary directory, and
// retries 10 ms apart.
func options(t *testing.T) fetch.Options {
	return fetch.WithBackoff(fetch.Options{BlobDir: t.TempDir()}, 10*time.Millisecond)
}

// pull pulls ref and fails t on an error.
func pull(t *testing.T, ref string, o fetch.Options) fetch.Pulled {
	t.Helper()
	p, err := fetch.Pull(t.Context(), ref, o)
	if err != nil {
		t.Fatalf("Pull(%s): %v", ref, err)
	}
	return p
}

// pullErr pulls ref, which must fail with kind, and returns the error.
func pullErr(t *testing.T, ref string, o fetch.Options, kind error) error {
	t.Helper()
	_, err := fetch.Pull(t.Context(), ref, o)
	t.Logf("Pull(%s): %v", ref, err)
	if !errors.Is(err, kind) {
		t.Fatalf("Pull(%s) = %v, want an error of kind %v", ref, err, kind)
	}
	var fe *fetch.Error
	if !errors.As(err, &fe) {
		t.Fatalf("Pull(%s) = %T, want *fetch.Error", ref, err)
	}
	return err
}

// sameImage checks that got has want's manifest digest, and sameContent.
func sameImage(t *testing.T, got, want v1.Image) {
	t.Helper()
	gd, err := got.Digest()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := want.Digest()
	if gd != wd {
		t.Errorf("manifest digest %s, want %s", gd, wd)
	}
	sameContent(t, got, want)
}

// sameContent checks that got has want's config and layer digests, and
// that each layer of got reads, through fetch.Open, as the same tar as
// want's.
func sameContent(t *testing.T, got, want v1.Image) {
	t.Helper()
	gc, err := got.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wc, _ := want.RawConfigFile()
	if !bytes.Equal(gc, wc) {
		t.Errorf("config differs:\n got %s\nwant %s", gc, wc)
	}
	gl, wl := layers(t, got), layers(t, want)
	if len(gl) != len(wl) {
		t.Fatalf("%d layers, want %d", len(gl), len(wl))
	}
	for i := range gl {
		d, _ := gl[i].Digest()
		if w, _ := wl[i].Digest(); d != w {
			t.Errorf("layer %d digest %s, want %s", i, d, w)
		}
		if g, w := readLayer(t, gl[i]), uncompressed(t, wl[i]); !bytes.Equal(g, w) {
			t.Errorf("layer %d: fetch.Open gave %d bytes, want the %d of its tar", i, len(g), len(w))
		}
	}
}

func layers(t *testing.T, img v1.Image) []v1.Layer {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// readLayer reads l through fetch.Open.
func readLayer(t *testing.T, l v1.Layer) []byte {
	t.Helper()
	rc, err := fetch.Open(l)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading an opened layer: %v", err)
	}
	return b
}

func uncompressed(t *testing.T, l v1.Layer) []byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tarFiles is the regular files of a tar stream (name → content).
func tarFiles(t *testing.T, b []byte) map[string]string {
	t.Helper()
	files := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		files[hdr.Name] = string(c)
	}
}

// blobFiles lists BlobDir/sha256.
func blobFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "sha256"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// progress records a pull's progress events.
type progress struct {
	mu     sync.Mutex
	events []sandbox.ImageProgress
}

func (p *progress) record(ev sandbox.ImageProgress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, ev)
}

// proxy stands between a test and a registry on loopback: it records
// each request and lets the test answer some itself.
type proxy struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
}

// newProxy forwards requests to upstream (a plain-HTTP registry's
// host:port); intercept, if it returns true, has answered the request
// itself, given the registry's answer.
func newProxy(t *testing.T, upstream string, intercept func(w http.ResponseWriter, r *http.Request, resp *http.Response) bool) *proxy {
	p := &proxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests = append(p.requests, r.Clone(context.Background()))
		p.mu.Unlock()
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.RequestURI = "http", upstream, ""
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if intercept != nil && intercept(w, r, resp) {
			return
		}
		copyHeader(w, resp)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(p.Close)
	return p
}

func copyHeader(w http.ResponseWriter, resp *http.Response) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
}

// host is the proxy's host:port.
func (p *proxy) host() string { return strings.TrimPrefix(p.URL, "http://") }

// count is how many requests the proxy has seen.
func (p *proxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.requests)
}

// blobRequests are the GETs of the blob digest the proxy saw.
func (p *proxy) blobRequests(digest string) []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var rs []*http.Request
	for _, r := range p.requests {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+digest) {
			rs = append(rs, r)
		}
	}
	return rs
}

// sniffer dials a loopback target whatever address is asked, and records
// the addresses and whether any connection carried plain HTTP (a request
// line rather than a TLS handshake, whose first byte is 0x16).
type sniffer struct {
	target string
	mu     sync.Mutex
	addrs  []string
	plain  bool
}

func (s *sniffer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	s.addrs = append(s.addrs, addr)
	s.mu.Unlock()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.target)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, s: s}, nil
}

func (s *sniffer) sawPlain() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plain
}

type sniffConn struct {
	net.Conn
	s       *sniffer
	written bool
}

func (c *sniffConn) Write(p []byte) (int, error) {
	if !c.written && len(p) > 0 {
		c.written = true
		if p[0] != 0x16 {
			c.s.mu.Lock()
			c.s.plain = true
			c.s.mu.Unlock()
		}
	}
	return c.Conn.Write(p)
}
