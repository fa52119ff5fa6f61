package secrets

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// OpenStreamAt opens the sealed stream of size bytes in src and writes its
// plaintext into dst at the same offsets as in the plaintext, on up to
// workers goroutines at once (each chunk stands alone: its index and
// whether it is the last are in its nonce, and the last one is the one
// the size says). It returns the plaintext's size. Every chunk is
// authenticated before any of its bytes is written; a stream that does
// not open is ErrTampered, and dst then holds the plaintext of some of
// the chunks that did, which the caller discards.
func OpenStreamAt(dst io.WriterAt, src io.ReaderAt, size int64, key []byte, label string, workers int) (int64, error) {
	if _, err := streamAEAD(key); err != nil {
		return 0, err
	}
	hdr := make([]byte, streamHeader)
	if _, err := src.ReadAt(hdr, 0); err != nil || !bytes.Equal(hdr[:len(streamMagic)], []byte(streamMagic)) {
		return 0, ErrTampered
	}
	plain := StreamPlainSize(size)
	if plain < 0 {
		return 0, ErrTampered
	}
	chunks := streamChunks(plain)
	if chunks > 1<<32 {
		return 0, ErrTampered
	}
	var (
		next   atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		first  error
		wg     sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		failed.Store(true)
	}
	for range max(1, min(int64(workers), chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			aead, _ := streamAEAD(key) // one each: nothing shared between goroutines
			full := StreamChunk + aead.Overhead()
			buf, out, nc := make([]byte, full), make([]byte, 0, StreamChunk), []byte(nil)
			for i := next.Add(1) - 1; i < chunks && !failed.Load(); i = next.Add(1) - 1 {
				off := int64(streamHeader) + i*int64(full)
				sealed := buf[:min(int64(full), size-off)]
				if _, err := src.ReadAt(sealed, off); err != nil {
					fail(err)
					return
				}
				nc = nonce(nc, hdr[len(streamMagic):], uint32(i), i == chunks-1)
				p, err := aead.Open(out[:0], nc, sealed, []byte(label))
				if err != nil {
					fail(ErrTampered)
					return
				}
				if _, err := dst.WriteAt(p, i*StreamChunk); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		if errors.Is(first, io.EOF) {
			first = ErrTampered // the source is shorter than size says
		}
		return 0, first
	}
	return plain, nil
}
