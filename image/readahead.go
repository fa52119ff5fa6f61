package image

import "io"

// Read-ahead of a layer's stream: the chunks in flight and their size.
const (
	aheadChunks = 4
	aheadChunk  = 1 << 20
)

// readAhead reads r in a goroutine of its own, at most aheadChunks chunks
// ahead of its caller, so that what reading r costs (a layer's blob read,
// checked against its digest, decompressed and hashed) runs on one CPU
// while the caller writes the layer's files on another. Read returns r's
// bytes in r's order, then r's error (io.EOF at its end). Close stops the
// goroutine and waits for it: r is not read once Close returned, and may
// be closed then. A readAhead is for one goroutine.
type readAhead struct {
	full  chan chunk  // read from r, in order
	empty chan []byte // buffers to read into
	stop  chan struct{}
	done  chan struct{}
	cur   chunk // what Read returns from, from off
	off   int
}

// chunk is a buffer of bytes read from r and, once r failed or ended, its
// error (after the bytes).
type chunk struct {
	b   []byte
	err error
}

// newReadAhead starts reading r ahead.
func newReadAhead(r io.Reader) *readAhead {
	ra := &readAhead{
		full:  make(chan chunk, aheadChunks),
		empty: make(chan []byte, aheadChunks+1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	for range aheadChunks + 1 {
		ra.empty <- make([]byte, aheadChunk)
	}
	go ra.fill(r)
	return ra
}

// fill reads r into free buffers until r fails or ends, or Close.
func (ra *readAhead) fill(r io.Reader) {
	defer close(ra.done)
	for {
		var buf []byte
		select {
		case buf = <-ra.empty:
		case <-ra.stop:
			return
		}
		n, err := 0, error(nil)
		for n < len(buf) && err == nil {
			var m int
			m, err = r.Read(buf[n:])
			n += m
		}
		select {
		case ra.full <- chunk{b: buf[:n], err: err}:
		case <-ra.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

func (ra *readAhead) Read(p []byte) (int, error) {
	for ra.off == len(ra.cur.b) {
		if ra.cur.err != nil {
			return 0, ra.cur.err
		}
		if ra.cur.b != nil {
			ra.empty <- ra.cur.b[:cap(ra.cur.b)]
		}
		ra.cur, ra.off = <-ra.full, 0
	}
	n := copy(p, ra.cur.b[ra.off:])
	ra.off += n
	return n, nil
}

// Close stops the reading and waits until r is no longer read.
func (ra *readAhead) Close() error {
	close(ra.stop)
	<-ra.done
	return nil
}
