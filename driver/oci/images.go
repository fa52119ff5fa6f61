package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/secrets"
)

// Memory images at rest. A runsc checkpoint is the sandbox's whole memory
// (its processes' pages, the environment of each, whatever secrets they
// hold) in plaintext files, so runsc never writes one to disk: it writes
// into a tmpfs of its own (<key>.save-<random>, mode 0700, sized from the
// sandbox's memory limit), from which the driver seals each file into the
// image directory with a fresh random data key (package secrets' streams:
// AES-256-GCM in 1 MiB chunks); the data key, sealed by Options.Sealer
// (the data dir's secrets key) and bound to the image's name, is kept
// beside them. A restore opens every file, authenticating all of it, into
// another tmpfs (<key>.load-<random>), from which `runsc restore` reads,
// and unmounts it lazily once runsc has returned: runsc opens the files in
// its command and hands the descriptors to the sandbox, so the sentry keeps
// them, and the pages, for as long as it still reads them. An image that
// does not open (altered, truncated, its key not sealed by this data dir)
// fails the restore with ErrImageSealed, and lifecycle starts the sandbox
// afresh on the checkpoint's files.
//
// The sentry writes the checkpoint's pages, so the tmpfs pages are charged
// to the sandbox's memory cgroup: while runsc writes them (the sandbox
// paused), the cgroup's limit is raised by the tmpfs's size, and lowered
// again once the tmpfs is gone. A marker (memory-raised, holding the old
// limits) lets Recover lower it when a daemon died in between.
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
	// raisedMarker, in a sandbox's directory, holds its memory cgroup's
	// limits while a checkpoint has raised them.
	raisedMarker = "memory-raised"
)

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

// saveImage writes image key of sandbox id, which the caller holds paused:
// runsc checkpoints into a private tmpfs, the driver seals the files from
// there into <key>.tmp, the tmpfs goes, and <key>.tmp is renamed to <key>,
// so that a key names a whole image or none.
func (d *Driver) saveImage(ctx context.Context, id, key string) (err error) {
	began := time.Now()
	var sealing time.Duration
	defer func() { // after the tmpfs and the raised limit are gone
		if err == nil {
			d.log.Debug("memory image saved", "sandbox", id, "image", key, "sealing", sealing.Round(time.Millisecond), "took", time.Since(began).Round(time.Millisecond))
		}
	}()
	final := d.memoryDir(key)
	tmp := final + ".tmp"
	os.RemoveAll(tmp)
	size := d.memoryLimit(id)
	lower, err := d.raiseMemoryLimit(id, size)
	if err != nil {
		return fmt.Errorf("oci: checkpoint memory %s: raise the memory limit for the image: %w", id, err)
	}
	defer lower()
	plain, err := mountPlain(final+plainSave, size)
	if err != nil {
		return fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	defer d.unmountPlain(plain)
	if _, err := d.run(ctx, id, "checkpoint", "--image-path", plain, "--leave-running", id); err != nil {
		return fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	sealed := time.Now()
	if err := d.sealImage(plain, tmp, key); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("oci: checkpoint memory %s: seal the image: %w", id, err)
	}
	sealing = time.Since(sealed)
	os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("oci: checkpoint memory %s: %w", id, err)
	}
	return nil
}

// sealImage seals every file of directory src into a new directory dst,
// as <name>.sealed, under a new data key, which it seals into dst/key.
// Nothing is synced to disk (a memory image is as durable as it was in
// plaintext, which runsc did not sync either, and syncing hundreds of
// megabytes while the sandbox is paused costs seconds): an image that a
// crash of the host left torn does not open, which RestoreMemory reports
// as ErrImageSealed, and the checkpoint then restores its files only.
func (d *Driver) sealImage(src, dst, key string) error {
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
		if err := sealFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()+sealedSuffix), dataKey, imageLabel(key, e.Name()), buf); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dst, imageKeyFile), d.sealer.Seal(imageKeyTenant, key, dataKey), 0o600)
}

// imageLabel binds a sealed file to its image and name.
func imageLabel(key, name string) string { return key + "/" + name }

// sealFile seals the file at src into a new file at dst.
func sealFile(src, dst string, dataKey []byte, label string, buf []byte) error {
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
	if _, err := io.CopyBuffer(w, in, buf); err != nil {
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
// a file does not open. RestoreMemory opens images with it; tests read
// what an image holds.
func OpenMemoryImage(dir, key string, sealer Sealer, fn func(name string, r io.Reader) error) error {
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
		if err := openFile(filepath.Join(dir, e.Name()), dataKey, imageLabel(key, name), func(r io.Reader) error { return fn(name, r) }); err != nil {
			return err
		}
	}
	return nil
}

// openFile calls fn with the plaintext of the sealed file at path.
func openFile(path string, dataKey []byte, label string, fn func(io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := secrets.NewStreamReader(f, dataKey, label)
	if err == nil {
		err = fn(r)
	}
	if errors.Is(err, secrets.ErrTampered) {
		return fmt.Errorf("%w: %s", ErrImageSealed, filepath.Base(path))
	}
	return err
}

// loadImage opens image key into a new private tmpfs, sized to hold it,
// and returns the tmpfs's path; the caller unmounts it (unmountPlain).
func (d *Driver) loadImage(key string) (string, error) {
	dir := d.memoryDir(key)
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
	buf := make([]byte, secrets.StreamChunk)
	err = OpenMemoryImage(dir, key, d.sealer, func(name string, r io.Reader) error {
		out, err := os.OpenFile(filepath.Join(plain, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.CopyBuffer(out, r, buf)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		d.unmountPlain(plain)
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
func (d *Driver) unmountPlain(dir string) {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		d.log.Error("unmount a memory image's tmpfs", "dir", dir, "err", err)
		return
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log.Error("remove a memory image's tmpfs mount point", "dir", dir, "err", err)
	}
}

// memoryLimit returns sandbox id's memory limit from its bundle (the
// cgroup's, headroom included), 0 when it has none.
func (d *Driver) memoryLimit(id string) int64 {
	b, err := os.ReadFile(filepath.Join(d.sandboxDir(id), "config.json"))
	if err != nil {
		return 0
	}
	var spec specs.Spec
	if json.Unmarshal(b, &spec) != nil || spec.Linux == nil || spec.Linux.Resources == nil ||
		spec.Linux.Resources.Memory == nil || spec.Linux.Resources.Memory.Limit == nil {
		return 0
	}
	return max(0, *spec.Linux.Resources.Memory.Limit)
}

// memoryLimitFiles returns the files of sandbox id's memory cgroup that
// hold its limits, in the order they are raised (v1: memsw, which must
// stay at least the limit, before the limit; v2: memory.max).
func (d *Driver) memoryLimitFiles(id string) []string {
	rel := d.cgroupRel(id)
	if d.cgroups.memory != "" {
		dir := filepath.Join(d.cgroups.memory, rel)
		if _, err := os.Stat(dir); err == nil {
			return []string{filepath.Join(dir, "memory.memsw.limit_in_bytes"), filepath.Join(dir, "memory.limit_in_bytes")}
		}
	}
	if d.cgroups.v2 != "" {
		dir := filepath.Join(d.cgroups.v2, rel)
		if _, err := os.Stat(dir); err == nil {
			return []string{filepath.Join(dir, "memory.max")}
		}
	}
	return nil
}

// raiseMemoryLimit raises each limit of sandbox id's memory cgroup that is
// set by by bytes, and returns the func that sets them back. It records
// the old limits in the sandbox's raisedMarker first, for Recover.
func (d *Driver) raiseMemoryLimit(id string, by int64) (lower func(), err error) {
	files := d.memoryLimitFiles(id)
	if by <= 0 || len(files) == 0 {
		return func() {}, nil
	}
	old := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // no swap accounting: no memsw
		}
		old[f] = strings.TrimSpace(string(b))
	}
	rec, _ := json.Marshal(old)
	marker := filepath.Join(d.sandboxDir(id), raisedMarker)
	if err := os.WriteFile(marker, rec, 0o600); err != nil {
		return nil, err
	}
	lower = func() {
		if err := d.setLimits(files, old); err != nil {
			d.log.Error("lower the memory limit raised for a checkpoint; the next restart does", "sandbox", id, "err", err)
			return
		}
		os.Remove(marker)
	}
	for _, f := range files {
		v, err := strconv.ParseInt(old[f], 10, 64)
		if err != nil || v >= 1<<62 { // "max", or v1's unlimited
			continue
		}
		if err := os.WriteFile(f, []byte(strconv.FormatInt(v+by, 10)), 0o644); err != nil {
			lower()
			return nil, err
		}
	}
	return lower, nil
}

// setLimits writes the old values of files back, in the reverse order of
// a raise.
func (d *Driver) setLimits(files []string, old map[string]string) error {
	var errs []error
	for i := len(files) - 1; i >= 0; i-- {
		if v, ok := old[files[i]]; ok {
			if err := os.WriteFile(files[i], []byte(v), 0o644); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// recoverImages finishes what a daemon killed during a memory checkpoint
// or restore left: it removes half-written images (<key>.tmp), unmounts
// the tmpfs mounts of plaintext, lowers memory limits a checkpoint raised,
// and seals images a daemon from before images were sealed wrote in
// plaintext.
func (d *Driver) recoverImages() {
	dir := filepath.Join(d.stateDir, "memory")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log.Error("recover: list memory images", "err", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch name := e.Name(); {
		case strings.Contains(name, plainSave) || strings.Contains(name, plainLoad):
			d.log.Warn("recover: removing a memory image's tmpfs left by a daemon stop", "dir", p)
			d.unmountPlain(p)
		case strings.HasSuffix(name, ".tmp"):
			d.log.Warn("recover: removing a memory image left half written by a daemon stop", "dir", p)
			if err := os.RemoveAll(p); err != nil {
				d.log.Error("recover: remove a half-written memory image", "dir", p, "err", err)
			}
		default:
			d.sealLegacyImage(name)
		}
	}
	sandboxes, _ := filepath.Glob(filepath.Join(d.stateDir, "sandboxes", "*", raisedMarker))
	for _, marker := range sandboxes {
		id := filepath.Base(filepath.Dir(marker))
		old := map[string]string{}
		if b, err := os.ReadFile(marker); err == nil && json.Unmarshal(b, &old) == nil {
			if err := d.setLimits(d.memoryLimitFiles(id), old); err != nil {
				d.log.Error("recover: lower a memory limit a checkpoint raised", "sandbox", id, "err", err)
				continue
			}
		}
		os.Remove(marker)
	}
}

// sealLegacyImage seals image key in place if it is in plaintext (runsc's
// own files, no key), as a daemon from before images were sealed left it.
func (d *Driver) sealLegacyImage(key string) {
	dir := d.memoryDir(key)
	if validID(key) != nil {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, imageKeyFile)); err == nil {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return
	}
	d.log.Warn("recover: sealing a memory image written in plaintext by an older daemon", "image", key)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	err := d.sealImage(dir, tmp, key)
	if err == nil {
		err = os.RemoveAll(dir)
	}
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		d.log.Error("recover: seal a plaintext memory image; removing it (its checkpoint restores its files only)", "image", key, "err", err)
		os.RemoveAll(dir)
	}
}

// MemoryImages lists the keys of the memory images the driver keeps, for
// a caller that removes those no checkpoint owns.
func (d *Driver) MemoryImages(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.stateDir, "memory"))
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
