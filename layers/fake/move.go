package fake

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hearth/hearth/layers"
)

var _ layers.Mover = (*Store)(nil)

// Send writes the snapshot key as its kind's line ("active" or
// "committed") and a tar of all its files (directories, regular files,
// symlinks), whatever base is; base must be a committed snapshot when it
// is not "". See layers.Mover.
func (s *Store) Send(ctx context.Context, key, base string, w io.Writer) error {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return err
	}
	if base != "" {
		if b, err := s.Stat(ctx, base); err != nil {
			return err
		} else if b.Kind != layers.KindCommitted {
			return fmt.Errorf("send %q: base %q is not committed: %w", key, base, layers.ErrInvalid)
		}
	}
	if _, err := io.WriteString(w, string(info.Kind)+"\n"); err != nil {
		return err
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
	br := bufio.NewReader(r)
	kind, err := br.ReadString('\n')
	if kind = strings.TrimSuffix(kind, "\n"); err != nil || kind != string(layers.KindActive) && kind != string(layers.KindCommitted) {
		return "", fmt.Errorf("receive %q: %w: not a stream Send wrote", key, layers.ErrInvalid)
	}
	build := key
	if kind == string(layers.KindCommitted) {
		build = key + "-receive"
	}
	path, err := s.Prepare(ctx, build, parent)
	if err != nil {
		return "", err
	}
	if err := replaceWithTar(path, br); err != nil {
		s.Remove(ctx, build)
		return "", fmt.Errorf("receive %q: %w: %v", key, layers.ErrInvalid, err)
	}
	if build == key {
		return path, nil
	}
	if err := s.Commit(ctx, key, build); err != nil {
		s.Remove(ctx, build)
		return "", err
	}
	info, err := s.Stat(ctx, key)
	return info.Path, err
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
