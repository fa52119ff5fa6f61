package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// serveInSandbox starts python3's web server on port in sandbox name, in
// the background, and waits until the sandbox lists the port.
func serveInSandbox(t testing.TB, c *client.Client, name string, port int) {
	t.Helper()
	ctx := t.Context()
	cmd := fmt.Sprintf("cd /tmp && nohup python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &", port)
	if res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: cmd}, nil, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("start the web server: %+v, %v", res, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		infos, err := c.Ports(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, pi := range infos {
			if pi.Port == port && pi.Listening {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d never listened; ports %+v", port, infos)
		}
	}
}

// get sends GET url with token (none when "") and returns the status and
// body.
func get(t testing.TB, url, token string) (int, string) {
	t.Helper()
	resp, b := testenv.Do(t, "GET", url, token, "")
	return resp.StatusCode, string(b)
}

// TestSandboxURL: a web server started in a real sandbox answers at the
// sandbox's URL, which needs a token until the port is made public
// (`hearth url NAME PORT --public`), lists it (`hearth url NAME`), and
// wakes the sandbox when it sleeps.
func TestSandboxURL(t *testing.T) {
	requireDaemon(t)
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		c := d.Client()
		ctx := ctxT(t)
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
			t.Fatal(err)
		}
		serveInSandbox(t, c, "web", 8000)
		url, _, code := d.CLI("", "url", "web", "8000")
		url = strings.TrimSpace(url)
		if code != 0 || url != d.URL+"/v1/sandboxes/web/proxy/8000/" {
			t.Fatalf("hearth url web 8000 = %d %q", code, url)
		}
		if _, err := c.WriteFile(ctx, "web", sandbox.WriteRequest{Path: "/tmp/index.txt"}, strings.NewReader("served from the sandbox\n")); err != nil {
			t.Fatal(err)
		}
		if status, body := get(t, url+"index.txt", d.Token); status != 200 || body != "served from the sandbox\n" {
			t.Errorf("GET /index.txt through the URL = %d %q", status, body)
		}
		if status, body := get(t, url, d.Token); status != 200 || !strings.Contains(body, "index.txt") {
			t.Errorf("GET / through the URL = %d, want /tmp's listing; %q", status, body)
		}
		if status, _ := get(t, url, ""); status != http.StatusUnauthorized {
			t.Errorf("GET without a token = %d, want 401", status)
		}
		if _, stderr, code := d.CLI("", "url", "web", "8000", "--public"); code != 0 {
			t.Fatalf("hearth url --public = %d %q", code, stderr)
		}
		if status, _ := get(t, url, ""); status != 200 {
			t.Errorf("GET of a public port without a token = %d, want 200", status)
		}
		list, _, code := d.CLI("", "url", "web")
		if code != 0 || !strings.Contains(list, "8000") || !strings.Contains(list, "public") || !strings.Contains(list, url) {
			t.Errorf("hearth url web = %d %q", code, list)
		}

		// A sleeping sandbox wakes for its URL (its processes start
		// afresh, so nothing listens on 8000 any more).
		if _, err := c.Sleep(ctx, "web"); err != nil {
			t.Fatal(err)
		}
		if status, body := get(t, url, ""); status != http.StatusServiceUnavailable || !strings.Contains(body, "nothing is listening on port 8000") {
			t.Errorf("GET of a sleeping sandbox's URL = %d %q; want 503 from the woken sandbox", status, body)
		}
		if sb, err := c.Get(ctx, "web"); err != nil || sb.Status != sandbox.StatusRunning {
			t.Errorf("after the request: %+v, %v; want running", sb.Status, err)
		}
	})
}

// BenchmarkSandboxURL: GETs of a small file and of a 16 MiB one through
// the sandbox's URL, to python3's web server in the sandbox, next to the
// same GETs straight to the same server run on the host's loopback
// (sub-benchmark host), in the same run: the proxy's cost is the
// difference. Latencies are reported as p50 and p99, throughput as MB/s.
func BenchmarkSandboxURL(b *testing.B) {
	requireDaemon(b)
	b.Run("host", func(b *testing.B) {
		dir := b.TempDir()
		writeServed(b, func(name string, data []byte) error { return os.WriteFile(filepath.Join(dir, name), data, 0o644) })
		port := testenv.FreePort(b)
		srv := exec.Command("python3", "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1")
		srv.Dir = dir
		if err := srv.Start(); err != nil {
			b.Fatalf("python3 on the host: %v", err)
		}
		b.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the host's web server never listened")
			}
		}
		benchGets(b, fmt.Sprintf("http://127.0.0.1:%d/", port), "")
	})
	for _, rt := range bins.Runtimes {
		b.Run(rt, func(b *testing.B) {
			d := newDaemon(b, rt)
			c := d.Client()
			if _, _, err := c.Create(b.Context(), sandbox.CreateRequest{Name: "web"}); err != nil {
				b.Fatal(err)
			}
			writeServed(b, func(name string, data []byte) error {
				_, err := c.WriteFile(b.Context(), "web", sandbox.WriteRequest{Path: "/tmp/" + name}, bytes.NewReader(data))
				return err
			})
			serveInSandbox(b, c, "web", 8000)
			benchGets(b, d.URL+"/v1/sandboxes/web/proxy/8000/", d.Token)
		})
	}
}

// bigFile is the size of the file the throughput benchmarks get.
const bigFile = 16 << 20

// writeServed writes the files BenchmarkSandboxURL gets with write.
func writeServed(b *testing.B, write func(name string, data []byte) error) {
	b.Helper()
	for name, data := range map[string][]byte{"small": []byte("hello\n"), "big": make([]byte, bigFile)} {
		if err := write(name, data); err != nil {
			b.Fatal(err)
		}
	}
}

// benchGets gets base+"small" and base+"big" b.N times each.
func benchGets(b *testing.B, base, token string) {
	for _, name := range []string{"small", "big"} {
		b.Run(name, func(b *testing.B) {
			var lat latencies
			for range b.N {
				start := time.Now()
				if status, body := get(b, base+name, token); status != 200 {
					b.Fatalf("GET %s = %d %q", name, status, body)
				}
				lat = append(lat, time.Since(start))
			}
			if name == "big" {
				b.SetBytes(bigFile)
			}
			lat.report(b)
		})
	}
}
