package fetch

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// maxZstdWindow bounds the memory a zstd layer may make a reader
// allocate for its window (zstd's --ultra levels use at most 128 MiB).
const maxZstdWindow = 128 << 20

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// Open gives the uncompressed stream (a tar) of layer, whichever its
// compression (gzip, zstd or none: told by its first bytes, not its media
// type), checking the compressed blob against the layer's digest and size
// as it is read. A blob that does not match fails the Read that reaches
// its end with an *Error of kind ErrDigest, after the bytes before it were
// returned: a caller trusts what it read only once Read returned io.EOF.
// The stream is read to the blob's end even when the decompressor stops
// before it, so that the digest covers every byte.
func Open(layer v1.Layer) (io.ReadCloser, error) {
	d, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	size, err := layer.Size()
	if err != nil {
		return nil, err
	}
	if err := checkDigest(d); err != nil {
		return nil, err
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, err
	}
	v := newVerifier(rc, "layer", d, size)
	br := bufio.NewReaderSize(v, 64<<10)
	lr := &layerReader{br: br, blob: rc}
	if lr.dec, lr.closeDec, _, err = decompress(br); err != nil {
		rc.Close()
		if e := (*Error)(nil); errors.As(err, &e) {
			return nil, err // the verifier's
		}
		return nil, kindf(ErrInvalid, "%v", err).at("layer", d.String())
	}
	return lr, nil
}

// decompress gives the uncompressed stream of br, told by its first
// bytes: gzip, zstd or none; closeDec releases the decompressor, and mt
// is the OCI layer media type of what it found.
func decompress(br *bufio.Reader) (dec io.Reader, closeDec func(), mt types.MediaType, err error) {
	magic, err := br.Peek(len(zstdMagic))
	if err != nil && err != io.EOF {
		return nil, nil, "", err
	}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, "", fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { zr.Close() }, types.OCILayer, nil
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, nil, "", fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, types.OCILayerZStd, nil
	}
	return br, func() {}, types.OCIUncompressedLayer, nil
}

// layerReader is Open's stream: the decompressor over the verifier.
type layerReader struct {
	dec      io.Reader
	br       *bufio.Reader
	blob     io.Closer
	closeDec func()
}

func (l *layerReader) Read(p []byte) (int, error) {
	n, err := l.dec.Read(p)
	if err == io.EOF {
		// Whatever follows the compressed stream is part of the blob:
		// read it through the verifier, which reports a mismatch.
		if _, derr := io.Copy(io.Discard, l.br); derr != nil {
			return n, derr
		}
	}
	return n, err
}

func (l *layerReader) Close() error {
	l.closeDec()
	return l.blob.Close()
}

// verifier passes a blob through, hashing it, and fails the read that
// finds it longer than its size or, at its end, not matching its digest.
type verifier struct {
	r    io.Reader
	what string
	want v1.Hash
	size int64
	h    hash.Hash
	n    int64
}

// newVerifier verifies r against the sha256 digest want and size.
func newVerifier(r io.Reader, what string, want v1.Hash, size int64) *verifier {
	return &verifier{r: r, what: what, want: want, size: size, h: sha256.New()}
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.size {
		return n, kindf(ErrDigest, "the blob is longer than its %d bytes", v.size).at(v.what, v.want.String())
	}
	if err == io.EOF {
		got := "sha256:" + hex.EncodeToString(v.h.Sum(nil))
		if v.n != v.size || got != v.want.String() {
			return n, mismatch(v.n, v.size, got).at(v.what, v.want.String())
		}
	}
	return n, err
}

// verify reads r to its end and checks it against d's size and digest.
func verify(r io.Reader, what string, d v1.Descriptor) error {
	_, err := io.Copy(io.Discard, newVerifier(r, what, d.Digest, d.Size))
	return err
}

// mismatch is the ErrDigest of a blob of n bytes (want: size) whose
// digest is got.
func mismatch(n, size int64, got string) *Error {
	if n != size {
		return kindf(ErrDigest, "got %d bytes, want %d", n, size)
	}
	return kindf(ErrDigest, "the bytes received have digest %s", got)
}
