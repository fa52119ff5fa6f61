package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Sealing in the background. `runsc checkpoint` writes a memory image into
// a tmpfs while the sandbox is paused; sealing it from there to disk needs
// neither the pause nor the caller, so CheckpointMemory resumes the
// sandbox and returns as soon as runsc has written it, and the image is
// sealed afterwards by a goroutine (seals). Until then the plaintext is
// in memory only, as it was in the sandbox a moment before; a taken
// marker (memory/<key>.taken, naming the tmpfs) says that the tmpfs holds
// a whole image, so that a daemon killed before the seal ends has Recover
// seal it. RestoreMemory of an image being sealed waits for its seal;
// DeleteMemory stops it; the next memory checkpoint of the same sandbox
// waits for it first (its raised memory limit must come down before the
// next one reads the limit).

// takenSuffix names the marker of an image runsc has written and the
// driver has yet to seal: memory/<key>.taken, holding the name of the
// tmpfs (memory/<key>.save-<random>).
const takenSuffix = ".taken"

// takenImage is a whole memory image of sandbox id in the tmpfs at plain,
// charged to the sandbox's memory cgroup, whose limit limit holds raised
// until the tmpfs is gone.
type takenImage struct {
	id, key string
	plain   string
	limit   *raisedLimit
}

// discard removes image t, which is not to be sealed: its tmpfs, its
// marker, and the raise of the memory limit.
func (t *takenImage) discard(i *images) {
	i.unmountPlain(t.plain)
	t.limit.lower()
	os.Remove(i.dir.memoryDir(t.key) + takenSuffix)
}

// seals tracks the memory images being sealed in the background, by key.
// The zero value is ready.
type seals struct {
	mu   sync.Mutex
	jobs map[string]*sealJob
}

// sealJob is one image being sealed: done is closed once the sealed image
// is in place or the seal has failed (and left nothing).
type sealJob struct {
	sandbox string
	cancel  context.CancelFunc
	done    chan struct{}
}

// start runs seal for image key of sandbox id in a new goroutine, with a
// context that stop cancels.
func (s *seals) start(id, key string, seal func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	j := &sealJob{sandbox: id, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if s.jobs == nil {
		s.jobs = map[string]*sealJob{}
	}
	s.jobs[key] = j
	s.mu.Unlock()
	go func() {
		defer cancel()
		defer func() {
			s.mu.Lock()
			if s.jobs[key] == j {
				delete(s.jobs, key)
			}
			s.mu.Unlock()
			close(j.done)
		}()
		seal(ctx)
	}()
}

// find returns the jobs for which match holds.
func (s *seals) find(match func(key string, j *sealJob) bool) []*sealJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sealJob
	for k, j := range s.jobs {
		if match(k, j) {
			out = append(out, j)
		}
	}
	return out
}

// wait waits until the jobs are done, or ctx is.
func wait(ctx context.Context, jobs []*sealJob) error {
	for _, j := range jobs {
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// waitKey waits until image key, if it is being sealed, is sealed.
func (s *seals) waitKey(ctx context.Context, key string) error {
	return wait(ctx, s.find(func(k string, _ *sealJob) bool { return k == key }))
}

// waitSandbox waits until no image of sandbox id is being sealed.
func (s *seals) waitSandbox(ctx context.Context, id string) error {
	return wait(ctx, s.find(func(_ string, j *sealJob) bool { return j.sandbox == id }))
}

// stop stops the seal of image key, if one runs, and waits until it has
// cleaned up.
func (s *seals) stop(key string) {
	jobs := s.find(func(k string, _ *sealJob) bool { return k == key })
	for _, j := range jobs {
		j.cancel()
	}
	wait(context.Background(), jobs)
}

// sealInBackground seals image t from its tmpfs to disk, then unmounts the
// tmpfs and lowers the memory limit a checkpoint raised; see above.
func (i *images) sealInBackground(t *takenImage) {
	i.seals.start(t.id, t.key, func(ctx context.Context) {
		began := time.Now()
		err := i.sealAs(ctx, t.plain, t.key)
		t.discard(i)
		switch {
		case errors.Is(err, context.Canceled):
			i.log.Debug("memory image seal stopped: the image was deleted", "sandbox", t.id, "image", t.key)
		case err != nil:
			i.log.Error("seal a memory image; its checkpoint restores its files only", "sandbox", t.id, "image", t.key, "err", err)
		default:
			i.log.Debug("memory image sealed", "sandbox", t.id, "image", t.key, "took", time.Since(began).Round(time.Millisecond))
		}
	})
}

// sealAs seals the whole plaintext image in directory plain as image key:
// into <key>.tmp, renamed to <key> once complete (an old <key>, plain
// itself for an image sealed in place, removed first), so that a key
// names a whole sealed image or none.
func (i *images) sealAs(ctx context.Context, plain, key string) error {
	final := i.dir.memoryDir(key)
	tmp := final + ".tmp"
	os.RemoveAll(tmp)
	err := i.seal(ctx, plain, tmp, key)
	if err == nil {
		err = os.RemoveAll(final)
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.RemoveAll(tmp)
	}
	return err
}

// markTaken records that the tmpfs at plain holds a whole image key.
func (i *images) markTaken(key, plain string) error {
	return os.WriteFile(i.dir.memoryDir(key)+takenSuffix, []byte(filepath.Base(plain)), 0o600)
}

// recoverTaken seals the images a killed daemon had taken and not yet
// sealed (their taken markers name tmpfs mounts that are still there),
// before recover unmounts what is left.
func (i *images) recoverTaken() {
	markers, _ := filepath.Glob(filepath.Join(i.dir.memory(), "*"+takenSuffix))
	for _, m := range markers {
		key := strings.TrimSuffix(filepath.Base(m), takenSuffix)
		b, err := os.ReadFile(m)
		plain := filepath.Join(filepath.Dir(m), string(b))
		if err == nil && validID(key) == nil && strings.HasPrefix(string(b), key+plainSave) && !strings.Contains(string(b), "/") && isMount(plain) {
			if _, err := os.Stat(i.dir.memoryDir(key)); errors.Is(err, fs.ErrNotExist) {
				i.log.Warn("recover: sealing a memory image a daemon stop left unsealed", "image", key)
				if err := i.sealAs(context.Background(), plain, key); err != nil {
					i.log.Error("recover: seal a memory image; its checkpoint restores its files only", "image", key, "err", err)
				}
			}
		}
		os.Remove(m)
	}
}

// isMount reports whether dir is a mount point (on another device than
// its parent).
func isMount(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Dev != parent.Dev
}

// ctxReader is r that fails with ctx's error once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// tmpfsUsed returns the bytes the tmpfs at dir holds.
func tmpfsUsed(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}
