package testenv

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
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
