package fetch_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/testutil/registry"
)

func smallImage(t *testing.T) v1.Image {
	return registry.Image(t,
		registry.Layer(t, compression.GZip, map[string]string{"etc/hello": "hello\n"}),
		registry.RandomLayer(t, compression.GZip, 256<<10))
}

// TestPullAuth pulls from registries that require an account: basic
// authentication (htpasswd) and bearer tokens from a token server. The
// right password pulls; a wrong one, or none, is ErrUnauthorized with
// the words that tell the user what to do.
func TestPullAuth(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token bool
	}{{"basic", false}, {"bearer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registry.Start(t, registry.Options{Username: "alice", Password: "s3cret", Token: tc.token})
			img := smallImage(t)
			ref := reg.Push(t, "private/app:1.0", img)
			pushTokens := reg.TokensIssued()

			o := options(t)
			o.Registries = map[string]fetch.Registry{reg.Host: {Username: "alice", Password: "s3cret"}}
			sameImage(t, pull(t, ref, o).Image, img)
			if tc.token && reg.TokensIssued() <= pushTokens {
				t.Errorf("the pull took no bearer token (issued %d, %d by the push)", reg.TokensIssued(), pushTokens)
			}

			for _, creds := range []fetch.Registry{{Username: "alice", Password: "wrong"}, {}} {
				o := options(t)
				o.Registries = map[string]fetch.Registry{reg.Host: creds}
				err := pullErr(t, ref, o, fetch.ErrUnauthorized)
				if want := "unauthorized: run hearth registry login " + reg.Host; !strings.Contains(err.Error(), want) {
					t.Errorf("with %+v: error %q, want it to say %q", creds, err, want)
				}
				var fe *fetch.Error
				if errors.As(err, &fe); fe.Status != 401 || fe.Registry != reg.Host || fe.Repository != "private/app" {
					t.Errorf("with %+v: error %+v, want HTTP 401 at %s/private/app", creds, fe, reg.Host)
				}
				if files := blobFiles(t, o.BlobDir); len(files) != 0 {
					t.Errorf("an unauthorized pull left %v", files)
				}
			}
		})
	}
}

// TestPullTLS pulls from a registry on 127.0.0.1 over HTTPS: with its CA
// over TLS only (nothing sent in plain HTTP); without it, a certificate
// error; marked Insecure, without the CA, it pulls.
func TestPullTLS(t *testing.T) {
	reg := registry.Start(t, registry.Options{TLS: true})
	img := smallImage(t)
	ref := reg.Push(t, "secure:1", img)

	s := &sniffer{target: reg.Host}
	o := fetch.WithDial(options(t), s.dial)
	o.Registries = map[string]fetch.Registry{reg.Host: {CA: reg.CA}}
	sameImage(t, pull(t, ref, o).Image, img)
	if s.sawPlain() {
		t.Errorf("a pull from a loopback host with a CA sent plain HTTP")
	}

	err := pullErr(t, ref, options(t), fetch.ErrTLS)
	if !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), reg.Host) {
		t.Errorf("error %q, want a certificate error naming %s", err, reg.Host)
	}

	o = options(t)
	o.Registries = map[string]fetch.Registry{reg.Host: {Insecure: true}}
	sameImage(t, pull(t, ref, o).Image, img)

	o = options(t)
	o.Registries = map[string]fetch.Registry{reg.Host: {CA: []byte("not PEM")}}
	pullErr(t, ref, o, fetch.ErrInvalid)
}

// TestPullPlainHTTPOnlyToLoopback checks which hosts are spoken to over
// plain HTTP. The registry serves plain HTTP on 127.0.0.1; a dialer that
// leads every connection there (nothing leaves loopback, no name is
// resolved) stands in for hosts elsewhere. A private address, a public
// one and a name are never sent plain HTTP unless marked Insecure (for a
// private address go-containerregistry would try, and the transport
// refuses: ErrPlainHTTP); a loopback host is, unless its Registry gives a
// CA.
func TestPullPlainHTTPOnlyToLoopback(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := smallImage(t)
	reg.Push(t, "app:1", img)
	_, port, _ := net.SplitHostPort(reg.Host)

	for _, tc := range []struct {
		host string
		kind error
	}{{"10.1.2.3", fetch.ErrPlainHTTP}, {"203.0.113.7", nil}, {"registry.example", nil}} {
		t.Run(tc.host, func(t *testing.T) {
			hp := net.JoinHostPort(tc.host, port)
			s := &sniffer{target: reg.Host}
			_, err := fetch.Pull(t.Context(), hp+"/app:1", fetch.WithDial(options(t), s.dial))
			var fe *fetch.Error
			if !errors.As(err, &fe) || fe.Registry != hp || (tc.kind != nil && !errors.Is(err, tc.kind)) {
				t.Fatalf("Pull(%s/app:1) = %v, want a *fetch.Error at %s of kind %v", hp, err, hp, tc.kind)
			}
			if s.sawPlain() || len(s.addrs) == 0 {
				t.Errorf("dialed %v; plain HTTP sent: %v, want TLS only", s.addrs, s.sawPlain())
			}

			s = &sniffer{target: reg.Host}
			o := fetch.WithDial(options(t), s.dial)
			o.Registries = map[string]fetch.Registry{hp: {Insecure: true}}
			sameImage(t, pull(t, hp+"/app:1", o).Image, img)
			if !s.sawPlain() {
				t.Errorf("marked Insecure, %s was not reached over plain HTTP", hp)
			}
		})
	}

	t.Run("loopback", func(t *testing.T) {
		for _, host := range []string{"localhost", "127.0.0.2", "[::1]"} {
			s := &sniffer{target: reg.Host}
			sameImage(t, pull(t, host+":"+port+"/app:1", fetch.WithDial(options(t), s.dial)).Image, img)
		}
	})
	t.Run("loopback with a CA", func(t *testing.T) {
		tlsReg := registry.Start(t, registry.Options{TLS: true})
		s := &sniffer{target: reg.Host}
		o := fetch.WithDial(options(t), s.dial)
		o.Registries = map[string]fetch.Registry{reg.Host: {CA: tlsReg.CA}}
		pullErr(t, reg.Ref("app:1"), o, fetch.ErrPlainHTTP)
		if s.sawPlain() {
			t.Errorf("plain HTTP was sent to a loopback host with a CA")
		}
	})
}

// TestPullRedirects serves layers through redirects: from a loopback
// registry to loopback they are followed; from a registry elsewhere (a
// public address, through the test's dialer) to an internal address they
// are refused, without retrying.
func TestPullRedirects(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := smallImage(t)
	reg.Push(t, "app:1", img)
	front := newProxy(t, reg.Host, func(w http.ResponseWriter, r *http.Request, resp *http.Response) bool {
		if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
			return false
		}
		http.Redirect(w, r, "http://"+reg.Host+r.URL.Path, http.StatusTemporaryRedirect)
		return true
	})
	sameImage(t, pull(t, front.host()+"/app:1", options(t)).Image, img)

	_, port, _ := net.SplitHostPort(front.host())
	hp := "203.0.113.7:" + port
	s := &sniffer{target: front.host()}
	o := fetch.WithDial(options(t), s.dial)
	o.Registries = map[string]fetch.Registry{hp: {Insecure: true}}
	before := front.count()
	_, err := fetch.Pull(t.Context(), hp+"/app:1", o)
	if want := "redirect from 203.0.113.7 to internal address 127.0.0.1 refused"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Pull(%s/app:1) = %v, want %q", hp, err, want)
	}
	front.mu.Lock()
	blobGets := 0
	for _, r := range front.requests[before:] {
		if strings.Contains(r.URL.Path, "/blobs/") {
			blobGets++
		}
	}
	front.mu.Unlock()
	if blobGets != 1 { // the config's, refused; not retried, and no layer's
		t.Errorf("%d blob GETs, want 1: a refused redirect was retried", blobGets)
	}
	t.Log(err)
}

// TestPullPublicOnly: under PublicOnly a registry at an internal address
// is refused (ErrInternal) before anything is dialed, whether the
// reference names it by IP literal or by a name that resolves to it,
// unless Registries lists the host (a tenant's login): then it pulls.
func TestPullPublicOnly(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := smallImage(t)
	reg.Push(t, "app:1", img)
	_, port, _ := net.SplitHostPort(reg.Host)
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "registry.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, fmt.Errorf("no such host %s in this test", host)
	}
	for _, host := range []string{"registry.test", "127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			hp := net.JoinHostPort(host, port)
			s := &sniffer{target: reg.Host}
			o := fetch.WithLookup(fetch.WithDial(options(t), s.dial), lookup)
			o.PublicOnly = true
			if host == "registry.test" {
				o.Registries = map[string]fetch.Registry{} // plain HTTP needs Insecure, which lists it
			}
			pullErr(t, hp+"/app:1", o, fetch.ErrInternal)
			if len(s.addrs) != 0 {
				t.Errorf("dialed %v for a refused internal registry", s.addrs)
			}
			o.Registries = map[string]fetch.Registry{hp: {Insecure: host == "registry.test"}}
			sameImage(t, pull(t, hp+"/app:1", o).Image, img)
		})
	}
}
