package layertar

import (
	"bytes"
	"errors"
	"io"
	"os"
)

// holeBlock is the run of zeros left as a hole rather than written.
const holeBlock = 4096

var zeroBlock [holeBlock]byte

// errTooBig is what boundedReader returns past its bound.
var errTooBig = errors.New("over the byte limit")

// boundedReader reads r and fails with errTooBig once more than max bytes
// have come.
type boundedReader struct {
	r      io.Reader
	n, max int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if room := b.max - b.n + 1; int64(len(p)) > room {
		p = p[:room] // one byte past the bound tells a longer stream from an exact one
	}
	m, err := b.r.Read(p)
	b.n += int64(m)
	if b.n > b.max {
		return 0, errTooBig
	}
	return m, err
}

// writeContent copies the size bytes of an entry's content from r into the
// new file f, leaving every aligned block of zeros as a hole: the file is
// written piece by piece at its offsets and given its size at the end.
func (a *applier) writeContent(name string, f *os.File, r io.Reader, size int64) error {
	for off := int64(0); off < size; {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(r, a.buf[:min(int64(len(a.buf)), size-off)])
		if err != nil {
			return a.streamError(name, "reading the file's content", err)
		}
		if err := a.writeData(name, f, a.buf[:n], off); err != nil {
			return err
		}
		off += int64(n)
	}
	if err := f.Truncate(size); err != nil {
		return fsError(name, "setting the file's size", err)
	}
	return nil
}

// writeData writes the blocks of chunk that are not all zeros at off in f.
// off is a multiple of holeBlock.
func (a *applier) writeData(name string, f *os.File, chunk []byte, off int64) error {
	start := -1 // where the run of data being gathered starts, or -1
	flush := func(end int) error {
		if start < 0 {
			return nil
		}
		if _, err := f.WriteAt(chunk[start:end], off+int64(start)); err != nil {
			return fsError(name, "writing the file", err)
		}
		a.st.Bytes += int64(end - start)
		start = -1
		return nil
	}
	for i := 0; i < len(chunk); i += holeBlock {
		end := min(i+holeBlock, len(chunk))
		if bytes.Equal(chunk[i:end], zeroBlock[:end-i]) {
			if err := flush(i); err != nil {
				return err
			}
		} else if start < 0 {
			start = i
		}
	}
	return flush(len(chunk))
}
