package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/rootfs"
	"github.com/hearth/hearth/sandbox"
)

// top makes the image top key from the committed snapshot parent ("" for
// an image with no layers) unless it exists, and returns cfg with its
// user resolved against the top's files. The top has the mount points
// (directories, not symlinks), cfg's working directory and the user's
// home (made as directories where they are missing, symlinks on the way
// followed inside the root; a home or working directory made is the
// user's).
func (s *Store) top(ctx context.Context, key, parent string, cfg sandbox.ImageConfig) (sandbox.ImageConfig, error) {
	return s.topWith(ctx, key, parent, cfg, nil)
}

// topWith is top, with the layer tar r (when not nil) applied onto the
// parent's content first.
func (s *Store) topWith(ctx context.Context, key, parent string, cfg sandbox.ImageConfig, r io.Reader) (sandbox.ImageConfig, error) {
	done, err := s.claim(ctx, key)
	if err != nil {
		return cfg, err
	}
	defer done()
	ok, err := s.exists(ctx, key)
	if err != nil {
		return cfg, err
	}
	if ok {
		info, err := s.opts.Layers.Stat(ctx, key)
		if err != nil {
			return cfg, err
		}
		return resolveIn(info.Path, cfg)
	}
	tmp := topTmpPrefix + key
	err = s.make(ctx, key, tmp, parent, func(dir string) error {
		if r != nil {
			if err := applyTar(ctx, dir, r, s.opts.Limits); err != nil {
				return err
			}
		}
		if cfg, err = resolveIn(dir, cfg); err != nil {
			return err
		}
		return addDirs(dir, cfg)
	})
	return cfg, err
}

// resolveIn resolves cfg's user in the root at dir (see resolveUser) and
// cleans its working directory.
func resolveIn(dir string, cfg sandbox.ImageConfig) (sandbox.ImageConfig, error) {
	root, err := openRoot(dir)
	if err != nil {
		return cfg, err
	}
	defer root.Close()
	if cfg.UID, cfg.GID, cfg.Home, err = resolveUser(root, cfg.User); err != nil {
		return cfg, err
	}
	if cfg.WorkingDir != "" {
		cfg.WorkingDir = path.Clean("/" + cfg.WorkingDir)
	}
	return cfg, nil
}

// addDirs makes, in the root at dir, the mount points, cfg's working
// directory and home.
func addDirs(dir string, cfg sandbox.ImageConfig) error {
	root, err := openRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, m := range mountPoints {
		if err := mkdirIn(root, m, 0o755, 0, 0); err != nil {
			return fmt.Errorf("mount point %s: %w", m, err)
		}
		// The runtime mounts there: a directory, not a symlink to one.
		d, err := openIn(root, m, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("mount point %s is not a directory: %w", m, err)
		}
		d.Close()
	}
	if err := fileIn(root, rootfs.AgentFile, 0o755); err != nil {
		return fmt.Errorf("mount point %s: %w", rootfs.AgentFile, err)
	}
	for _, d := range []string{cfg.Home, cfg.WorkingDir} {
		if d == "" || d == "/" {
			continue
		}
		if err := mkdirIn(root, d, 0o755, cfg.UID, cfg.GID); err != nil {
			return fmt.Errorf("directory %s: %w", d, err)
		}
	}
	return nil
}

// Commit stores the top key (TopKey's or StepKey's) whose root is the
// committed snapshot parent (a checkpoint's: an image made from a sandbox,
// a build's RUN) and whose config is cfg, its user resolved again against
// the root. The new top owns its content: parent may be removed
// afterwards.
func (s *Store) Commit(ctx context.Context, parent, key string, cfg sandbox.ImageConfig) (Unpacked, error) {
	if !isTop(key) {
		return Unpacked{}, fmt.Errorf("image: %q is not a top's key", key)
	}
	if ok, err := s.exists(ctx, parent); err != nil || !ok {
		return Unpacked{}, fmt.Errorf("image %s: its source %s: %w", key, parent, errors.Join(err, layers.ErrNotFound))
	}
	cfg, err := s.top(ctx, key, parent, cfg)
	if err != nil {
		return Unpacked{}, fmt.Errorf("image %s: %w", key, err)
	}
	return Unpacked{Layers: []string{key}, Config: cfg}, nil
}

// Apply stores the top key (TopKey's or StepKey's) whose root is the
// committed snapshot parent (a top) with the layer tar r applied onto it
// (nothing when r is nil), and whose config is cfg, its user resolved
// against the result: a build's step, or a built image's top. A key
// stored already is only resolved again (r is not read). Size is what the
// new top holds beyond parent.
func (s *Store) Apply(ctx context.Context, parent, key string, r io.Reader, cfg sandbox.ImageConfig) (Unpacked, error) {
	if !isTop(key) {
		return Unpacked{}, fmt.Errorf("image: %q is not a top's key", key)
	}
	cfg, err := s.topWith(ctx, key, parent, cfg, r)
	if err != nil {
		return Unpacked{}, fmt.Errorf("image %s: %w", key, err)
	}
	size, _ := s.opts.Layers.Usage(ctx, key)
	return Unpacked{Layers: []string{key}, Config: cfg, Size: size}, nil
}

// ResolveUser resolves user (as an image or a --chown names it) against
// the /etc/passwd and /etc/group of the committed snapshot key.
func (s *Store) ResolveUser(ctx context.Context, key, user string) (uid, gid int, err error) {
	info, err := s.opts.Layers.Stat(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	root, err := openRoot(info.Path)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	uid, gid, _, err = resolveUser(root, user)
	return uid, gid, err
}

// Keys lists the image keys the layer store holds (see IsKey), of any
// kind, through walk (a layer store's Walk).
func Keys(ctx context.Context, walk func(context.Context, func(layers.Info) error) error) ([]string, error) {
	var keys []string
	err := walk(ctx, func(info layers.Info) error {
		if IsKey(info.Key) {
			keys = append(keys, info.Key)
		}
		return nil
	})
	return keys, err
}

// Remove removes the image keys given (layer chains or tops no image
// uses any more, or leftovers being made by no call); missing ones are no
// error. Keys that are not image keys are refused.
func (s *Store) Remove(ctx context.Context, keys []string) error {
	var errs []error
	for _, key := range keys {
		if !IsKey(key) {
			errs = append(errs, fmt.Errorf("image: %q is not an image key", key))
			continue
		}
		done, err := s.claim(ctx, key)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := s.opts.Layers.Remove(ctx, key); err != nil && !errors.Is(err, layers.ErrNotFound) {
			errs = append(errs, fmt.Errorf("image: remove %s: %w", key, err))
		}
		done()
	}
	return errors.Join(errs...)
}
