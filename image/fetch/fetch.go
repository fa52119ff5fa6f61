// Package fetch gets OCI images into hearth: Pull from a registry, and
// ReadArchive from an image archive (docker save's, or an OCI layout in a
// tar); WriteArchive writes one out; Open reads a layer's tar stream.
//
// Everything an image holds is attacker input: every blob is checked
// against its digest (a blob that does not match is an error, and its file
// is removed), manifests and configs are bounded before they are read
// whole, and only the media types of container images are accepted (OCI
// image manifests and indexes; Docker image manifest v2 schema 2 and
// manifest lists; never schema 1). Registries are reached with
// github.com/google/go-containerregistry's transport, which answers their
// basic and bearer-token authentication challenges.
//
// Plain HTTP is spoken only to loopback hosts (localhost, 127.0.0.0/8,
// [::1]), as Docker does, and to hosts whose Registry says Insecure; any
// other host, or a loopback one whose Registry gives a CA, is reached over
// TLS only.
package fetch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"

	"github.com/hearth/hearth/sandbox"
)

// Registry is how to reach one registry host.
type Registry struct {
	// Username and Password are the account (a password or a token);
	// empty Username is anonymous.
	Username, Password string
	// CA is a PEM bundle of certificate authorities trusted for this host
	// on top of the system's roots. A loopback host with a CA is spoken to
	// over TLS only.
	CA []byte
	// Insecure allows plain HTTP, or HTTPS with a certificate that is not
	// verified, for this host only.
	Insecure bool
}

// Options say how images are fetched; the zero value works (Pull needs
// BlobDir).
type Options struct {
	// Registries are keyed by host[:port] as references name them
	// ("127.0.0.1:5000", "ghcr.io"; Docker Hub is "docker.io" or
	// "index.docker.io"). Keys are compared lower-cased.
	Registries map[string]Registry
	// BlobDir is where Pull downloads blobs: content-addressed,
	// BlobDir/sha256/<hex>, each one verified before it is given that
	// name. A download cut short stays as sha256/<hex>.partial and the next
	// attempt resumes it with an HTTP Range request. Concurrent pulls may
	// share a BlobDir.
	BlobDir string
	// Platform is the image an index resolves to (default: linux on this
	// machine's architecture); an image whose config names another
	// platform is refused.
	Platform v1.Platform
	// MaxManifestBytes (default 4 MiB) and MaxConfigBytes (default 8 MiB)
	// bound manifests and indexes, and image configs: larger ones are
	// refused (ErrTooLarge) before they are read whole.
	MaxManifestBytes, MaxConfigBytes int64
	// MaxImageBytes bounds the layers' compressed bytes in all (default
	// 64 GiB): a manifest that adds up to more is refused before any layer
	// is fetched, an archive whose files hold more while it is read.
	MaxImageBytes int64
	// Parallel is how many layers download at once (default 4).
	Parallel int
	// Retries is how many times a request that failed in a way that may
	// pass (a cut connection, a 5xx, 429) is tried again, with exponential
	// backoff (default 5; negative: never).
	Retries int
	// Progress, if set, is told of the resolve and of each layer's
	// download; calls are serialized.
	Progress func(sandbox.ImageProgress)
	// PublicOnly refuses connections to internal addresses (loopback,
	// private, link-local, unspecified) for every host Registries does
	// not list (ErrInternal): a registry, its token service, a redirect's
	// target. A name is resolved here and the connection made to the
	// address that was checked, so a name that resolves to the host's own
	// network is refused as its IP literal would be.
	PublicOnly bool

	// backoff is the first retry's delay (default 250 ms); stall is how
	// long a download may receive nothing before it is cut and tried
	// again (default 60 s); dial replaces the TCP dialer; lookup replaces
	// the resolver PublicOnly asks. They are for tests (export_test.go).
	backoff time.Duration
	stall   time.Duration
	dial    dialFunc
	lookup  func(ctx context.Context, host string) ([]netip.Addr, error)
}

// dialFunc is a DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Defaults.
const (
	defaultMaxManifest = 4 << 20
	defaultMaxConfig   = 8 << 20
	defaultMaxImage    = 64 << 30
	defaultParallel    = 4
	defaultRetries     = 5
	defaultBackoff     = 250 * time.Millisecond
	defaultStall       = 60 * time.Second
	// maxLayers bounds an image's layers; Docker refuses more than 127.
	maxLayers = 1000
)

func (o Options) withDefaults() Options {
	if o.Platform.OS == "" && o.Platform.Architecture == "" {
		o.Platform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	}
	set := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&o.MaxManifestBytes, defaultMaxManifest)
	set(&o.MaxConfigBytes, defaultMaxConfig)
	set(&o.MaxImageBytes, defaultMaxImage)
	if o.Parallel <= 0 {
		o.Parallel = defaultParallel
	}
	switch {
	case o.Retries == 0:
		o.Retries = defaultRetries
	case o.Retries < 0:
		o.Retries = 0
	}
	if o.backoff <= 0 {
		o.backoff = defaultBackoff
	}
	if o.stall <= 0 {
		o.stall = defaultStall
	}
	regs := make(map[string]Registry, len(o.Registries))
	for host, r := range o.Registries {
		regs[strings.ToLower(host)] = r
	}
	o.Registries = regs
	return o
}

// registry is host's entry in Registries (host lower-cased; Docker Hub's
// under either of its names).
func (o *Options) registry(host string) (Registry, bool) {
	host = strings.ToLower(host)
	r, ok := o.Registries[host]
	if !ok && host == "index.docker.io" {
		r, ok = o.Registries["docker.io"]
	}
	return r, ok
}

// Pulled is an image fetched from a registry or read from an archive.
type Pulled struct {
	// Name is the normalized reference pulled ("127.0.0.1:5000/app:1.0",
	// "index.docker.io/library/debian:12", "…/app@sha256:…"), or for an
	// archive the name it records (org.opencontainers.image.ref.name, or
	// docker save's first tag; "" when it has none).
	Name string
	// Digest is the image manifest's digest ("sha256:<hex>"): that of the
	// platform's manifest when the reference named an index.
	Digest string
	// Index is the digest of the index the image was picked from, "" if
	// none.
	Index string
	// Image is the image; its layers are served from the blob directory
	// (Open reads them verified).
	Image v1.Image
}

// Pull fetches the image ref names (HOST[:PORT]/REPO[:TAG|@DIGEST]; a
// reference without a host is Docker Hub's, one without a tag is
// ":latest"): it resolves the manifest, picks Options.Platform's image from
// an index, fetches the config, and downloads every layer blob into
// Options.BlobDir, Options.Parallel at a time, resuming .partial files and
// retrying what may pass. Every blob is verified against its digest.
//
// Errors are *Error, naming the registry, the repository, the digest and
// the HTTP status where there is one; errors.Is finds their kind:
// ErrUnauthorized ("unauthorized: run hearth registry login HOST"),
// ErrNotFound, ErrTooLarge, ErrDigest, ErrUnsupported (schema 1, another
// platform, not a container image), ErrInvalid, ErrTLS, ErrPlainHTTP.
func Pull(ctx context.Context, ref string, opts Options) (Pulled, error) {
	o := opts.withDefaults()
	if o.BlobDir == "" {
		return Pulled{}, errors.New("fetch: Options.BlobDir is not set")
	}
	r, err := connect(ctx, ref, &o)
	if err != nil {
		return Pulled{}, err
	}
	defer r.close()
	rep := newReporter(o.Progress)
	rep.send(sandbox.ImageProgress{Phase: "resolve", Text: r.ref.Name()})
	res, err := r.resolve(ctx)
	if err != nil {
		return Pulled{}, err
	}
	if err := r.fetchLayers(ctx, res.manifest.Layers, rep); err != nil {
		return Pulled{}, err
	}
	img, err := newImage(o.BlobDir, res)
	if err != nil {
		return Pulled{}, r.fail("manifest", res.digest.String(), err)
	}
	return Pulled{Name: r.ref.Name(), Digest: res.digest.String(), Index: res.index, Image: img}, nil
}

// fetchLayers downloads layers (each distinct digest once), Parallel at a
// time; the first failure stops the others, leaving what they fetched
// to be resumed.
func (r *remote) fetchLayers(ctx context.Context, layers []v1.Descriptor, rep *reporter) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(r.o.Parallel)
	seen := map[v1.Hash]bool{}
	for _, l := range layers {
		if seen[l.Digest] {
			continue
		}
		seen[l.Digest] = true
		g.Go(func() error { return r.fetchBlob(ctx, l, rep.layer(l, len(layers))) })
	}
	return g.Wait()
}

// reporter serializes progress events to a caller's function.
type reporter struct {
	mu sync.Mutex
	fn func(sandbox.ImageProgress)
}

func newReporter(fn func(sandbox.ImageProgress)) *reporter { return &reporter{fn: fn} }

func (p *reporter) send(ev sandbox.ImageProgress) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fn(ev)
}

// progressStep is how many bytes of a layer pass between its events.
const progressStep = 1 << 20

// layer returns the progress function of layer l of an image of n
// layers: told the bytes done so far, and cached when the blob was
// already there.
func (p *reporter) layer(l v1.Descriptor, n int) func(done int64, cached bool) {
	var last int64 = -1
	return func(done int64, cached bool) {
		if done != l.Size && !cached && last >= 0 && done-last < progressStep {
			return
		}
		last = done
		p.send(sandbox.ImageProgress{Phase: "layer", Layer: l.Digest.String(), Bytes: done, Total: l.Size, Layers: n, Cached: cached})
	}
}
