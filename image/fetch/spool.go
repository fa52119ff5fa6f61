package fetch

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
)

// maxArchiveEntries bounds the entries of an archive.
const maxArchiveEntries = 100_000

// maxLinkHops bounds the links followed to find one archive entry.
const maxLinkHops = 8

// spool is an archive's regular files, each copied out of the stream into
// a file of its own under dir (named by its order, never by the archive's
// names), with the archive's links between its names. Nothing in the
// archive is ever used as a path on the host.
type spool struct {
	dir   string
	files map[string]spooled
	links map[string]string
	// kept are the blobs moved out of the spool, removed again when the
	// archive is refused.
	kept []string
}

type spooled struct {
	path string
	size int64
}

// spoolArchive reads the tar stream r into dir/spool: its regular files
// (at most limit bytes in all), its symbolic and hard links as names of
// other entries; directories and the rest are skipped. On an error it
// leaves no spool.
func spoolArchive(ctx context.Context, r io.Reader, dir string, limit int64) (*spool, error) {
	s := &spool{dir: filepath.Join(dir, "spool"), files: map[string]spooled{}, links: map[string]string{}}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	if err := s.read(ctx, r, limit); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

// read spools the tar stream r.
func (s *spool) read(ctx context.Context, r io.Reader, limit int64) error {
	tr := tar.NewReader(ctxReader{ctx, r})
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if isContext(err) {
				return err
			}
			return kindf(ErrInvalid, "not a tar archive: %v", err)
		}
		if n >= maxArchiveEntries {
			return kindf(ErrTooLarge, "more than %d entries", maxArchiveEntries)
		}
		name := cleanEntry(hdr.Name)
		_, dupFile := s.files[name]
		if _, dupLink := s.links[name]; dupFile || dupLink {
			return &Error{Entry: name, Kind: ErrInvalid, Err: errors.New("the archive holds it twice")}
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
			if total += hdr.Size; total > limit {
				return kindf(ErrTooLarge, "its files hold more than the limit of %d bytes", limit)
			}
			if err := s.copy(tr, name, n, hdr.Size); err != nil {
				return err
			}
		case tar.TypeSymlink:
			target := hdr.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			s.links[name] = cleanEntry(target)
		case tar.TypeLink:
			s.links[name] = cleanEntry(hdr.Linkname)
		}
	}
}

// copy spools the current entry, n-th of the archive, as name.
func (s *spool) copy(r io.Reader, name string, n int, size int64) error {
	p := filepath.Join(s.dir, strconv.Itoa(n))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if isContext(err) {
			return err
		}
		return &Error{Entry: name, Kind: ErrInvalid, Err: fmt.Errorf("reading it: %w", err)}
	}
	s.files[name] = spooled{path: p, size: size}
	return nil
}

// cleanEntry is an archive name rooted at the archive's top, without
// "." or ".." ("./a/../b" → "b"), "" for the top itself.
func cleanEntry(name string) string {
	c := path.Clean("/" + name)
	return c[1:]
}

// lookup finds the file an archive name is, following links.
func (s *spool) lookup(name string) (spooled, error) {
	name = cleanEntry(name)
	for range maxLinkHops {
		if f, ok := s.files[name]; ok {
			return f, nil
		}
		target, ok := s.links[name]
		if !ok {
			break
		}
		name = target
	}
	return spooled{}, &Error{Entry: name, Kind: ErrInvalid, Err: errors.New("the archive has no such file")}
}

// small reads the file name, of at most max bytes.
func (s *spool) small(name string, max int64) ([]byte, error) {
	f, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	if f.size > max {
		return nil, &Error{Entry: name, Kind: ErrTooLarge, Err: fmt.Errorf("%d bytes, more than the limit of %d", f.size, max)}
	}
	return os.ReadFile(f.path)
}

// has reports whether the archive holds name.
func (s *spool) has(name string) bool {
	_, err := s.lookup(name)
	return err == nil
}
