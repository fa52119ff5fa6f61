package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/sandbox"
)

// Export writes the image whose top is key, with config cfg, to w as an OCI
// archive naming it name: one layer holding the top's whole tree (links
// not followed; device nodes, FIFOs and sockets left out, and the root
// directory's own mode and owner, which layertar.Write gives no entry)
// and cfg as its config. The layer is written to a temporary file in
// scratch first (to know its digest), removed before Export returns.
func (s *Store) Export(ctx context.Context, key, name string, cfg sandbox.ImageConfig, scratch string, w io.Writer) error {
	info, err := s.opts.Layers.Stat(ctx, key)
	if err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	root, err := openRoot(info.Path)
	if err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	defer root.Close()
	tmp, err := os.CreateTemp(scratch, "export-*.tar")
	if err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := layertar.Write(ctx, root, tmp); err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	layer, err := tarball.LayerFromFile(tmp.Name())
	if err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{
		Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User,
		Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Labels: cfg.Labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	if err := fetch.WriteArchive(ctx, w, name, img); err != nil {
		return fmt.Errorf("image: export %s: %w", name, err)
	}
	return nil
}
