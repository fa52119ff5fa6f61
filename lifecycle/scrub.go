package lifecycle

import (
	"bytes"
	"io"
	"slices"
)

// scrubber passes output on to w with every secret value replaced by
// "[secret NAME]", so that a command that prints a credential it was given
// does not hand it to the caller. A value split across writes is caught
// too: the scrubber holds back the last bytes that could begin one until
// the next write or flush. It is not safe for concurrent use; an exec has
// one per stream.
type scrubber struct {
	w       io.Writer
	secrets []secretValue // longest first, so that a value containing another wins
	longest int
	held    []byte
	err     error
}

// secretValue is one secret given to a command.
type secretValue struct {
	name  string
	value []byte
}

func newScrubber(w io.Writer, secrets []secretValue) *scrubber {
	s := &scrubber{w: w, secrets: slices.Clone(secrets)}
	slices.SortFunc(s.secrets, func(a, b secretValue) int { return len(b.value) - len(a.value) })
	for _, v := range s.secrets {
		s.longest = max(s.longest, len(v.value))
	}
	return s
}

// Write takes p whole, passing on what can no longer be the start of a
// secret value. An error of w is returned from then on.
func (s *scrubber) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.held = append(s.held, p...)
	if err := s.emit(len(s.held) - (s.longest - 1)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush passes on everything held, at the end of the stream.
func (s *scrubber) flush() error {
	if s.err != nil {
		return s.err
	}
	return s.emit(len(s.held))
}

// emit scrubs and writes the held bytes up to limit, and any match that
// starts before it; the rest stays held.
func (s *scrubber) emit(limit int) error {
	var out []byte
	i := 0
	for i < limit {
		if v, ok := s.matchAt(s.held[i:]); ok {
			out = append(out, "[secret "+v.name+"]"...)
			i += len(v.value)
			continue
		}
		out = append(out, s.held[i])
		i++
	}
	s.held = append(s.held[:0], s.held[i:]...)
	if len(out) == 0 {
		return nil
	}
	if _, err := s.w.Write(out); err != nil {
		s.err = err
		return err
	}
	return nil
}

// matchAt returns the secret value b starts with, if any.
func (s *scrubber) matchAt(b []byte) (secretValue, bool) {
	for _, v := range s.secrets {
		if bytes.HasPrefix(b, v.value) {
			return v, true
		}
	}
	return secretValue{}, false
}
