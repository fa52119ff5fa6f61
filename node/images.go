package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/sandbox"
)

// Images: the node's images live in its layer store (package image); what
// a pull downloads and what an import spools waits in Options.ImageDir.

// images returns the node's image store, or an error saying it has none.
func (l *Local) images() (*image.Store, error) {
	if l.opts.Images == nil || l.opts.ImageDir == "" {
		return nil, errors.New("node: this node keeps no images (Options.Images and ImageDir)")
	}
	return l.opts.Images, nil
}

// fetchOptions are the options of a pull or an import with registries
// regs and progress.
func (l *Local) fetchOptions(regs map[string]Registry, progress func(sandbox.ImageProgress)) fetch.Options {
	opts := fetch.Options{BlobDir: filepath.Join(l.opts.ImageDir, "blobs"), Progress: progress}
	if len(regs) > 0 {
		opts.Registries = make(map[string]fetch.Registry, len(regs))
		for host, r := range regs {
			opts.Registries[host] = fetch.Registry{Username: r.Username, Password: r.Password, CA: r.CA, Insecure: r.Insecure}
		}
	}
	return opts
}

// PullImage implements Node.
func (l *Local) PullImage(ctx context.Context, req PullRequest) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	pulled, err := fetch.Pull(ctx, req.Ref, l.fetchOptions(req.Registries, req.Progress))
	if err != nil {
		return sandbox.Image{}, err
	}
	return l.unpack(ctx, store, pulled, req.Ref, req.Progress)
}

// ImportImage implements Node.
func (l *Local) ImportImage(ctx context.Context, r io.Reader, progress func(sandbox.ImageProgress)) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	spool, err := os.MkdirTemp(l.opts.ImageDir, "import-")
	if err != nil {
		return sandbox.Image{}, err
	}
	defer os.RemoveAll(spool)
	pulled, err := fetch.ReadArchive(ctx, r, spool, l.fetchOptions(nil, progress))
	if err != nil {
		return sandbox.Image{}, err
	}
	return l.unpack(ctx, store, pulled, "", progress)
}

// unpack stores what a pull or an import fetched.
func (l *Local) unpack(ctx context.Context, store *image.Store, pulled fetch.Pulled, ref string, progress func(sandbox.ImageProgress)) (sandbox.Image, error) {
	u, err := store.Unpack(ctx, pulled.Image, pulled.Digest, progress)
	if err != nil {
		return sandbox.Image{}, err
	}
	return sandbox.Image{Name: pulled.Name, Ref: ref, Digest: pulled.Digest, Layers: u.Layers, Config: u.Config, Size: u.Size}, nil
}

// CommitImage implements Node.
func (l *Local) CommitImage(ctx context.Context, ck, digest string, cfg sandbox.ImageConfig) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	u, err := store.Commit(ctx, checkpointKey(ck), digest, cfg)
	if err != nil {
		return sandbox.Image{}, err
	}
	size, err := l.opts.Layers.Usage(ctx, checkpointKey(ck))
	if err != nil {
		size = 0 // what it holds is reported where the store can count it
	}
	return sandbox.Image{Digest: digest, Layers: u.Layers, Config: u.Config, Size: size}, nil
}

// ApplyImage implements Node.
func (l *Local) ApplyImage(ctx context.Context, parent, digest string, r io.Reader, cfg sandbox.ImageConfig) (sandbox.Image, error) {
	store, err := l.images()
	if err != nil {
		return sandbox.Image{}, err
	}
	u, err := store.Apply(ctx, parent, digest, r, cfg)
	if err != nil {
		return sandbox.Image{}, err
	}
	return sandbox.Image{Digest: digest, Layers: u.Layers, Config: u.Config}, nil
}

// ResolveUser implements Node.
func (l *Local) ResolveUser(ctx context.Context, key, user string) (uid, gid int, err error) {
	store, err := l.images()
	if err != nil {
		return 0, 0, err
	}
	return store.ResolveUser(ctx, key, user)
}

// ExportImage implements Node.
func (l *Local) ExportImage(ctx context.Context, img sandbox.Image, w io.Writer) error {
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
func (l *Local) RemoveImageKeys(ctx context.Context, keys []string) error {
	store, err := l.images()
	if err != nil {
		return err
	}
	return store.Remove(ctx, keys)
}
