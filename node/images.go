package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/sandbox"
)

// Images: the node's images live in its layer store (package image); what
// a pull downloads and what an import spools waits in Options.ImageDir.

// localImages is Local's image calls (see Node), over its options.
type localImages struct {
	opts *Options
	log  *slog.Logger
}

// images returns the node's image store, or an error saying it has none.
func (l localImages) images() (*image.Store, error) {
	if l.opts.Images == nil || l.opts.ImageDir == "" {
		return nil, errors.New("node: this node keeps no images (Options.Images and ImageDir)")
	}
	return l.opts.Images, nil
}

// fetchOptions are the options of a pull or an import with registries
// regs, at most maxBytes (0: fetch's default) and progress.
func (l localImages) fetchOptions(regs map[string]Registry, maxBytes int64, progress func(sandbox.ImageProgress)) fetch.Options {
	opts := fetch.Options{BlobDir: filepath.Join(l.opts.ImageDir, "blobs"), MaxImageBytes: maxBytes, Progress: progress}
	if len(regs) > 0 {
		opts.Registries = make(map[string]fetch.Registry, len(regs))
		for host, r := range regs {
			opts.Registries[host] = fetch.Registry{Username: r.Username, Password: r.Password, CA: r.CA, Insecure: r.Insecure}
		}
	}
	return opts
}

// PullImage implements Node.
func (l localImages) PullImage(ctx context.Context, req PullRequest) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	opts := l.fetchOptions(req.Registries, req.MaxBytes, req.Progress)
	opts.PublicOnly = req.PublicOnly
	pulled, err := fetch.Pull(ctx, req.Ref, opts)
	if err != nil {
		return sandbox.Image{}, imageError("pull "+req.Ref, err)
	}
	img, err := l.unpack(ctx, store, pulled, req.Ref, req.Progress)
	if err == nil {
		// Stored: its downloaded blobs are needed no more (a failed
		// unpack keeps them, for the next pull).
		if ferr := fetch.Forget(opts.BlobDir, pulled.Image); ferr != nil {
			l.log.Warn("remove a pull's blobs", "ref", req.Ref, "err", ferr)
		}
	}
	return img, err
}

// ImportImage implements Node.
func (l localImages) ImportImage(ctx context.Context, req ImportRequest) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	spool, err := os.MkdirTemp(l.opts.ImageDir, "import-")
	if err != nil {
		return sandbox.Image{}, err
	}
	defer os.RemoveAll(spool)
	pulled, err := fetch.ReadArchive(ctx, req.Archive, spool, l.fetchOptions(nil, req.MaxBytes, req.Progress))
	if err != nil {
		return sandbox.Image{}, imageError("import", err)
	}
	return l.unpack(ctx, store, pulled, "", req.Progress)
}

// unpack stores what a pull or an import fetched.
func (l localImages) unpack(ctx context.Context, store *image.Store, pulled fetch.Pulled, ref string, progress func(sandbox.ImageProgress)) (sandbox.Image, error) {
	u, err := store.Unpack(ctx, pulled.Image, pulled.Digest, progress)
	if err != nil {
		return sandbox.Image{}, imageError("unpack "+pulled.Name, err)
	}
	return sandbox.Image{Name: pulled.Name, Ref: ref, Digest: pulled.Digest, Layers: u.Layers, Config: u.Config, Size: u.Size}, nil
}

// imageError is the sandbox.Error of a pull, an import or an unpack
// (what) that failed with err, by the kind fetch and image say it is;
// another error is returned as it is.
func imageError(what string, err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return err
	}
	e := func(code sandbox.Code, hint string) error {
		return sandbox.Errorf(code, "%s: %v", what, err).WithHint("%s", hint)
	}
	switch {
	case errors.Is(err, fetch.ErrUnauthorized):
		return e(sandbox.CodePermissionDenied, "`hearth registry login HOST --username U --password-stdin`, then pull again")
	case errors.Is(err, fetch.ErrNotFound):
		return e(sandbox.CodeNotFound, "check the repository and the tag")
	case errors.Is(err, fetch.ErrTooLarge):
		return e(sandbox.CodeTooLarge, "the image is larger than what may be stored for it (the tenant's disk budget, or the daemon's limits)")
	case errors.Is(err, fetch.ErrDigest), errors.Is(err, fetch.ErrInvalid), errors.Is(err, fetch.ErrUnsupported), errors.Is(err, image.ErrInvalid):
		return e(sandbox.CodeInvalidArgument, "the image is malformed or refused for what it holds; nothing of it was kept")
	case errors.Is(err, fetch.ErrTLS):
		return e(sandbox.CodeUnavailable, "give the registry's CA: `hearth registry login HOST … --ca-file CA.pem` (or --insecure)")
	case errors.Is(err, fetch.ErrInternal):
		return e(sandbox.CodePermissionDenied, "a registry on the host's own or a private network needs the tenant's login: ask a tenant admin to run `hearth registry login HOST --username U --password-stdin`")
	case errors.Is(err, fetch.ErrPlainHTTP):
		return e(sandbox.CodeUnavailable, "only loopback registries are spoken to over plain HTTP; use TLS, or pull with --insecure")
	}
	return err
}

// TopKey is the layer key of the top of the image version digest: what
// CommitImage and ApplyImage make for an image.
func TopKey(digest string) (string, error) { return image.TopKey(digest) }

// StepKey is the layer key of a build step's root whose cache key is
// digest: what CommitImage and ApplyImage make for a build's step, which
// no image names (the caller's build cache keeps it, or its collection
// removes it).
func StepKey(digest string) (string, error) { return image.StepKey(digest) }

// CommitImage implements Node.
func (l localImages) CommitImage(ctx context.Context, ck, key string, cfg sandbox.ImageConfig) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	u, err := store.Commit(ctx, checkpointKey(ck), key, cfg)
	if err != nil {
		return sandbox.Image{}, err
	}
	size, err := l.opts.Layers.Usage(ctx, checkpointKey(ck))
	if err != nil {
		size = 0 // what it holds is reported where the store can count it
	}
	return sandbox.Image{Layers: u.Layers, Config: u.Config, Size: size}, nil
}

// ApplyImage implements Node.
func (l localImages) ApplyImage(ctx context.Context, parent, key string, r io.Reader, cfg sandbox.ImageConfig) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	u, err := store.Apply(ctx, parent, key, r, cfg)
	if err != nil {
		return sandbox.Image{}, imageError("apply", err)
	}
	return sandbox.Image{Layers: u.Layers, Config: u.Config, Size: u.Size}, nil
}

// ResolveUser implements Node.
func (l localImages) ResolveUser(ctx context.Context, key, user string) (uid, gid int, err error) {
	store, err := l.images()
	if err != nil {
		return 0, 0, err
	}
	return store.ResolveUser(ctx, key, user)
}

// ExportImage implements Node.
func (l localImages) ExportImage(ctx context.Context, img sandbox.Image, w io.Writer) error {
	store, err := l.images()
	if err != nil {
		return err
	}
	if img.Key() == "" {
		return fmt.Errorf("node: image %s has no layers", img.Name)
	}
	return store.Export(ctx, img.Key(), img.Name, img.Config, l.opts.ImageDir, w)
}

// RemoveImageKeys implements Node.
func (l localImages) RemoveImageKeys(ctx context.Context, keys []string) error {
	store, err := l.images()
	if err != nil {
		return err
	}
	return store.Remove(ctx, keys)
}
