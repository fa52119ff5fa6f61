package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/hearth/hearth/gateway"
)

// BenchmarkGateway measures what the gateway adds: each request is made
// directly to the upstream and through the gateway, in the same run, for
// a small GET and for 1 MiB bodies down (GET) and up (POST).
func BenchmarkGateway(b *testing.B) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(big)
		case "/upload":
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "ok")
		default:
			io.WriteString(w, `{"ok":true}`)
		}
	}))
	defer up.Close()
	u, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}
	gw := httptest.NewServer(gateway.New(gateway.Options{Resolver: resolver{upstream: u}}))
	defer gw.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	for _, c := range []struct {
		name   string
		method string
		path   string
		body   []byte
		bytes  int64
	}{
		{"small", "GET", "/", nil, 0},
		{"download-1MiB", "GET", "/big", nil, int64(len(big))},
		{"upload-1MiB", "POST", "/upload", big, int64(len(big))},
	} {
		for _, via := range []struct{ name, base, host string }{
			{"direct", up.URL, ""},
			{"gateway", gw.URL, "api.hearth.internal"},
		} {
			b.Run(c.name+"/"+via.name, func(b *testing.B) {
				b.SetBytes(c.bytes)
				b.ReportAllocs()
				for b.Loop() {
					req, err := http.NewRequest(c.method, via.base+c.path, bytes.NewReader(c.body))
					if err != nil {
						b.Fatal(err)
					}
					if via.host != "" {
						req.Host = via.host
					}
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || (c.path == "/big" && n != int64(len(big))) {
						b.Fatalf("%s %s = %d, %d bytes, %v", c.method, c.path, resp.StatusCode, n, err)
					}
				}
			})
		}
	}
}
