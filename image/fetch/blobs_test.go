package fetch_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/testutil/registry"
)

// bigLayer pushes an image whose second layer is 2 MiB of random bytes
// and returns the image and that layer's digest and size.
func bigLayer(t *testing.T, reg *registry.Registry, repoRef string) (v1.Image, v1.Hash, int64) {
	img := registry.Image(t,
		registry.Layer(t, compression.GZip, map[string]string{"etc/hello": "hello\n"}),
		registry.RandomLayer(t, compression.GZip, 2<<20))
	reg.Push(t, repoRef, img)
	l := layers(t, img)[1]
	d, _ := l.Digest()
	size, _ := l.Size()
	return img, d, size
}

// isBlobGet reports whether r is a GET of the blob d.
func isBlobGet(r *http.Request, d v1.Hash) bool {
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+d.String())
}

// cutFirst answers the first GET of blob d with half its bytes, then
// drops the connection. The proxy serves requests concurrently, so the
// first is decided atomically.
func cutFirst(d v1.Hash) func(http.ResponseWriter, *http.Request, *http.Response) bool {
	var cut atomic.Bool
	return func(w http.ResponseWriter, r *http.Request, resp *http.Response) bool {
		if !isBlobGet(r, d) || resp.StatusCode != http.StatusOK || !cut.CompareAndSwap(false, true) {
			return false
		}
		copyHeader(w, resp)
		w.WriteHeader(resp.StatusCode)
		io.CopyN(w, resp.Body, resp.ContentLength/2)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// resumedFrom checks that the proxy saw two GETs of d, the second for
// the bytes from where the first was cut (0 < start <= size/2), and
// returns the start.
func resumedFrom(t *testing.T, p *proxy, d v1.Hash, size int64) int64 {
	t.Helper()
	reqs := p.blobRequests(d.String())
	if len(reqs) != 2 {
		t.Fatalf("%d GETs of the cut blob, want 2", len(reqs))
	}
	if r := reqs[0].Header.Get("Range"); r != "" {
		t.Errorf("first GET sent Range %q, want none", r)
	}
	rng := reqs[1].Header.Get("Range")
	start, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(rng, "bytes="), "-"), 10, 64)
	if err != nil || start <= 0 || start > size/2 || rng != fmt.Sprintf("bytes=%d-", start) {
		t.Fatalf("second GET sent Range %q, want bytes=N- with 0 < N <= %d", rng, size/2)
	}
	return start
}

// TestPullResumes cuts a layer's download half-way: the pull tries
// again with a Range request for the rest, and the blob verifies.
func TestPullResumes(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img, d, size := bigLayer(t, reg, "app:1")
	p := newProxy(t, reg.Host, cutFirst(d))

	o := options(t)
	got := pull(t, p.host()+"/app:1", o)
	resumedFrom(t, p, d, size)
	sameImage(t, got.Image, img)
	if _, err := os.Stat(filepath.Join(o.BlobDir, "sha256", d.Hex+".partial")); !os.IsNotExist(err) {
		t.Errorf("the partial download is still there: %v", err)
	}
}

// TestPullResumesAcrossPulls: a pull that may not retry fails when the
// download is cut, keeping what it got as .partial; the next pull asks
// for the rest only.
func TestPullResumesAcrossPulls(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img, d, size := bigLayer(t, reg, "app:1")
	p := newProxy(t, reg.Host, cutFirst(d))

	o := options(t)
	o.Retries = -1
	_, err := fetch.Pull(t.Context(), p.host()+"/app:1", o)
	var fe *fetch.Error
	if !errors.As(err, &fe) || fe.Digest != d.String() {
		t.Fatalf("Pull with a cut download = %v, want an error at blob %s", err, d)
	}
	partial := filepath.Join(o.BlobDir, "sha256", d.Hex+".partial")
	st, err := os.Stat(partial)
	if err != nil || st.Size() == 0 {
		t.Fatalf("after a cut download, %s: %v, %v; want the bytes received", partial, st, err)
	}

	sameImage(t, pull(t, p.host()+"/app:1", o).Image, img)
	if start := resumedFrom(t, p, d, size); start != st.Size() {
		t.Errorf("resumed from byte %d, want %d (the partial file's size)", start, st.Size())
	}
}

// TestPullRefusesCorruptBlob serves a layer with one byte changed: the
// pull fails with ErrDigest naming the blob, and leaves no file of it.
func TestPullRefusesCorruptBlob(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	_, d, _ := bigLayer(t, reg, "app:1")
	p := newProxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, resp *http.Response) bool {
		if !isBlobGet(r, d) {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		b[len(b)/2] ^= 0xff
		copyHeader(w, resp)
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
		return true
	})
	o := options(t)
	err := pullErr(t, p.host()+"/app:1", o, fetch.ErrDigest)
	if !strings.Contains(err.Error(), d.String()) {
		t.Errorf("error %q does not name blob %s", err, d)
	}
	for _, f := range blobFiles(t, o.BlobDir) {
		if strings.HasPrefix(f, d.Hex) {
			t.Errorf("the corrupt blob left %s", f)
		}
	}
}

// TestPullLimits refuses a manifest, a config or an image over its
// limit, a manifest whose length is not announced included, before the
// blobs are fetched.
func TestPullLimits(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img, _, _ := bigLayer(t, reg, "app:1")
	raw, _ := img.RawManifest()
	chunked := newProxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, resp *http.Response) bool {
		if !strings.Contains(r.URL.Path, "/manifests/") {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		copyHeader(w, resp)
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		for len(b) > 0 { // flushed in pieces: sent chunked
			n := min(len(b), 64)
			w.Write(b[:n])
			w.(http.Flusher).Flush()
			b = b[n:]
		}
		return true
	})
	plain := newProxy(t, reg.Host, nil)
	for _, tc := range []struct {
		name  string
		p     *proxy
		set   func(*fetch.Options)
		words string
	}{
		{"manifest", plain, func(o *fetch.Options) { o.MaxManifestBytes = int64(len(raw)) - 1 },
			fmt.Sprintf("the manifest is %d bytes, more than the limit of %d", len(raw), len(raw)-1)},
		{"chunked manifest", chunked, func(o *fetch.Options) { o.MaxManifestBytes = int64(len(raw)) - 1 },
			fmt.Sprintf("the manifest is more than the limit of %d bytes", len(raw)-1)},
		{"config", plain, func(o *fetch.Options) { o.MaxConfigBytes = 100 }, "the config is"},
		{"image", plain, func(o *fetch.Options) { o.MaxImageBytes = 1 << 20 }, "the layers add up to more than the limit of 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options(t)
			tc.set(&o)
			before := tc.p.count()
			err := pullErr(t, tc.p.host()+"/app:1", o, fetch.ErrTooLarge)
			if !strings.Contains(err.Error(), tc.words) {
				t.Errorf("error %q, want it to say %q", err, tc.words)
			}
			tc.p.mu.Lock()
			for _, r := range tc.p.requests[before:] {
				if strings.Contains(r.URL.Path, "/blobs/") {
					t.Errorf("the refused pull fetched %s", r.URL.Path)
				}
			}
			tc.p.mu.Unlock()
			if files := blobFiles(t, o.BlobDir); len(files) != 0 {
				t.Errorf("the refused pull left %v", files)
			}
		})
	}
}

// TestPullRefusesSchema1 answers a manifest request with a Docker schema
// 1 manifest: refused as unsupported, saying so.
func TestPullRefusesSchema1(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	reg.Push(t, "old:1", smallImage(t))
	schema1 := `{"schemaVersion":1,"name":"old","tag":"1","architecture":"amd64","fsLayers":[{"blobSum":"sha256:a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4"}],"history":[{"v1Compatibility":"{}"}]}`
	p := newProxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, resp *http.Response) bool {
		if !strings.Contains(r.URL.Path, "/manifests/") {
			return false
		}
		w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v1+prettyjws")
		io.WriteString(w, schema1)
		return true
	})
	err := pullErr(t, p.host()+"/old:1", options(t), fetch.ErrUnsupported)
	if !strings.Contains(err.Error(), "schema 1 is not supported") {
		t.Errorf("error %q, want it to say schema 1 is not supported", err)
	}
}

// TestOpenVerifies changes the stored blobs of a pulled image's gzip,
// zstd and uncompressed layers: reading them through Open fails, with
// ErrDigest when the change leaves the stream well-formed.
func TestOpenVerifies(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := registry.Image(t,
		registry.Layer(t, compression.GZip, map[string]string{"g": strings.Repeat("gzip\n", 1000)}),
		registry.Layer(t, compression.ZStd, map[string]string{"z": strings.Repeat("zstd\n", 1000)}),
		registry.Layer(t, compression.None, map[string]string{"n": strings.Repeat("none\n", 1000)}))
	o := options(t)
	got := pull(t, reg.Push(t, "app:1", img), o)
	for i, l := range layers(t, got.Image) {
		d, _ := l.Digest()
		path := filepath.Join(o.BlobDir, "sha256", d.Hex)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name   string
			blob   []byte
			digest bool // the stream stays well-formed: only the digest tells
		}{
			{"flipped", flip(orig), i == 2},
			{"appended", append(append([]byte{}, orig...), 0), true},
			{"truncated", orig[:len(orig)-1], i == 2},
		} {
			if err := os.WriteFile(path, tc.blob, 0o600); err != nil {
				t.Fatal(err)
			}
			rc, err := fetch.Open(l)
			if err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
			}
			if err == nil || (tc.digest && !errors.Is(err, fetch.ErrDigest)) {
				t.Errorf("layer %d %s: reading it = %v, want an error (ErrDigest: %v)", i, tc.name, err, tc.digest)
			}
		}
		os.WriteFile(path, orig, 0o600)
		readLayer(t, l)
	}
}

func flip(b []byte) []byte {
	c := append([]byte{}, b...)
	c[len(c)/2] ^= 0x01
	return c
}

// TestPullStalled stalls a layer's download half-way: after the stall
// time without a byte the pull cuts it and asks for the rest.
func TestPullStalled(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img, d, size := bigLayer(t, reg, "app:1")
	var stalled atomic.Bool // the proxy's handlers run concurrently
	p := newProxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, resp *http.Response) bool {
		if !isBlobGet(r, d) || !stalled.CompareAndSwap(false, true) {
			return false
		}
		copyHeader(w, resp)
		w.WriteHeader(resp.StatusCode)
		io.CopyN(w, resp.Body, resp.ContentLength/2)
		w.(http.Flusher).Flush()
		select { // until the client gives up, or long after the test would
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return true
	})
	start := time.Now()
	got := pull(t, p.host()+"/app:1", fetch.WithStall(options(t), 300*time.Millisecond))
	resumedFrom(t, p, d, size)
	sameImage(t, got.Image, img)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the pull took %v: the stall was not cut", took)
	}
}

// TestPullConcurrent runs pulls of one image into one BlobDir at once:
// each gets the image, and the directory holds each blob once, verified.
func TestPullConcurrent(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img, _, _ := bigLayer(t, reg, "app:1")
	o := options(t)
	errs := make(chan error, 4)
	pulled := make(chan fetch.Pulled, 4)
	for range 4 {
		go func() {
			p, err := fetch.Pull(t.Context(), reg.Ref("app:1"), o)
			errs <- err
			pulled <- p
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Pull: %v", err)
		}
		sameImage(t, (<-pulled).Image, img)
	}
	if files := blobFiles(t, o.BlobDir); len(files) != 2 {
		t.Errorf("BlobDir/sha256 holds %v, want the 2 layers", files)
	}
}
