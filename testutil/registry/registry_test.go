package registry_test

import (
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/hearth/hearth/testutil/registry"
)

// TestStart starts each kind of registry, pushes an image and reads it
// back with go-containerregistry, and checks that a registry with an
// account refuses an anonymous request.
func TestStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts registry.Options
	}{
		{"anonymous", registry.Options{}},
		{"tls", registry.Options{TLS: true}},
		{"basic", registry.Options{Username: "alice", Password: "s3cret"}},
		{"token", registry.Options{Username: "alice", Password: "s3cret", Token: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registry.Start(t, tc.opts)
			img := registry.Image(t, registry.Layer(t, compression.GZip, map[string]string{"etc/hello": "hi\n"}))
			ref := reg.Push(t, "app:1.0", img)
			if want := reg.Host + "/app:1.0"; ref != want {
				t.Errorf("Push = %q, want %q", ref, want)
			}
			r, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			got, err := remote.Image(r, reg.Options(t.Context())...)
			if err != nil {
				t.Fatalf("remote.Image(%s): %v", ref, err)
			}
			gd, _ := got.Digest()
			wd, _ := img.Digest()
			if gd != wd {
				t.Errorf("pulled digest %s, want %s", gd, wd)
			}

			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, reg.URL()+"/v2/app/manifests/1.0", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
			resp, err := (&http.Client{Transport: reg.Transport()}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusOK
			if tc.opts.Username != "" {
				want = http.StatusUnauthorized
			}
			if resp.StatusCode != want {
				t.Errorf("anonymous GET manifest = %d, want %d", resp.StatusCode, want)
			}
			if tc.opts.Token && reg.TokensIssued() == 0 {
				t.Errorf("TokensIssued() = 0 after a push and a pull through bearer tokens")
			}
		})
	}
}
