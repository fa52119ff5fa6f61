package image

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"
)

// TestReadAheadBytes: what a readAhead returns is its reader's bytes, in
// order, whatever the sizes of the reads on either side, then io.EOF.
func TestReadAheadBytes(t *testing.T) {
	src := make([]byte, aheadChunks*aheadChunk*2+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for _, tc := range []struct {
		name string
		data []byte
		wrap func(io.Reader) io.Reader
		read int
	}{
		{"whole chunks", src, nil, aheadChunk},
		{"small reads of a reader of one byte at a time", src[:300000], iotest.OneByteReader, 7},
		{"reads across chunks", src, iotest.HalfReader, aheadChunk + 4097},
		{"empty", nil, nil, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in io.Reader = bytes.NewReader(tc.data)
			if tc.wrap != nil {
				in = tc.wrap(in)
			}
			ra := newReadAhead(in)
			defer ra.Close()
			var got bytes.Buffer
			buf := make([]byte, tc.read)
			for {
				n, err := ra.Read(buf)
				got.Write(buf[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got.Bytes(), tc.data) {
				t.Fatalf("read %d bytes, not the source's %d", got.Len(), len(tc.data))
			}
			if n, err := ra.Read(buf); n != 0 || err != io.EOF {
				t.Errorf("a Read after the end = %d, %v; want 0, EOF", n, err)
			}
		})
	}
}

// TestReadAheadError: a reader's error comes after every byte it returned
// before it, as it is (io.ErrUnexpectedEOF too, which is not the end).
func TestReadAheadError(t *testing.T) {
	for _, fail := range []error{errors.New("the blob does not match its digest"), io.ErrUnexpectedEOF} {
		data := bytes.Repeat([]byte("x"), aheadChunk+100)
		ra := newReadAhead(io.MultiReader(bytes.NewReader(data), iotest.ErrReader(fail)))
		got, err := io.ReadAll(ra)
		ra.Close()
		if err != fail || !bytes.Equal(got, data) {
			t.Errorf("ReadAll = %d bytes, %v; want %d bytes, then %v", len(got), err, len(data), fail)
		}
	}
}

// TestReadAheadClose: once Close returned, the reader is not read again,
// though the caller stopped half way and the reader has more.
func TestReadAheadClose(t *testing.T) {
	var closed, readAfter atomic.Bool
	r := readFunc(func(p []byte) (int, error) {
		if closed.Load() {
			readAfter.Store(true)
		}
		time.Sleep(time.Millisecond)
		return len(p), nil // endless
	})
	ra := newReadAhead(r)
	if _, err := io.ReadFull(ra, make([]byte, aheadChunk/2)); err != nil {
		t.Fatal(err)
	}
	ra.Close()
	closed.Store(true)
	time.Sleep(50 * time.Millisecond)
	if readAfter.Load() {
		t.Error("the reader was read after Close returned")
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }
