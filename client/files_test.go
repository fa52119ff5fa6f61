package client_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

func TestWriteFile(t *testing.T) {
	type seen struct {
		query         string
		contentLength int64
		chunked       bool
		body          string
	}
	var got seen
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = seen{r.URL.RawQuery, r.ContentLength, len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked", string(b)}
		writeJSON(w, 200, sandbox.FileInfo{Path: r.URL.Query().Get("path"), Size: int64(len(b))})
	})
	c := client.New(d.URL, "tok", nil)

	f, err := os.Create(filepath.Join(t.TempDir(), "content"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("skipped:file content")
	f.Seek(int64(len("skipped:")), io.SeekStart)

	tests := []struct {
		name string
		req  sandbox.WriteRequest
		r    io.Reader
		want seen
	}{
		{"strings.Reader", sandbox.WriteRequest{Path: "a.txt"}, strings.NewReader("hello"),
			seen{"path=a.txt", 5, false, "hello"}},
		{"bytes.Reader", sandbox.WriteRequest{Path: "a.txt", Parents: true}, bytes.NewReader([]byte("hi")),
			seen{"parents=true&path=a.txt", 2, false, "hi"}},
		{"bytes.Buffer", sandbox.WriteRequest{Path: "a.txt", MaxBytes: 10}, bytes.NewBufferString("buf"),
			seen{"max_bytes=10&path=a.txt", 3, false, "buf"}},
		{"os.File from its offset", sandbox.WriteRequest{Path: "run.sh", Mode: 0o755, SetMode: true}, f,
			seen{"mode=0755&path=run.sh", int64(len("file content")), false, "file content"}},
		{"mode for new files only", sandbox.WriteRequest{Path: "a", Mode: 0o600}, strings.NewReader("x"),
			seen{"mode=0600&path=a&set_mode=false", 1, false, "x"}},
		{"other readers are chunked", sandbox.WriteRequest{Path: "a"}, io.MultiReader(strings.NewReader("chu"), strings.NewReader("nked")),
			seen{"path=a", -1, true, "chunked"}},
		{"nil reader writes an empty file", sandbox.WriteRequest{Path: "empty"}, nil,
			seen{"path=empty", 0, false, ""}},
		{"empty reader", sandbox.WriteRequest{Path: "empty"}, strings.NewReader(""),
			seen{"path=empty", 0, false, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := c.WriteFile(ctxT(t), "s1", tt.req, tt.r)
			if err != nil {
				t.Fatalf("WriteFile = %v", err)
			}
			if got != tt.want {
				t.Errorf("daemon saw %+v\nwant          %+v", got, tt.want)
			}
			if info.Size != int64(len(tt.want.body)) {
				t.Errorf("FileInfo.Size = %d, want %d", info.Size, len(tt.want.body))
			}
		})
	}
}

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return &countingConn{Conn: c, n: &l.n}, err
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestWriteFileRefusedBeforeUpload: a daemon that refuses a large write by
// its Content-Length gets the refusal to the caller without the upload.
func TestWriteFileRefusedBeforeUpload(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 413, map[string]any{"error": map[string]any{
			"code": "too_large", "message": "too big", "hint": "smaller",
			"details": map[string]any{"max_bytes": 1024, "size": r.ContentLength},
		}})
	}))
	ln := &countingListener{Listener: srv.Listener}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	const size = 32 << 20
	_, err := client.New(srv.URL, "tok", nil).WriteFile(ctxT(t), "s1", sandbox.WriteRequest{Path: "big"}, bytes.NewReader(make([]byte, size)))
	var e *sandbox.Error
	if !errors.As(err, &e) || e.Code != sandbox.CodeTooLarge {
		t.Fatalf("WriteFile(32 MiB) = %v; want too_large", err)
	}
	if e.Details["size"] != float64(size) || e.Details["max_bytes"] != 1024.0 {
		t.Errorf("details = %v; want size and max_bytes", e.Details)
	}
	if n := ln.n.Load(); n > 1<<20 {
		t.Errorf("the daemon received %d bytes; want the body withheld", n)
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestWriteFileReaderFails(t *testing.T) {
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		writeJSON(w, 200, sandbox.FileInfo{})
	})
	boom := errors.New("disk on fire")
	_, err := client.New(d.URL, "tok", nil).WriteFile(ctxT(t), "s1", sandbox.WriteRequest{Path: "a"},
		io.MultiReader(strings.NewReader("start"), failingReader{boom}))
	var e *sandbox.Error
	if !errors.Is(err, boom) || errors.As(err, &e) {
		t.Fatalf("WriteFile with a failing reader = %v; want the reader's error, not a daemon error", err)
	}
}

func TestReadFile(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("path") {
		case "whole":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(content)
		case "missing":
			writeJSON(w, 404, map[string]any{"error": map[string]any{"code": "not_found", "message": "no such file", "hint": "", "details": map[string]any{}}})
		case "truncated":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(content[:1000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	})
	c := client.New(d.URL, "tok", nil)
	ctx := ctxT(t)

	var got bytes.Buffer
	if err := c.ReadFile(ctx, "s1", "whole", &got); err != nil || !bytes.Equal(got.Bytes(), content) {
		t.Fatalf("ReadFile(whole) = %d bytes, %v; want %d bytes", got.Len(), err, len(content))
	}
	if err := c.ReadFile(ctx, "s1", "missing", &got); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Fatalf("ReadFile(missing) = %v; want not_found", err)
	}
	if err := c.ReadFile(ctx, "s1", "truncated", io.Discard); !sandbox.IsCode(err, sandbox.CodeUnavailable) {
		t.Fatalf("ReadFile(truncated) = %v; want unavailable", err)
	}
	boom := errors.New("disk full")
	if err := c.ReadFile(ctx, "s1", "whole", failingWriter{boom}); !errors.Is(err, boom) || sandbox.IsCode(err, sandbox.CodeUnavailable) {
		t.Fatalf("ReadFile into a failing writer = %v; want the writer's error", err)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }
