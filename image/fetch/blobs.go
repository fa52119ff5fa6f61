package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// A blob directory is content-addressed: dir/sha256/<hex> holds the blob
// of that digest, verified before it was given the name; a download in
// progress is dir/sha256/<hex>.partial, locked (flock) by the pull that
// writes it.

// blobPath is where the blob h is kept under dir.
func blobPath(dir string, h v1.Hash) string { return filepath.Join(dir, h.Algorithm, h.Hex) }

// haveBlob reports whether path holds a blob of size bytes.
func haveBlob(path string, size int64) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode().IsRegular() && st.Size() == size
}

// errTryAgain is a failure that a new request may mend (the registry
// answered a range request with another range, a download stalled).
var errTryAgain = errors.New("try again")

// errStalled cuts a download that received nothing for Options.stall.
var errStalled = errors.New("the download stalled")

// fetchBlob downloads the blob d describes into the blob directory,
// unless it is there: resuming its .partial file, retrying failures that
// may pass, then verifying the whole file against d before naming it. A
// blob that does not match d is removed. report is told the bytes done.
func (r *remote) fetchBlob(ctx context.Context, d v1.Descriptor, report func(done int64, cached bool)) error {
	at := d.Digest.String()
	final := blobPath(r.o.BlobDir, d.Digest)
	if haveBlob(final, d.Size) {
		report(d.Size, true)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return r.fail("layer", at, err)
	}
	f, err := lockPartial(ctx, final+".partial")
	if err != nil {
		return r.fail("layer", at, err)
	}
	defer f.Close() // which unlocks it
	// Another pull may have fetched the blob while this one waited.
	if haveBlob(final, d.Size) {
		os.Remove(f.Name())
		report(d.Size, true)
		return nil
	}
	err = r.retry(ctx, func() error { return r.download(ctx, f, d, report) })
	if err == nil {
		err = verifyFile(f, d)
	}
	if errors.Is(err, ErrDigest) {
		os.Remove(f.Name())
	}
	if err == nil {
		err = commit(f, final)
	}
	return r.fail("layer", at, err)
}

// download appends to f (a partial download of d) what it lacks: from
// its end with a Range request, or the whole blob when the registry
// ignores the range. A download that receives nothing for Options.stall
// is cut, to be tried again.
func (r *remote) download(ctx context.Context, f *os.File, d v1.Descriptor, report func(int64, bool)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(r.o.stall, func() { cancel(errStalled) })
	defer watchdog.Stop()
	err := r.downloadOnce(ctx, f, d, func(done int64, cached bool) {
		watchdog.Reset(r.o.stall)
		report(done, cached)
	})
	if err != nil && context.Cause(ctx) == errStalled {
		return fmt.Errorf("nothing received for %v: %w", r.o.stall, errTryAgain)
	}
	return err
}

func (r *remote) downloadOnce(ctx context.Context, f *os.File, d v1.Descriptor, report func(int64, bool)) error {
	at := d.Digest.String()
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return permanentError{err}
	}
	if off > d.Size {
		if off, err = restart(f); err != nil {
			return err
		}
	}
	if off == d.Size && off > 0 {
		return nil
	}
	hdr := http.Header{}
	if off > 0 {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", off))
	}
	resp, err := r.get(ctx, r.url("blobs", at), "layer", at, hdr, http.StatusOK, http.StatusPartialContent, http.StatusRequestedRangeNotSatisfiable)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		restart(f)
		return fmt.Errorf("the registry refused the range from byte %d: %w", off, errTryAgain)
	case resp.StatusCode == http.StatusPartialContent && rangeStart(resp.Header.Get("Content-Range")) != off:
		restart(f)
		return fmt.Errorf("the registry answered bytes=%d- with %q: %w", off, resp.Header.Get("Content-Range"), errTryAgain)
	case resp.StatusCode == http.StatusOK && off > 0:
		if off, err = restart(f); err != nil {
			return err
		}
	}
	if n := resp.ContentLength; n >= 0 && off+n != d.Size {
		return kindf(ErrDigest, "the registry sends %d bytes from byte %d of a blob of %d", n, off, d.Size)
	}
	report(off, false)
	w := &progressWriter{f: f, done: off, report: report}
	n, err := io.Copy(w, io.LimitReader(resp.Body, d.Size-off+1))
	switch {
	case err != nil:
		return err
	case off+n > d.Size:
		return kindf(ErrDigest, "the blob is longer than its %d bytes", d.Size)
	case off+n < d.Size:
		return fmt.Errorf("got %d of %d bytes: %w", off+n, d.Size, io.ErrUnexpectedEOF)
	}
	return nil
}

// restart empties a partial download.
func restart(f *os.File) (int64, error) {
	if err := f.Truncate(0); err != nil {
		return 0, permanentError{err}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, permanentError{err}
	}
	return 0, nil
}

// rangeStart is the first byte of a Content-Range ("bytes 10-99/100"),
// or -1.
func rangeStart(cr string) int64 {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return -1
	}
	start, _, ok := strings.Cut(rest, "-")
	n, err := strconv.ParseInt(start, 10, 64)
	if !ok || err != nil {
		return -1
	}
	return n
}

// progressWriter writes to a partial download and reports its progress;
// its failures are the disk's, which trying again does not mend.
type progressWriter struct {
	f      *os.File
	done   int64
	report func(int64, bool)
}

func (w *progressWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.done += int64(n)
	w.report(w.done, false)
	if err != nil {
		return n, permanentError{err}
	}
	return n, nil
}

// verifyFile checks the whole of f against d's size and digest.
func verifyFile(f *os.File, d v1.Descriptor) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return verify(f, "layer", d)
}

// commit makes a verified partial download the blob at final, durably.
func commit(f *os.File, final string) error {
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), final); err != nil {
		return err
	}
	return syncDir(filepath.Dir(final))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockPartial opens (creating it) the partial download at path and locks
// it, waiting while another pull holds it. The file it locks is the one
// at path: the holder before may have renamed or removed its file.
func lockPartial(ctx context.Context, path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := flock(ctx, f); err != nil {
			f.Close()
			return nil, err
		}
		var held, named unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &named) == nil &&
			held.Dev == named.Dev && held.Ino == named.Ino {
			return f, nil
		}
		f.Close()
	}
}

// flock takes f's exclusive lock, polling so that ctx can end the wait.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Forget removes from blobDir the layer blobs of img that a Pull
// downloaded there, once img is stored and they are needed no more (a
// pull of an image with those layers downloads them again, unless its
// layers are stored already). What is missing is no error.
func Forget(blobDir string, img v1.Image) error {
	ls, err := img.Layers()
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(blobPath(blobDir, d)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
