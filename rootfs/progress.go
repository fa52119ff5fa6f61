package rootfs

import (
	"bytes"
	"io"
	"sync"
)

// prefixWriter copies whole lines to w, each with prefix, so that the
// progress of a build reads as one stream even when the bootstrap writes
// half lines or from two pipes. Write never fails: progress is best effort
// and must not break a build.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	buf    []byte
}

func newPrefixWriter(w io.Writer, prefix string) *prefixWriter {
	if w == nil {
		w = io.Discard
	}
	return &prefixWriter{w: w, prefix: []byte(prefix)}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		// debootstrap redraws some lines with \r; treat it as an end of line.
		i := bytes.IndexAny(p.buf, "\r\n")
		if i < 0 {
			break
		}
		if line := p.buf[:i]; len(bytes.TrimSpace(line)) > 0 {
			p.emit(line)
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// Flush writes a last unterminated line, if any.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(bytes.TrimSpace(p.buf)) > 0 {
		p.emit(p.buf)
	}
	p.buf = nil
}

func (p *prefixWriter) emit(line []byte) {
	out := make([]byte, 0, len(p.prefix)+len(line)+1)
	out = append(append(append(out, p.prefix...), line...), '\n')
	p.w.Write(out)
}
