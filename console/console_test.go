package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hearth/hearth/console"
)

// TestHandler: the page at /console/ and for any path that names no
// asset, the assets by name, never anything above them, and every answer
// with the page's security headers.
func TestHandler(t *testing.T) {
	h := console.Handler()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Result(), string(b)
	}
	for _, path := range []string{"/console/", "/console/sb/x", "/console/../../etc/passwd", "/console/%2e%2e/%2e%2e/etc/passwd", "/console/nope.js"} {
		resp, body := get(path)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<script src="/console/app.js">`) || strings.Contains(body, "root:") {
			t.Errorf("GET %s = %d %.80q; want the page", path, resp.StatusCode, body)
		}
	}
	resp, body := get("/console/app.js")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "sessionStorage") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET app.js = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, body := get("/console/vendor/xterm/xterm.js"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "Terminal") {
		t.Errorf("GET the vendored xterm.js = %d", resp.StatusCode)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers = %v", resp.Header)
	}
}
