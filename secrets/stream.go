package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A stream seals data too large to hold in memory at once (a sandbox's
// memory image) under a key of its own: the STREAM construction of Hoang,
// Reyhanitabar, Rogaway and Vizár ("Online Authenticated-Encryption and
// its Nonce-Reuse Misuse-Resistance", CRYPTO 2015) over AES-256-GCM. The
// plaintext is cut into chunks of StreamChunk bytes, the last one shorter
// (possibly empty); chunk i is sealed with the nonce prefix‖i‖last, where
// prefix is 7 random bytes of the stream's header, i a 32-bit big-endian
// counter and last 1 for the final chunk, 0 for the others, and with the
// stream's label as additional data. So a reader detects a chunk altered,
// dropped, repeated, moved within the stream or taken from another, the
// stream cut short or extended, and a stream given another label.
//
// Layout: streamMagic, the 7-byte prefix, then the sealed chunks, each
// StreamChunk plus 16 bytes but the last.

const (
	// StreamChunk is the plaintext size of a stream's chunks.
	StreamChunk = 1 << 20
	// StreamKeySize is the size of a stream's key: AES-256.
	StreamKeySize = 32
	streamMagic   = "hearth-stream-1\n"
	prefixSize    = 7
	// streamHeader is the size of a stream's header.
	streamHeader = len(streamMagic) + prefixSize
)

// ErrTampered is returned by a stream's reader for a stream that does not
// open with its key and label: altered, cut short, extended, or sealed
// under another key or label.
var ErrTampered = errors.New("secrets: the stream does not open with this key and label: altered, truncated or sealed for another")

// StreamOverhead returns how many bytes a stream of n plaintext bytes
// adds: its header and a tag per chunk.
func StreamOverhead(n int64) int64 {
	return int64(streamHeader) + streamChunks(n)*16
}

// streamChunks is the number of chunks of a stream of n plaintext bytes:
// the last is the only one shorter than StreamChunk, and may be empty.
func streamChunks(n int64) int64 {
	return max(1, (n+StreamChunk-1)/StreamChunk)
}

// StreamPlainSize returns the plaintext size of a sealed stream of n
// bytes, or -1 when no stream has that size.
func StreamPlainSize(n int64) int64 {
	body := n - int64(streamHeader)
	if body < 16 {
		return -1
	}
	plain := body - (body+StreamChunk+16-1)/(StreamChunk+16)*16
	if plain < 0 || plain+StreamOverhead(plain) != n {
		return -1
	}
	return plain
}

// streamAEAD returns AES-256-GCM under key.
func streamAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != StreamKeySize {
		return nil, fmt.Errorf("secrets: a stream key is %d bytes, got %d", StreamKeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return cipher.NewGCM(block)
}

// nonce returns the nonce of chunk i of the stream with prefix.
func nonce(dst []byte, prefix []byte, i uint32, last bool) []byte {
	dst = append(dst[:0], prefix...)
	dst = binary.BigEndian.AppendUint32(dst, i)
	if last {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// StreamWriter seals what is written to it into an underlying writer.
type StreamWriter struct {
	w      io.Writer
	aead   cipher.AEAD
	label  []byte
	prefix []byte
	nonce  []byte
	buf    []byte // the chunk being filled, then its sealed form
	i      uint32
	err    error
}

// NewStreamWriter writes a stream's header to w and returns a writer that
// seals into w what is written to it, under key (StreamKeySize random
// bytes, used for no other stream) and bound to label. Close seals the
// last chunk: a stream not closed does not open.
func NewStreamWriter(w io.Writer, key []byte, label string) (*StreamWriter, error) {
	aead, err := streamAEAD(key)
	if err != nil {
		return nil, err
	}
	s := &StreamWriter{w: w, aead: aead, label: []byte(label), prefix: make([]byte, prefixSize),
		buf: make([]byte, 0, StreamChunk+aead.Overhead())}
	rand.Read(s.prefix)
	if _, err := w.Write(append([]byte(streamMagic), s.prefix...)); err != nil {
		return nil, err
	}
	return s, nil
}

// Write seals p in order; a chunk goes out once it is full.
func (s *StreamWriter) Write(p []byte) (int, error) {
	n := 0
	for s.err == nil && len(p) > 0 {
		if len(s.buf) == StreamChunk {
			s.seal(false)
			continue
		}
		k := copy(s.buf[len(s.buf):StreamChunk], p)
		s.buf, p, n = s.buf[:len(s.buf)+k], p[k:], n+k
	}
	return n, s.err
}

// seal seals the buffered chunk and writes it.
func (s *StreamWriter) seal(last bool) {
	if s.err != nil {
		return
	}
	if s.i == ^uint32(0) {
		s.err = errors.New("secrets: a stream is limited to 2^32 chunks")
		return
	}
	s.nonce = nonce(s.nonce, s.prefix, s.i, last)
	sealed := s.aead.Seal(s.buf[:0], s.nonce, s.buf, s.label) // over the plaintext
	_, s.err = s.w.Write(sealed)
	s.buf, s.i = s.buf[:0], s.i+1
}

// Close seals the last chunk. It does not close the underlying writer.
func (s *StreamWriter) Close() error {
	s.seal(true)
	if s.err == nil {
		s.err = errors.New("secrets: write to a closed stream")
		return nil
	}
	return s.err
}

// StreamReader opens a stream written by a StreamWriter.
type StreamReader struct {
	r      io.Reader
	aead   cipher.AEAD
	label  []byte
	prefix []byte
	nonce  []byte
	buf    []byte // one sealed chunk and a byte of the next, read ahead
	out    []byte // the last chunk opened
	plain  []byte // what is left of it
	i      uint32
	done   bool
	err    error
}

// NewStreamReader reads the header of a stream from r and returns a reader
// of its plaintext under key and label. Every chunk is authenticated
// before any of its bytes is returned; a stream that does not open is
// ErrTampered, at the chunk where it fails.
func NewStreamReader(r io.Reader, key []byte, label string) (*StreamReader, error) {
	aead, err := streamAEAD(key)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, streamHeader)
	if _, err := io.ReadFull(r, hdr); err != nil || !bytes.Equal(hdr[:len(streamMagic)], []byte(streamMagic)) {
		return nil, ErrTampered
	}
	return &StreamReader{r: r, aead: aead, label: []byte(label), prefix: hdr[len(streamMagic):],
		buf: make([]byte, 0, StreamChunk+aead.Overhead()+1), out: make([]byte, 0, StreamChunk)}, nil
}

// Read returns plaintext that has been authenticated.
func (s *StreamReader) Read(p []byte) (int, error) {
	for len(s.plain) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.done {
			return 0, io.EOF
		}
		s.open()
	}
	n := copy(p, s.plain)
	s.plain = s.plain[n:]
	return n, nil
}

// open reads and opens the next chunk. A chunk is the last when the
// stream ends right after it; the byte read ahead says whether it does.
func (s *StreamReader) open() {
	full := StreamChunk + s.aead.Overhead()
	have := len(s.buf)
	s.buf = s.buf[:full+1]
	n, err := io.ReadFull(s.r, s.buf[have:])
	s.buf = s.buf[:have+n]
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		s.done = true
	case err != nil:
		s.err = err
		return
	}
	chunk := s.buf
	if !s.done {
		chunk = s.buf[:full]
	}
	if s.i == ^uint32(0) && !s.done {
		s.err = ErrTampered
		return
	}
	s.nonce = nonce(s.nonce, s.prefix, s.i, s.done)
	plain, err := s.aead.Open(s.out[:0], s.nonce, chunk, s.label)
	if err != nil {
		s.err, s.done = ErrTampered, false
		return
	}
	s.plain = plain
	s.i++
	if !s.done {
		// The byte read ahead begins the next chunk.
		next := s.buf[full]
		s.buf = append(s.buf[:0], next)
	} else {
		s.buf = s.buf[:0]
	}
}
