package testenv

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Do sends one request, with the bearer token (none when "") and body,
// and returns the response with its body read and closed; any failure to
// send it or read the answer fails t.
func Do(t testing.TB, method, url, token, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, b
}

// CountBodies wraps h so that the bytes it reads of request bodies add up
// in the returned counter: for tests of what a handler refuses unread.
func CountBodies(h http.Handler) (http.Handler, *atomic.Int64) {
	n := &atomic.Int64{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &countedBody{ReadCloser: r.Body, n: n}
		h.ServeHTTP(w, r)
	}), n
}

// countedBody is a request body that counts what is read of it.
type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// LateTail wraps h so that every read of a request body after the first
// waits d: a proxy's transport then checks late that a body with a
// Content-Length ends there, as it does when its goroutine is scheduled
// late on a busy machine, after the upstream has answered.
func LateTail(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &lateTail{ReadCloser: r.Body, d: d}
		h.ServeHTTP(w, r)
	})
}

// lateTail is a request body whose reads after the first wait d.
type lateTail struct {
	io.ReadCloser
	d     time.Duration
	reads atomic.Int64
}

func (b *lateTail) Read(p []byte) (int, error) {
	if b.reads.Add(1) > 1 {
		time.Sleep(b.d)
	}
	return b.ReadCloser.Read(p)
}
