package gateway

import (
	"bytes"
	"io"

	"github.com/hearth/hearth/scrub"
)

// scrubReader is a response body with the route's secrets scrubbed out.
// Each Read returns what the scrubber has passed on as soon as there is
// any, so that a streamed body keeps streaming; only the last bytes that
// could begin a value wait for the next ones. When the upstream's body
// fails rather than ends, the bytes held back are dropped, not passed on:
// they could be the start of a value.
type scrubReader struct {
	src io.ReadCloser
	w   *scrub.Writer
	out bytes.Buffer // scrubbed, not yet read
	err error
}

func newScrubReader(src io.ReadCloser, secrets []scrub.Secret) *scrubReader {
	r := &scrubReader{src: src}
	r.w = scrub.NewWriter(&r.out, secrets)
	return r
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for r.out.Len() == 0 && r.err == nil && len(p) > 0 {
		// p is the read buffer too: the scrubber copies what it holds.
		n, err := r.src.Read(p)
		r.w.Write(p[:n]) // into a bytes.Buffer: cannot fail
		if err == io.EOF {
			r.w.Flush()
		}
		r.err = err
	}
	if r.out.Len() > 0 {
		return r.out.Read(p)
	}
	return 0, r.err
}

func (r *scrubReader) Close() error { return r.src.Close() }
