// Package registry runs a real container registry for tests: Debian's
// docker-registry (the distribution project's registry) on 127.0.0.1, on a
// free port, with its storage in the test's temporary directory. It can
// serve HTTPS with a CA made for the test, require basic authentication
// (htpasswd with bcrypt) or bearer tokens from a token server the harness
// runs, and push images the test builds (images.go).
//
// Tests only ever reach 127.0.0.1: the certificate also names ServerName,
// which nothing resolves.
package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"

	"github.com/hearth/hearth/testutil/testenv"
)

// Options say how a registry is started; the zero value is an anonymous
// registry over plain HTTP.
type Options struct {
	// TLS serves HTTPS with a certificate for 127.0.0.1 and ServerName,
	// signed by a CA made for this registry (Registry.CA).
	TLS bool
	// Username and Password, when Username is set, are the one account the
	// registry accepts: HTTP basic authentication against an htpasswd file,
	// or, with Token, bearer tokens.
	Username, Password string
	// Token makes the registry take bearer tokens (JWTs it verifies) from a
	// token server that stands in front of it on Registry.Host and serves
	// /token to Username. It needs Username and plain HTTP.
	Token bool
}

// Registry is a running registry, stopped when its test ends.
type Registry struct {
	// Host is the host:port clients use ("127.0.0.1:PORT").
	Host string
	// CA is the PEM certificate of the CA that signed the registry's
	// certificate (nil without TLS).
	CA []byte
	// Dir is the registry's storage root.
	Dir string
	// Username and Password are Options'.
	Username, Password string

	front *tokenFront
}

// Start starts a registry as opts say and stops it when t ends. It skips t
// (or fails it where HEARTH_TEST_STRICT is set) when docker-registry is not
// installed.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		testenv.Skip(t, "docker-registry is not installed (apt-get install docker-registry): %v", err)
	}
	if opts.Token && (opts.Username == "" || opts.TLS) {
		t.Fatal("registry.Start: Token needs Username and plain HTTP")
	}
	dir := t.TempDir()
	r := &Registry{Dir: filepath.Join(dir, "storage"), Username: opts.Username, Password: opts.Password}
	c := config{storage: r.Dir}
	if opts.TLS {
		ca := newCA(t, "hearth test registry CA")
		srv := newServerCert(t, ca)
		r.CA = ca.cert
		c.cert, c.key = writeFile(t, dir, "server.pem", srv.cert), writeFile(t, dir, "server-key.pem", srv.key)
	}
	if opts.Username != "" && !opts.Token {
		hash, err := bcrypt.GenerateFromPassword([]byte(opts.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		c.htpasswd = writeFile(t, dir, "htpasswd", []byte(opts.Username+":"+string(hash)+"\n"))
	}
	if !opts.Token {
		r.Host = r.run(t, bin, dir, c)
		return r
	}
	// The token server's listener comes first: the registry's config
	// names it as the realm.
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { front.Close() })
	signer := newCA(t, "hearth test token signer")
	c.tokenRoots = writeFile(t, dir, "token-roots.pem", signer.cert)
	c.realm = "http://" + front.Addr().String() + "/token"
	backend := r.run(t, bin, dir, c)
	r.Host = front.Addr().String()
	r.front = newTokenFront(signer, opts.Username, opts.Password, &url.URL{Scheme: "http", Host: backend})
	srv := &http.Server{Handler: r.front, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(front)
	t.Cleanup(func() { srv.Close() })
	return r
}

// run starts docker-registry with c on a free port (trying another port
// when the first is taken meanwhile) and returns its host:port once it
// answers.
func (r *Registry) run(t testing.TB, bin, dir string, c config) string {
	t.Helper()
	var last error
	for range 3 {
		c.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
		cfg := writeFile(t, dir, "config.yml", c.yaml())
		logPath := filepath.Join(dir, "registry.log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve", cfg)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		if last = r.waitReady(c.addr, exited); last == nil {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					tail, _ := os.ReadFile(logPath)
					t.Logf("docker-registry log (%s):\n%s", logPath, lastBytes(tail, 4096))
				}
			})
			return c.addr
		}
		stop()
		tail, _ := os.ReadFile(logPath)
		last = fmt.Errorf("%w\n%s", last, lastBytes(tail, 4096))
	}
	t.Fatalf("docker-registry did not start: %v", last)
	return ""
}

// waitReady waits until the registry at addr answers GET /v2/ (with any
// status), it exits, or 20 seconds pass.
func (r *Registry) waitReady(addr string, exited <-chan struct{}) error {
	client := &http.Client{Transport: r.Transport(), Timeout: 2 * time.Second}
	u := r.scheme() + "://" + addr + "/v2/"
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("docker-registry exited")
		default:
		}
		resp, err := client.Get(u)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no answer from %s in 20s", u)
}

func (r *Registry) scheme() string {
	if r.CA != nil {
		return "https"
	}
	return "http"
}

// URL is the registry's base URL ("http://127.0.0.1:PORT").
func (r *Registry) URL() string { return r.scheme() + "://" + r.Host }

// Ref is the full reference of repoRef in this registry
// ("app:1.0" → "127.0.0.1:PORT/app:1.0").
func (r *Registry) Ref(repoRef string) string { return r.Host + "/" + repoRef }

// TokensIssued is how many bearer tokens the token server handed out.
func (r *Registry) TokensIssued() int64 {
	if r.front == nil {
		return 0
	}
	return r.front.issued.Load()
}

// Transport is an HTTP transport that trusts the registry's CA (if any)
// on top of the system's roots.
func (r *Registry) Transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	if r.CA != nil {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		pool.AppendCertsFromPEM(r.CA)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return tr
}

// Options are go-containerregistry's remote options that reach this
// registry with its account.
func (r *Registry) Options(ctx context.Context) []remote.Option {
	auth := authn.Anonymous
	if r.Username != "" {
		auth = &authn.Basic{Username: r.Username, Password: r.Password}
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(r.Transport())}
}

// Push pushes img as repoRef ("app:1.0") and returns its full reference.
func (r *Registry) Push(t testing.TB, repoRef string, img v1.Image) string {
	t.Helper()
	ref := r.parse(t, repoRef)
	if err := remote.Write(ref, img, r.Options(t.Context())...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}

// PushIndex pushes idx (and the images it holds) as repoRef and returns
// its full reference.
func (r *Registry) PushIndex(t testing.TB, repoRef string, idx v1.ImageIndex) string {
	t.Helper()
	ref := r.parse(t, repoRef)
	if err := remote.WriteIndex(ref, idx, r.Options(t.Context())...); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	return ref.String()
}

func (r *Registry) parse(t testing.TB, repoRef string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repoRef))
	if err != nil {
		t.Fatalf("reference %q: %v", repoRef, err)
	}
	return ref
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return bytes.TrimSpace(b)
}
