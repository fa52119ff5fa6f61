package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/secrets"
)

// Memory images at rest. A runsc checkpoint is the sandbox's whole memory
// (its processes' pages, the environment of each, whatever secrets they
// hold) in plaintext files, so runsc never writes one to disk: it writes
// into a tmpfs of its own (<key>.save-<random>, mode 0700, sized from the
// sandbox's memory limit), from which the driver seals each file into the
// image directory with a fresh random data key (package secrets' streams:
// AES-256-GCM in 1 MiB chunks), once the sandbox has resumed and in the
// background (seal.go); the data key, sealed by Options.Sealer (the data
// dir's secrets key) and bound to the image's name, is kept beside them.
// A restore opens every file, authenticating all of it, into another
// tmpfs (<key>.load-<random>), its chunks on every CPU, from which
// `runsc restore` reads,
// and unmounts it lazily once runsc has returned: runsc opens the files in
// its command and hands the descriptors to the sandbox, so the sentry keeps
// them, and the pages, for as long as it still reads them. An image that
// does not open (altered, truncated, its key not sealed by this data dir)
// fails the restore with ErrImageSealed, and lifecycle starts the sandbox
// afresh on the checkpoint's files.
//
// The sentry writes the checkpoint's pages, so the tmpfs pages are charged
// to the sandbox's memory cgroup: while runsc writes them (the sandbox
// paused), the cgroup's limit is raised by the tmpfs's size, then lowered
// to the old limit plus what the image holds until the tmpfs is gone,
// and back to the old limit then. A marker (memory-raised, holding the
// old limits) lets Recover lower it when a daemon died in between.
//
// Image directory: <state>/memory/<key>/ holding key (the sealed data
// key) and <name>.sealed per file runsc wrote (checkpoint.img,
// pages_meta.img, pages.img).

// Sealer seals small values at rest under the daemon's key: the data keys
// of memory images. Package secrets' Box is one.
type Sealer interface {
	Seal(tenant, name string, value []byte) []byte
	Open(tenant, name string, sealed []byte) ([]byte, error)
}

// ErrImageSealed is returned by RestoreMemory for an image that does not
// open: corrupted, tampered with, or sealed under another data dir's key.
var ErrImageSealed = errors.New("the memory image does not open: corrupted, tampered with, or sealed under another key")

const (
	// imageKeyTenant binds a sealed data key to memory images: no
	// tenant's name has a NUL, so no tenant's secret opens as one, nor one
	// as a tenant's secret.
	imageKeyTenant = "\x00memory-image"
	// imageKeyFile holds an image's sealed data key.
	imageKeyFile = "key"
	// sealedSuffix names an image's sealed files.
	sealedSuffix = ".sealed"
	// plainSave and plainLoad name the tmpfs mounts of a checkpoint and a
	// restore (<key>.save-<random>, <key>.load-<random>).
	plainSave = ".save-"
	plainLoad = ".load-"
	// raisedMarkerName, in a sandbox's directory, holds its memory cgroup's
	// limits while a checkpoint has raised them.
	raisedMarkerName = "memory-raised"
)

// images are the driver's memory images (runsc): taken from a paused
// sandbox into a tmpfs, sealed to disk in the background (seal.go), opened
// for a restore, listed, deleted, and recovered after a daemon stop.
type images struct {
	dir    stateDir
	rt     *runner  // runs `runsc checkpoint`
	cg     *cgroups // whose memory limit a checkpoint raises
	sealer Sealer
	seals  seals // images being sealed
	log    *slog.Logger
}

// ephemeralSealer seals with a random key that dies with the process: the
// sealer of a driver made without Options.Sealer.
func ephemeralSealer() Sealer {
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	box, err := secrets.New(key)
	if err != nil {
		panic(err) // a 32-byte key always makes a box
	}
	return box
}

// take runs opts.Paused, then writes image key of sandbox id, which the
// caller holds paused, into a new private tmpfs, and returns it for
// sealInBackground (seal.go). runsc leaves the sandbox running, or with
// opts.Stop ends it once the image is written. The sandbox's memory limit
// is raised by the tmpfs's size while runsc writes (the pages are charged
// to the sandbox), then lowered to what the image holds, until the tmpfs
// is gone.
func (i *images) take(ctx context.Context, id, key string, opts driver.MemoryOptions) (_ *takenImage, err error) {
	if opts.Paused != nil {
		if err := opts.Paused(); err != nil {
			return nil, err
		}
	}
	began := time.Now()
	final := i.dir.memoryDir(key)
	size := memoryLimit(i.dir.config(id))
	limit, err := i.cg.raiseMemoryLimit(id, size)
	if err != nil {
		return nil, fmt.Errorf("oci: checkpoint memory %s: raise the memory limit for the image: %w", id, err)
	}
	plain, err := mountPlain(final+plainSave, size)
	if err != nil {
		limit.lower()
		return nil, fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			i.unmountPlain(plain)
			limit.lower()
		}
	}()
	args := []string{"checkpoint", "--image-path", plain}
	if !opts.Stop {
		args = append(args, "--leave-running")
	}
	if _, err := i.rt.run(ctx, id, append(args, id)...); err != nil {
		return nil, fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	if err := i.markTaken(key, plain); err != nil {
		return nil, fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	if used, err := tmpfsUsed(plain); err == nil && used < size {
		if err := limit.set(used); err != nil {
			i.log.Warn("lower a raised memory limit to what the image holds; it stays raised until the image is sealed", "sandbox", id, "err", err)
		}
	}
	i.log.Debug("memory image taken", "sandbox", id, "image", key, "took", time.Since(began).Round(time.Millisecond))
	return &takenImage{id: id, key: key, plain: plain, limit: limit}, nil
}

// seal seals every file of directory src into a new directory dst,
// as <name>.sealed, under a new data key, which it seals into dst/key.
// Nothing is synced to disk (a memory image is as durable as it was in
// plaintext, which runsc did not sync either, and syncing hundreds of
// megabytes while the sandbox is paused costs seconds): an image that a
// crash of the host left torn does not open, which RestoreMemory reports
// as ErrImageSealed, and the checkpoint then restores its files only.
func (i *images) seal(ctx context.Context, src, dst, key string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	dataKey := make([]byte, secrets.StreamKeySize)
	defer clear(dataKey)
	rand.Read(dataKey)
	buf := make([]byte, secrets.StreamChunk)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s in the checkpoint is not a regular file", e.Name())
		}
		if err := sealFile(ctx, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()+sealedSuffix), dataKey, imageLabel(key, e.Name()), buf); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dst, imageKeyFile), i.sealer.Seal(imageKeyTenant, key, dataKey), 0o600)
}

// imageLabel binds a sealed file to its image and name.
func imageLabel(key, name string) string { return key + "/" + name }

// sealFile seals the file at src into a new file at dst.
func sealFile(ctx context.Context, src, dst string, dataKey []byte, label string, buf []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	w, err := secrets.NewStreamWriter(out, dataKey, label)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(w, ctxReader{ctx, in}, buf); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return out.Close()
}

// OpenMemoryImage opens the sealed memory image key in directory dir with
// sealer, and calls fn with the name and plaintext of each of its files
// in turn; fn must read r to its end, where the last chunk is
// authenticated. It returns ErrImageSealed (wrapped) when the data key or
// a file does not open. Tests read what an image holds with it.
func OpenMemoryImage(dir, key string, sealer Sealer, fn func(name string, r io.Reader) error) error {
	return eachSealed(dir, key, sealer, func(name string, f *os.File, dataKey []byte) error {
		r, err := secrets.NewStreamReader(f, dataKey, imageLabel(key, name))
		if err == nil {
			err = fn(name, r)
		}
		return err
	})
}

// eachSealed opens the data key of the sealed memory image key in
// directory dir with sealer, and calls fn with the name, the open sealed
// file and the data key of each of its files in turn. An error of fn
// that is secrets.ErrTampered, or a data key that does not open, is
// ErrImageSealed (wrapped).
func eachSealed(dir, key string, sealer Sealer, fn func(name string, f *os.File, dataKey []byte) error) error {
	sealedKey, err := os.ReadFile(filepath.Join(dir, imageKeyFile))
	if err != nil {
		return err
	}
	dataKey, err := sealer.Open(imageKeyTenant, key, sealedKey)
	if err != nil {
		return fmt.Errorf("%w: its key does not open", ErrImageSealed)
	}
	defer clear(dataKey)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), sealedSuffix)
		if !ok {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		err = fn(name, f, dataKey)
		f.Close()
		if errors.Is(err, secrets.ErrTampered) {
			return fmt.Errorf("%w: %s", ErrImageSealed, e.Name())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// load opens image key into a new private tmpfs, sized to hold it,
// and returns the tmpfs's path; the caller unmounts it (unmountPlain).
// Each file's chunks are opened on as many goroutines as there are CPUs.
func (i *images) load(key string) (string, error) {
	dir := i.dir.memoryDir(key)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var size int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), sealedSuffix) {
			size += info.Size() + 1<<20 // pages of the tmpfs, rounding up
		}
	}
	plain, err := mountPlain(dir+plainLoad, size+1<<20)
	if err != nil {
		return "", err
	}
	err = eachSealed(dir, key, i.sealer, func(name string, f *os.File, dataKey []byte) error {
		info, err := f.Stat()
		if err != nil {
			return err
		}
		out, err := os.OpenFile(filepath.Join(plain, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = secrets.OpenStreamAt(out, f, info.Size(), dataKey, imageLabel(key, name), runtime.NumCPU())
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		i.unmountPlain(plain)
		return "", err
	}
	return plain, nil
}

// mountPlain mounts a new tmpfs of size bytes (0: the kernel's default,
// half the RAM) at a new directory prefix<random>, only root's, and
// returns the directory. Nothing on it reaches a disk: it is mounted
// noswap (Linux 6.4 and later; on older kernels a host with swap may swap
// its pages out, as it may the sandbox's own memory).
func mountPlain(prefix string, size int64) (string, error) {
	var rnd [6]byte
	rand.Read(rnd[:])
	dir := prefix + hex.EncodeToString(rnd[:])
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	opts := "mode=0700,nr_inodes=1024"
	if size > 0 {
		opts += ",size=" + strconv.FormatInt(size, 10)
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	err := unix.Mount("tmpfs", dir, "tmpfs", flags, opts+",noswap")
	if errors.Is(err, unix.EINVAL) { // a kernel before noswap
		err = unix.Mount("tmpfs", dir, "tmpfs", flags, opts)
	}
	if err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("mount a tmpfs for the memory image: %w", err)
	}
	return dir, nil
}

// unmountPlain unmounts the tmpfs at dir lazily (a restored sandbox may
// still read the files it opened there; the memory goes when it closes
// them) and removes the directory.
func (i *images) unmountPlain(dir string) {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		i.log.Error("unmount a memory image's tmpfs", "dir", dir, "err", err)
		return
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		i.log.Error("remove a memory image's tmpfs mount point", "dir", dir, "err", err)
	}
}

// recover finishes what a daemon killed during a memory checkpoint or
// restore left: it seals the images taken and not yet sealed
// (recoverTaken), removes half-written images (<key>.tmp), unmounts the
// tmpfs mounts of plaintext, and seals images a daemon from before images
// were sealed wrote in plaintext. (The memory limits a checkpoint left
// raised are cgroups.lowerRaised's.)
func (i *images) recover() {
	i.recoverTaken()
	dir := i.dir.memory()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		i.log.Error("recover: list memory images", "err", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch name := e.Name(); {
		case strings.Contains(name, plainSave) || strings.Contains(name, plainLoad):
			i.log.Warn("recover: removing a memory image's tmpfs left by a daemon stop", "dir", p)
			i.unmountPlain(p)
		case strings.HasSuffix(name, ".tmp"):
			i.log.Warn("recover: removing a memory image left half written by a daemon stop", "dir", p)
			if err := os.RemoveAll(p); err != nil {
				i.log.Error("recover: remove a half-written memory image", "dir", p, "err", err)
			}
		default:
			i.sealLegacy(name)
		}
	}
}

// sealLegacy seals image key in place if it is in plaintext (runsc's
// own files, no key), as a daemon from before images were sealed left it.
func (i *images) sealLegacy(key string) {
	dir := i.dir.memoryDir(key)
	if validID(key) != nil {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, imageKeyFile)); err == nil {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return
	}
	i.log.Warn("recover: sealing a memory image written in plaintext by an older daemon", "image", key)
	if err := i.sealAs(context.Background(), dir, key); err != nil {
		i.log.Error("recover: seal a plaintext memory image; removing it (its checkpoint restores its files only)", "image", key, "err", err)
		os.RemoveAll(dir)
	}
}

// delete removes image key, stopping its seal if it is being sealed, and
// what a checkpoint of it that failed half way may have left.
func (i *images) delete(key string) error {
	i.seals.stop(key)
	dir := i.dir.memoryDir(key)
	err := errors.Join(os.RemoveAll(dir), os.RemoveAll(dir+".tmp"), os.Remove(dir+takenSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // no marker: the usual case
	}
	return err
}

// list lists the keys of the memory images.
func (i *images) list() ([]string, error) {
	entries, err := os.ReadDir(i.dir.memory())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("oci: memory images: %w", err)
	}
	var keys []string
	for _, e := range entries {
		if e.IsDir() && validID(e.Name()) == nil {
			keys = append(keys, e.Name())
		}
	}
	return keys, nil
}
