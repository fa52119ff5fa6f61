package fetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// remote is one repository of one registry, reached with its credentials.
type remote struct {
	o      *Options
	ref    name.Reference
	host   string // the registry's host[:port], lower-cased
	repo   string
	tag    string // the tag ref names, "" for a digest
	rt     *roundTripper
	client *http.Client
}

// connect parses ref and authenticates to its registry for pulling from
// its repository (a ping, then go-containerregistry's answer to the
// challenge: basic credentials, or a bearer token fetched with them).
func connect(ctx context.Context, ref string, o *Options) (*remote, error) {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, kindf(ErrInvalid, "reference %q: %v", ref, err)
	}
	host := strings.ToLower(parsed.Context().RegistryStr())
	if o.plainHTTP(host) {
		// go-containerregistry then tries HTTPS first and falls back to
		// HTTP; without it, HTTPS only (save its own guesses for private
		// addresses, which the round-tripper refuses).
		if parsed, err = name.ParseReference(ref, name.Insecure); err != nil {
			return nil, kindf(ErrInvalid, "reference %q: %v", ref, err)
		}
	}
	r := &remote{o: o, ref: parsed, host: host, repo: parsed.Context().RepositoryStr()}
	if t, ok := parsed.(name.Tag); ok {
		r.tag = t.TagStr()
	}
	if r.rt, err = newRoundTripper(o); err != nil {
		return nil, r.fail("", "", err)
	}
	auth := authn.Anonymous
	if reg, ok := o.registry(host); ok && reg.Username != "" {
		auth = &authn.Basic{Username: reg.Username, Password: reg.Password}
	}
	scopes := []string{parsed.Context().Scope(transport.PullScope)}
	tr, err := transport.NewWithContext(ctx, parsed.Context().Registry, auth, r.rt, scopes)
	if err != nil {
		r.rt.closeIdle()
		return nil, r.fail("", "", err)
	}
	r.client = &http.Client{Transport: tr, CheckRedirect: checkRedirect}
	return r, nil
}

func (r *remote) close() { r.rt.closeIdle() }

// url is the URL of one of the repository's manifests or blobs
// (kind "manifests" or "blobs"). The scheme is go-containerregistry's
// first guess; its transport puts in the one the ping found.
func (r *remote) url(kind, id string) string {
	u := url.URL{
		Scheme: r.ref.Context().Scheme(),
		Host:   r.ref.Context().RegistryStr(),
		Path:   fmt.Sprintf("/v2/%s/%s/%s", r.repo, kind, id),
	}
	return u.String()
}

// get sends a GET for url with header, failing on a status that is not
// one of ok (the registry's error, placed at the object what of digest).
func (r *remote) get(ctx context.Context, url, what, digest string, header http.Header, ok ...int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	if err := transport.CheckError(resp, ok...); err != nil {
		resp.Body.Close()
		return nil, r.fail(what, digest, err)
	}
	return resp, nil
}

// acceptManifests are the manifest media types a pull asks for: never
// Docker's schema 1.
var acceptManifests = strings.Join([]string{
	string(types.OCIManifestSchema1), string(types.OCIImageIndex),
	string(types.DockerManifestSchema2), string(types.DockerManifestList),
}, ", ")

// manifest fetches the manifest id names (a tag or a digest), at most
// MaxManifestBytes, and checks it against want when a digest is expected.
// It returns the bytes, their digest and their media type.
func (r *remote) manifest(ctx context.Context, id string, want *v1.Hash) (raw []byte, d v1.Hash, mt types.MediaType, err error) {
	at := ""
	if want != nil {
		at = want.String()
	}
	err = r.retry(ctx, func() error {
		resp, err := r.get(ctx, r.url("manifests", id), "manifest", at, http.Header{"Accept": {acceptManifests}}, http.StatusOK)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, err = readLimited(resp.Body, resp.ContentLength, r.o.MaxManifestBytes, "manifest")
		return err
	})
	if err != nil {
		return nil, v1.Hash{}, "", r.fail("manifest", at, err)
	}
	d, _, _ = v1.SHA256(bytes.NewReader(raw))
	if want != nil && d != *want {
		return nil, d, "", r.fail("manifest", at, kindf(ErrDigest, "the registry sent a manifest whose digest is %s", d))
	}
	if mt, err = manifestType(raw); err != nil {
		return nil, d, "", r.fail("manifest", d.String(), err)
	}
	return raw, d, mt, nil
}

// blob fetches a small blob (a config) of at most max bytes and verifies
// it against its descriptor.
func (r *remote) blob(ctx context.Context, d v1.Descriptor, max int64, what string) ([]byte, error) {
	at := d.Digest.String()
	if d.Size > max {
		return nil, r.fail(what, at, kindf(ErrTooLarge, "the %s is %d bytes, more than the limit of %d", what, d.Size, max))
	}
	var raw []byte
	err := r.retry(ctx, func() error {
		resp, err := r.get(ctx, r.url("blobs", at), what, at, nil, http.StatusOK)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, err = readLimited(resp.Body, resp.ContentLength, max, what)
		return err
	})
	if err != nil {
		return nil, r.fail(what, at, err)
	}
	if err := verify(bytes.NewReader(raw), what, d); err != nil {
		return nil, r.fail(what, at, err)
	}
	return raw, nil
}

// readLimited reads body whole if it holds at most max bytes: refused
// from its Content-Length (length, -1 if unknown) before reading, or as
// soon as more arrives.
func readLimited(body io.Reader, length, max int64, what string) ([]byte, error) {
	if length > max {
		return nil, kindf(ErrTooLarge, "the %s is %d bytes, more than the limit of %d", what, length, max)
	}
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, kindf(ErrTooLarge, "the %s is more than the limit of %d bytes", what, max)
	}
	return b, nil
}

// retry runs fn until it succeeds, fails in a way that will not pass, or
// has been tried again Options.Retries times, waiting twice as long before
// each new try.
func (r *remote) retry(ctx context.Context, fn func() error) error {
	return retry(ctx, r.o, fn)
}

func retry(ctx context.Context, o *Options, fn func() error) error {
	delay := o.backoff
	for attempt := 0; ; attempt++ {
		err := fn()
		if attempt >= o.Retries || !temporary(err) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 30*time.Second)
	}
}
