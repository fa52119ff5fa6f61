package fake

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hearth/hearth/layers"
)

var _ layers.Mover = (*Store)(nil)

// Send writes the active snapshot key as a tar of all its files
// (directories, regular files, symlinks), whatever base is; base must be
// a committed snapshot when it is not "". See layers.Mover.
func (s *Store) Send(ctx context.Context, key, base string, w io.Writer) error {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return err
	}
	if info.Kind != layers.KindActive {
		return fmt.Errorf("send %q: %w", key, layers.ErrInvalid)
	}
	if base != "" {
		if b, err := s.Stat(ctx, base); err != nil {
			return err
		} else if b.Kind != layers.KindCommitted {
			return fmt.Errorf("send %q: base %q is not committed: %w", key, base, layers.ErrInvalid)
		}
	}
	tw := tar.NewWriter(w)
	if err := tw.AddFS(os.DirFS(info.Path)); err != nil {
		return err
	}
	return tw.Close()
}

// Receive makes key from parent (or empty) with the files of a tar Send
// wrote in place of the parent's, extracted inside key's directory only.
// See layers.Mover.
func (s *Store) Receive(ctx context.Context, key, parent string, r io.Reader) (string, error) {
	path, err := s.Prepare(ctx, key, parent)
	if err != nil {
		return "", err
	}
	if err := replaceWithTar(path, r); err != nil {
		s.Remove(ctx, key)
		return "", fmt.Errorf("receive %q: %w: %v", key, layers.ErrInvalid, err)
	}
	return path, nil
}

// replaceWithTar empties dir and extracts the tar r into it.
func replaceWithTar(dir string, r io.Reader) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.Mkdir(h.Name, mode)
		case tar.TypeSymlink:
			err = root.Symlink(h.Linkname, h.Name)
		case tar.TypeReg:
			var f *os.File
			if f, err = root.OpenFile(h.Name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode); err == nil {
				_, err = io.Copy(f, tr)
				err = errors.Join(err, f.Close())
			}
		default:
			err = fmt.Errorf("%s: tar entry type %q is not supported", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}
