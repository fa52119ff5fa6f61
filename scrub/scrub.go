// Package scrub takes secret values out of a stream of bytes, so that
// whatever is given a credential (a command, an upstream API) cannot hand
// it back to the caller through its output.
//
// Scrubbing matches the value's bytes as they are: a program that
// transforms a value (encodes, escapes, reverses or splits it) defeats it.
// It is a safeguard against echoes, not a sandbox for hostile code.
package scrub

import (
	"bytes"
	"io"
	"slices"
)

// Writer passes output on to w with every secret value replaced by
// "[secret NAME]", so that a command that prints a credential it was given
// does not hand it to the caller. A value split across writes is caught
// too: the Writer holds back the last bytes that could begin one until
// the next write or flush. It is not safe for concurrent use; an exec has
// one per stream.
type Writer struct {
	w       io.Writer
	secrets []Secret // longest first, so that a value containing another wins
	firsts  []byte   // the values' distinct first bytes
	next    []int    // emit's scratch: per first byte, where it next occurs
	held    []byte
	out     []byte // reused between writes; w must not keep it (io.Writer)
	err     error
}

// Secret is one secret value to scrub (given to a command, or sent
// upstream by the egress gateway) and the name that replaces it. An empty
// Value is never matched: it would match everywhere.
type Secret struct {
	Name  string
	Value []byte
}

// NewWriter returns a Writer that passes on to w what is written to it,
// with every value of secrets replaced by "[secret NAME]". The caller runs
// Flush once the stream has ended. With no non-empty value the Writer
// passes everything straight on.
func NewWriter(w io.Writer, secrets []Secret) *Writer {
	s := &Writer{w: w}
	for _, v := range secrets {
		if len(v.Value) > 0 {
			s.secrets = append(s.secrets, v)
			if !bytes.Contains(s.firsts, v.Value[:1]) {
				s.firsts = append(s.firsts, v.Value[0])
			}
		}
	}
	slices.SortStableFunc(s.secrets, func(a, b Secret) int { return len(b.Value) - len(a.Value) })
	return s
}

// Write takes p whole, passing on what can no longer be the start of a
// secret value. An error of w is returned from then on.
func (s *Writer) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.held = append(s.held, p...)
	if err := s.emit(false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush passes on everything held, at the end of the stream.
func (s *Writer) Flush() error {
	if s.err != nil {
		return s.err
	}
	return s.emit(true)
}

// emit scrubs and writes the held bytes up to the first that could begin
// a value the bytes after it do not yet complete (up to the end when
// final); the rest stays held.
func (s *Writer) emit(final bool) error {
	out := s.out[:0]
	s.next = s.next[:0]
	for range s.firsts {
		s.next = append(s.next, -2) // not looked for yet
	}
	i, start := 0, 0
scan:
	for {
		if i = s.candidate(i); i == len(s.held) {
			break
		}
		v, m := s.matchAt(s.held[i:], final)
		switch m {
		case pending:
			break scan
		case matched:
			out = append(out, s.held[start:i]...)
			out = append(out, "[secret "...)
			out = append(out, v.Name...)
			out = append(out, ']')
			i += len(v.Value)
			start = i
		default:
			i++
		}
	}
	out = append(out, s.held[start:i]...)
	s.held = append(s.held[:0], s.held[i:]...)
	s.out = out
	if len(out) == 0 {
		return nil
	}
	if _, err := s.w.Write(out); err != nil {
		s.err = err
		return err
	}
	return nil
}

// candidate returns the first index from on of a byte in held that some
// value begins with, or len(held). It finds each first byte with
// bytes.IndexByte and remembers where, so that a scan of held costs a few
// vectorised passes rather than a comparison per byte.
func (s *Writer) candidate(from int) int {
	best := len(s.held)
	for j, c := range s.firsts {
		if n := s.next[j]; n != -1 && n < from {
			if k := bytes.IndexByte(s.held[from:], c); k < 0 {
				s.next[j] = -1 // none left
			} else {
				s.next[j] = from + k
			}
		}
		if n := s.next[j]; n >= 0 && n < best {
			best = n
		}
	}
	return best
}

type match int

const (
	none    match = iota
	matched       // b starts with the value
	pending       // b is a proper prefix of the value: more bytes decide
)

// matchAt returns the longest secret value b starts with, if any, or
// pending when a longer value could still follow once more bytes come.
// When final no more bytes come, and nothing is pending.
func (s *Writer) matchAt(b []byte, final bool) (Secret, match) {
	for _, v := range s.secrets {
		if len(b) < len(v.Value) {
			if !final && bytes.HasPrefix(v.Value, b) {
				return v, pending
			}
			continue
		}
		if bytes.HasPrefix(b, v.Value) {
			return v, matched
		}
	}
	return Secret{}, none
}
