package secrets_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/hearth/hearth/secrets"
)

func streamKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, secrets.StreamKeySize)
	rand.Read(k)
	return k
}

func seal(t testing.TB, key, plain []byte, label string) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := secrets.NewStreamWriter(&out, key, label)
	if err != nil {
		t.Fatal(err)
	}
	// Odd write sizes, so chunks are cut across writes.
	for rest := plain; len(rest) > 0; {
		n := min(len(rest), 333333)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func open(key, sealed []byte, label string) ([]byte, error) {
	r, err := secrets.NewStreamReader(bytes.NewReader(sealed), key, label)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// writtenAt is an io.WriterAt into memory that keeps what was written where.
type writtenAt struct {
	mu  sync.Mutex
	buf []byte
	at  map[int64]int // offset → length of each write
}

func (w *writtenAt) WriteAt(p []byte, off int64) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if end := int(off) + len(p); end > len(w.buf) {
		w.buf = append(w.buf, make([]byte, end-len(w.buf))...)
	}
	copy(w.buf[off:], p)
	if w.at == nil {
		w.at = map[int64]int{}
	}
	w.at[off] = len(p)
	return len(p), nil
}

// openAt opens sealed with OpenStreamAt on 3 goroutines; on an error it
// returns what was written where, as the plaintext's offsets.
func openAt(key, sealed []byte, label string) (*writtenAt, int64, error) {
	w := &writtenAt{}
	n, err := secrets.OpenStreamAt(w, bytes.NewReader(sealed), int64(len(sealed)), key, label, 3)
	return w, n, err
}

func TestStreamRoundTrip(t *testing.T) {
	key := streamKey(t)
	for _, n := range []int{0, 1, secrets.StreamChunk - 1, secrets.StreamChunk, secrets.StreamChunk + 1, 3*secrets.StreamChunk + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			plain := make([]byte, n)
			rand.Read(plain)
			sealed := seal(t, key, plain, "img/pages.img")
			if got := int64(len(sealed)) - int64(n); got != secrets.StreamOverhead(int64(n)) {
				t.Errorf("overhead %d, StreamOverhead says %d", got, secrets.StreamOverhead(int64(n)))
			}
			if got := secrets.StreamPlainSize(int64(len(sealed))); got != int64(n) {
				t.Errorf("StreamPlainSize(%d) = %d, want %d", len(sealed), got, n)
			}
			if n > 64 && bytes.Contains(sealed, plain[:64]) {
				t.Errorf("the sealed stream holds the plaintext")
			}
			got, err := open(key, sealed, "img/pages.img")
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("open = %d bytes, %v; want the %d written", len(got), err, n)
			}
			w, size, err := openAt(key, sealed, "img/pages.img")
			if err != nil || size != int64(n) || !bytes.Equal(w.buf, plain) {
				t.Fatalf("OpenStreamAt = %d bytes written, size %d, %v; want the %d written", len(w.buf), size, err, n)
			}
		})
	}
}

// TestStreamTampered: every change to a sealed stream, and the wrong key
// or label, is ErrTampered, and no plaintext of a chunk that does not open
// is returned.
func TestStreamTampered(t *testing.T) {
	key := streamKey(t)
	plain := bytes.Repeat([]byte("0123456789abcdef"), (2*secrets.StreamChunk+100)/16)
	sealed := seal(t, key, plain, "a")
	chunk := secrets.StreamChunk + 16
	header := len(sealed) - len(plain) - 3*16 // three chunks
	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 1
		return b
	}
	swapped := bytes.Clone(sealed)
	copy(swapped[header:], sealed[header+chunk:header+2*chunk])
	copy(swapped[header+chunk:], sealed[header:header+chunk])
	tests := []struct {
		name   string
		sealed []byte
		key    []byte
		label  string
	}{
		{"header", flip(3), key, "a"},
		{"nonce prefix", flip(header - 1), key, "a"},
		{"first chunk", flip(header + 10), key, "a"},
		{"last chunk's tag", flip(len(sealed) - 1), key, "a"},
		{"cut at a chunk's end", sealed[:header+2*chunk], key, "a"},
		{"cut inside a chunk", sealed[:len(sealed)-5], key, "a"},
		{"extended", append(bytes.Clone(sealed), 0), key, "a"},
		{"a chunk repeated", append(bytes.Clone(sealed[:header+chunk]), sealed[header:]...), key, "a"},
		{"chunks swapped", swapped, key, "a"},
		{"empty", nil, key, "a"},
		{"wrong label", sealed, key, "b"},
		{"wrong key", sealed, streamKey(t), "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := open(tc.key, tc.sealed, tc.label)
			if !errors.Is(err, secrets.ErrTampered) {
				t.Errorf("open = %v, want ErrTampered", err)
			}
			if !bytes.Equal(got, plain[:len(got)]) {
				t.Errorf("open returned %d bytes that are not the plaintext", len(got))
			}
			w, _, err := openAt(tc.key, tc.sealed, tc.label)
			if !errors.Is(err, secrets.ErrTampered) {
				t.Errorf("OpenStreamAt = %v, want ErrTampered", err)
			}
			for off, n := range w.at {
				if off+int64(n) > int64(len(plain)) || !bytes.Equal(w.buf[off:off+int64(n)], plain[off:off+int64(n)]) {
					t.Errorf("OpenStreamAt wrote %d bytes at %d that are not the plaintext", n, off)
				}
			}
		})
	}
}

func FuzzStreamReader(f *testing.F) {
	key := make([]byte, secrets.StreamKeySize)
	for _, n := range []int{0, 5, 100} {
		var out bytes.Buffer
		w, _ := secrets.NewStreamWriter(&out, key, "l")
		w.Write(bytes.Repeat([]byte{'x'}, n))
		w.Close()
		f.Add(out.Bytes())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := open(key, in, "l")
		if err == nil && len(got) > 0 && !bytes.Equal(got, bytes.Repeat([]byte{'x'}, len(got))) {
			t.Fatalf("a stream nobody sealed opened: %q", got)
		}
		if err != nil && !errors.Is(err, secrets.ErrTampered) {
			t.Fatalf("open = %v, want ErrTampered or nil", err)
		}
		w, n, errAt := openAt(key, in, "l")
		if (err == nil) != (errAt == nil) || errAt == nil && (n != int64(len(got)) || !bytes.Equal(w.buf, got)) {
			t.Fatalf("OpenStreamAt = %d bytes, %v; the reader opened %d bytes, %v", n, errAt, len(got), err)
		}
		if errAt != nil && !errors.Is(errAt, secrets.ErrTampered) {
			t.Fatalf("OpenStreamAt = %v, want ErrTampered or nil", errAt)
		}
	})
}

// BenchmarkStream is sealing and opening 64 MiB, for the cost a memory
// image's encryption adds per byte.
func BenchmarkStream(b *testing.B) {
	key := streamKey(b)
	plain := make([]byte, 64<<20)
	rand.Read(plain)
	b.Run("seal", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for range b.N {
			w, _ := secrets.NewStreamWriter(io.Discard, key, "l")
			w.Write(plain)
			w.Close()
		}
	})
	sealed := seal(b, key, plain, "l")
	b.Run("open", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for range b.N {
			r, _ := secrets.NewStreamReader(bytes.NewReader(sealed), key, "l")
			io.Copy(io.Discard, r)
		}
	})
	b.Run("open-at-2", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		out := make([]byte, len(plain))
		for range b.N {
			secrets.OpenStreamAt(bytesAt(out), bytes.NewReader(sealed), int64(len(sealed)), key, "l", 2)
		}
	})
}

// bytesAt is an io.WriterAt into a slice large enough.
type bytesAt []byte

func (b bytesAt) WriteAt(p []byte, off int64) (int, error) { return copy(b[off:], p), nil }
