package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hearth/hearth/driver"
)

var _ driver.MemoryMover = (*Driver)(nil)

// SendMemory implements driver.MemoryMover (images.send).
func (d *Driver) SendMemory(ctx context.Context, key string, w io.Writer) error {
	return d.images.send(ctx, key, w)
}

// ReceiveMemory implements driver.MemoryMover (images.receive).
func (d *Driver) ReceiveMemory(ctx context.Context, key string, r io.Reader) error {
	return d.images.receive(ctx, key, r)
}

// send writes image key's directory to w, once its seal is done, as a tar
// of its sealed data key and its sealed files, as they are at rest.
func (i *images) send(ctx context.Context, key string, w io.Writer) error {
	if validID(key) != nil {
		return fmt.Errorf("oci: send memory image %q: want lowercase letters and digits", key)
	}
	if err := i.seals.waitKey(ctx, key); err != nil {
		return fmt.Errorf("oci: send memory image %s: wait for its seal: %w", key, err)
	}
	dir := i.dir.memoryDir(key)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("oci: send memory image %s: %w", key, driver.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("oci: send memory image %s: %w", key, err)
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if !e.Type().IsRegular() || !sealedImageFile(e.Name()) {
			continue
		}
		if err := sendFile(tw, filepath.Join(dir, e.Name()), e.Name()); err != nil {
			return fmt.Errorf("oci: send memory image %s: %w", key, err)
		}
	}
	return tw.Close()
}

// sendFile writes the regular file path to tw as name.
func sendFile(tw *tar.Writer, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// receive stores image key from a stream send wrote: it is written to
// <key>.tmp (which Recover removes if a daemon stop cuts it short) and
// renamed into place whole. A stream with anything but the sealed data
// key and sealed regular files, each with a plain name, is refused
// (driver.ErrInvalidImage), leaving nothing; an image it has already is
// kept, the stream read and dropped.
func (i *images) receive(ctx context.Context, key string, r io.Reader) error {
	if validID(key) != nil {
		return fmt.Errorf("oci: receive memory image %q: want lowercase letters and digits", key)
	}
	dir := i.dir.memoryDir(key)
	if _, err := os.Stat(dir); err == nil {
		_, err = io.Copy(io.Discard, r)
		return err
	}
	if err := os.MkdirAll(i.dir.memory(), 0o700); err != nil {
		return err
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := receiveFiles(ctx, tmp, r); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("oci: receive memory image %s: %w", key, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("oci: receive memory image %s: %w", key, err)
	}
	return syncDir(i.dir.memory())
}

// receiveFiles writes the files of the tar r, each synced, into dir,
// which must end up holding the image's sealed data key.
func receiveFiles(ctx context.Context, dir string, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", driver.ErrInvalidImage, err)
		}
		if hdr.Typeflag != tar.TypeReg || !sealedImageFile(hdr.Name) {
			return fmt.Errorf("%w: entry %q is not a sealed image file", driver.ErrInvalidImage, hdr.Name)
		}
		f, err := os.OpenFile(filepath.Join(dir, hdr.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, imageKeyFile)); err != nil {
		return fmt.Errorf("%w: no sealed data key", driver.ErrInvalidImage)
	}
	return syncDir(dir)
}

// sealedImageFile says whether name is one of a sealed image's files: its
// data key, or a sealed file with a plain name.
func sealedImageFile(name string) bool {
	if name == imageKeyFile {
		return true
	}
	base, ok := strings.CutSuffix(name, sealedSuffix)
	if !ok || base == "" || base[0] == '.' {
		return false
	}
	for _, c := range base {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// syncDir makes dir's entries durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
