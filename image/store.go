// Package image keeps a node's images in its layer store: each layer of an
// OCI image unpacked once, as a committed snapshot per layer chain, shared
// by every image (of any tenant) whose layers begin the same way, and each
// image's own top snapshot, which every sandbox of the image is prepared
// from in one O(1) snapshot.
//
// Keys in the layer store:
//
//   - "layer-<chain id>": the content of an image's first n layers, where
//     the chain id is the OCI one (sha256 over the diff ids); its parent
//     is the chain of the first n-1;
//   - "img-<digest>": an image version's top, the last layer chain with
//     the mount points hearth's runtime needs (/.hearth, /run/hearth),
//     its working directory and its user's home added;
//   - "step-<digest>": a build step's root, made as a top is: a build's
//     cache, which no image names (the collection after a restart removes
//     it);
//   - "unpack-<chain id>" and "imgtmp-<top key>": a layer or a top being
//     made, active; a daemon killed meanwhile leaves them. No image uses
//     them, so the control plane's collection after a restart removes
//     them (Keys, Remove), and making the same key again removes its
//     leftover first.
//
// What the node holds is reported by Keys; which of them images still use
// is the control plane's to decide (it removes the rest with Remove).
//
// A layer is untrusted input: it is read through fetch.Open (its blob
// checked against its digest, a zstd window bounded), package layertar
// applies it, inside its snapshot only, and the uncompressed content must
// hash to the diff id the image's config names, or the layer is refused
// and nothing is kept.
package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/rootfs"
	"github.com/hearth/hearth/sandbox"
)

// ErrInvalid is wrapped by the errors of an image refused for what it
// holds: a layer whose content does not match its diff id, or that
// layertar refuses (layertar.ErrHostile is wrapped too).
var ErrInvalid = errors.New("image: invalid image")

// Key prefixes (see the package documentation).
const (
	layerPrefix  = "layer-"
	topPrefix    = "img-"
	stepPrefix   = "step-"
	unpackPrefix = "unpack-"
	topTmpPrefix = "imgtmp-"
)

// Mount points every image's root must have for hearth's runtime: these
// directories, and in the first the agent's, an empty file
// (rootfs.AgentFile), so that a start creates nothing in the sandbox's
// root.
var mountPoints = []string{rootfs.AgentDir, rootfs.SocketDir}

// Options configure a Store. Layers is required.
type Options struct {
	Layers layers.Store
	// Limits bound each layer's unpacking (see layertar.Limits).
	Limits layertar.Limits
	Logger *slog.Logger
}

// Store unpacks images into a layer store. It is safe for concurrent use:
// two images that share a layer unpack it once.
type Store struct {
	opts Options
	log  *slog.Logger

	mu   sync.Mutex
	busy map[string]chan struct{} // keys being made, closed when done
}

// New returns the Store over opts.Layers.
func New(opts Options) (*Store, error) {
	if opts.Layers == nil {
		return nil, errors.New("image: Options.Layers is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{opts: opts, log: log, busy: map[string]chan struct{}{}}, nil
}

// TopKey is the layer store's key of the top of the image version digest
// ("sha256:<hex>").
func TopKey(digest string) (string, error) { return digestKey(topPrefix, digest) }

// StepKey is the layer store's key of the root a build step left, whose
// version (its cache key) is digest: made as a top is, named by no image.
func StepKey(digest string) (string, error) { return digestKey(stepPrefix, digest) }

func digestKey(prefix, digest string) (string, error) {
	h, err := v1.NewHash(digest)
	if err != nil || h.Algorithm != "sha256" {
		return "", fmt.Errorf("image: digest %q is not sha256:<hex>", digest)
	}
	return prefix + h.Hex, nil
}

// isTop reports whether key is a top's or a build step's.
func isTop(key string) bool {
	return strings.HasPrefix(key, topPrefix) || strings.HasPrefix(key, stepPrefix)
}

// IsKey reports whether key is one of the layer store's image keys (a
// layer chain, a top, or one being made).
func IsKey(key string) bool {
	for _, p := range []string{layerPrefix, topPrefix, stepPrefix, unpackPrefix, topTmpPrefix} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Unpacked is what Unpack and Commit stored.
type Unpacked struct {
	// Layers are the keys, bottom first; the last is the image's top.
	Layers []string
	// Config is the image's config, its user resolved.
	Config sandbox.ImageConfig
	// Size is the bytes the layers' files hold.
	Size int64
}

// Unpack stores img, whose manifest digest is digest: every layer not
// stored yet (verified against its diff id), then the image's top. It
// reports progress (phase "unpack", per layer) when progress is not nil.
// An image stored already costs one Stat per layer. A failed Unpack
// leaves no partial layer: what it committed is whole.
func (s *Store) Unpack(ctx context.Context, img v1.Image, digest string, progress func(sandbox.ImageProgress)) (Unpacked, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return Unpacked{}, fmt.Errorf("image %s: config: %w", digest, err)
	}
	ls, err := img.Layers()
	if err != nil {
		return Unpacked{}, fmt.Errorf("image %s: layers: %w", digest, err)
	}
	if len(ls) != len(cf.RootFS.DiffIDs) {
		return Unpacked{}, fmt.Errorf("image %s: %d layers but %d diff ids in its config", digest, len(ls), len(cf.RootFS.DiffIDs))
	}
	var out Unpacked
	parent, chain := "", ""
	for i, l := range ls {
		diffID := cf.RootFS.DiffIDs[i]
		chain = chainID(chain, diffID)
		key := layerPrefix + chain
		size, cached, err := s.layer(ctx, key, parent, l, diffID)
		if err != nil {
			return Unpacked{}, fmt.Errorf("image %s: layer %d of %d (%s): %w", digest, i+1, len(ls), diffID, err)
		}
		if progress != nil {
			d, _ := l.Digest()
			progress(sandbox.ImageProgress{Phase: "unpack", Layer: d.String(), Bytes: size, Layers: len(ls), Cached: cached})
		}
		out.Layers = append(out.Layers, key)
		out.Size += size
		parent = key
	}
	top, err := TopKey(digest)
	if err != nil {
		return Unpacked{}, err
	}
	if out.Config, err = s.top(ctx, top, parent, configOf(cf.Config)); err != nil {
		return Unpacked{}, fmt.Errorf("image %s: %w", digest, err)
	}
	out.Layers = append(out.Layers, top)
	return out, nil
}

// chainID is the OCI chain id of a layer whose diff id is diffID over the
// chain id (hex) of the layers below ("" for the first layer), in hex.
func chainID(below string, diffID v1.Hash) string {
	if below == "" {
		return diffID.Hex
	}
	sum := sha256.Sum256([]byte("sha256:" + below + " " + diffID.String()))
	return hex.EncodeToString(sum[:])
}

// claim makes key this call's to make, waiting while another call makes
// it; done must be called once the key is made or given up.
func (s *Store) claim(ctx context.Context, key string) (done func(), err error) {
	for {
		s.mu.Lock()
		ch, busy := s.busy[key]
		if !busy {
			ch = make(chan struct{})
			s.busy[key] = ch
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.busy, key)
				s.mu.Unlock()
				close(ch)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// exists reports whether the committed snapshot key exists.
func (s *Store) exists(ctx context.Context, key string) (bool, error) {
	info, err := s.opts.Layers.Stat(ctx, key)
	if errors.Is(err, layers.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.Kind == layers.KindCommitted, nil
}

// layer stores the layer chain key from parent and layer l, unless it is
// there (cached), and returns the bytes its files hold (0 when cached).
func (s *Store) layer(ctx context.Context, key, parent string, l v1.Layer, diffID v1.Hash) (size int64, cached bool, err error) {
	done, err := s.claim(ctx, key)
	if err != nil {
		return 0, false, err
	}
	defer done()
	if ok, err := s.exists(ctx, key); err != nil || ok {
		if ok {
			// What the layer's snapshot holds beyond its parent's: what
			// its unpacking wrote, counted again for every image that has
			// it (0 where the store cannot count).
			size, _ = s.opts.Layers.Usage(ctx, key)
		}
		return size, ok, err
	}
	tmp := unpackPrefix + strings.TrimPrefix(key, layerPrefix)
	err = s.make(ctx, key, tmp, parent, func(dir string) error {
		rc, err := fetch.Open(l)
		if err != nil {
			return err
		}
		defer rc.Close()
		size, err = applyVerified(ctx, dir, rc, diffID, s.opts.Limits)
		return err
	})
	return size, false, err
}

// make prepares tmp from parent, fills it with fill(its path), and
// commits it as key; on any failure tmp is removed and key not made.
func (s *Store) make(ctx context.Context, key, tmp, parent string, fill func(dir string) error) error {
	if err := s.opts.Layers.Remove(ctx, tmp); err != nil && !errors.Is(err, layers.ErrNotFound) {
		return fmt.Errorf("remove a leftover %s: %w", tmp, err)
	}
	dir, err := s.opts.Layers.Prepare(ctx, tmp, parent)
	if err != nil {
		return err
	}
	err = fill(dir)
	if err == nil {
		err = s.opts.Layers.Commit(ctx, key, tmp)
	}
	if err != nil {
		if rerr := s.opts.Layers.Remove(context.WithoutCancel(ctx), tmp); rerr != nil && !errors.Is(rerr, layers.ErrNotFound) {
			s.log.Error("image: remove a failed snapshot", "key", tmp, "err", rerr)
		}
		if errors.Is(err, layers.ErrExists) {
			return nil // made meanwhile by another daemon's call
		}
	}
	return err
}

// applyTar applies the layer tar r onto dir, reading r to its end.
func applyTar(ctx context.Context, dir string, r io.Reader, lim layertar.Limits) error {
	_, err := applyAll(ctx, dir, r, lim)
	return err
}

// applyVerified applies the layer tar r onto dir and checks that what it
// read hashes to diffID, reading r to its end. r is read, and hashed,
// ahead of the files' writing (see readAhead).
func applyVerified(ctx context.Context, dir string, r io.Reader, diffID v1.Hash, lim layertar.Limits) (int64, error) {
	h := sha256.New()
	ra := newReadAhead(io.TeeReader(r, h))
	defer ra.Close()
	stats, err := applyAll(ctx, dir, ra, lim)
	if err != nil {
		return 0, err
	}
	// applyAll read ra to its end: every byte went through h, and its
	// reading has stopped.
	if got := hexOf(h); got != diffID.Hex {
		return 0, fmt.Errorf("%w: its content hashes to sha256:%s, not to its diff id %s", ErrInvalid, got, diffID)
	}
	return stats.Bytes, nil
}

// applyAll applies the layer tar r onto dir, then reads the rest of r: a
// layer's diff id covers every byte, the padding tar writers add after
// the tar's end blocks included. What follows the end counts against
// lim.MaxBytes as the tar does (a few bytes of gzip can expand to
// gigabytes of zeros there, which no tar reader looks at), and ctx is
// heeded while it is read.
func applyAll(ctx context.Context, dir string, r io.Reader, lim layertar.Limits) (layertar.Stats, error) {
	root, err := openRoot(dir)
	if err != nil {
		return layertar.Stats{}, err
	}
	defer root.Close()
	cr := &countingReader{r: r}
	stats, err := layertar.Apply(ctx, root, cr, lim)
	if errors.Is(err, layertar.ErrHostile) {
		return stats, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return stats, err
	}
	limit := lim.MaxBytes
	if limit <= 0 {
		limit = layertar.DefaultMaxBytes
	}
	buf := make([]byte, 64<<10)
	for {
		if err := ctx.Err(); err != nil {
			return stats, err
		}
		_, err := cr.Read(buf)
		if cr.n > limit {
			return stats, fmt.Errorf("%w: %w: the layer is over %d bytes (MaxBytes) with what follows its tar's end", ErrInvalid, layertar.ErrHostile, limit)
		}
		if err == io.EOF {
			return stats, nil
		}
		if err != nil {
			return stats, err
		}
	}
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func hexOf(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// configOf is the part of an OCI config an ImageConfig records, its user
// not resolved yet.
func configOf(c v1.Config) sandbox.ImageConfig {
	return sandbox.ImageConfig{
		Env: c.Env, WorkingDir: c.WorkingDir, User: c.User,
		Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels,
	}
}
