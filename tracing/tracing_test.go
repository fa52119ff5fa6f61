package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/hearth/hearth/tracing"
)

// TestStart: an endpoint that is not an http(s) URL is refused; a good one
// receives the spans ended before the shutdown, at /v1/traces.
func TestStart(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:4318", "ftp://collector", "http://", "://x"} {
		if _, err := tracing.Start(t.Context(), tracing.Options{Endpoint: bad}); err == nil {
			t.Errorf("Start(%q) = nil, want an error", bad)
		}
	}
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
	}))
	defer srv.Close()
	shutdown, err := tracing.Start(t.Context(), tracing.Options{Endpoint: srv.URL, Node: "n0", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Tracer("test").Start(context.Background(), "one")
	tracing.End(span, nil)
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Error("the collector got no export of the ended span")
	}
}
