package scrub_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hearth/hearth/scrub"
)

func TestWriter(t *testing.T) {
	secrets := []scrub.Secret{{Name: "KEY", Value: []byte("sk-12345678")}, {Name: "PASS", Value: []byte("hunter22")}, {Name: "LONG", Value: []byte("sk-12345678-extended")}}
	for _, tc := range []struct {
		name    string
		secrets []scrub.Secret
		chunks  []string
		want    string
	}{
		{"none", secrets, []string{"hello world\n"}, "hello world\n"},
		{"one", secrets, []string{"key=sk-12345678\n"}, "key=[secret KEY]\n"},
		{"twice", secrets, []string{"sk-12345678 sk-12345678"}, "[secret KEY] [secret KEY]"},
		{"split", secrets, []string{"key=sk-123", "45678 done"}, "key=[secret KEY] done"},
		{"byte by byte", secrets, strings.Split("a hunter22 b", ""), "a [secret PASS] b"},
		{"the longer wins", secrets, []string{"sk-12345678-extended!"}, "[secret LONG]!"},
		{"at the very end", secrets, []string{"x hunter2", "2"}, "x [secret PASS]"},
		{"a prefix only", secrets, []string{"hunter2"}, "hunter2"},
		{"a longer value pending", secrets, []string{"sk-12345678", "-ext", "ended"}, "[secret LONG]"},
		{"a longer value that does not come", secrets, []string{"sk-12345678", "-ext", "!"}, "[secret KEY]-ext!"},
		{"a prefix then the value", secrets, []string{"hunthunter22"}, "hunt[secret PASS]"},
		{"no secrets", nil, []string{"a", "bc"}, "abc"},
		{"an empty value is ignored", []scrub.Secret{{Name: "EMPTY"}}, []string{"abc"}, "abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := scrub.NewWriter(&out, tc.secrets)
			for _, c := range tc.chunks {
				if n, err := s.Write([]byte(c)); err != nil || n != len(c) {
					t.Fatalf("Write(%q) = %d, %v", c, n, err)
				}
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("scrubbed %q = %q, want %q", tc.chunks, out.String(), tc.want)
			}
		})
	}
}

// TestWriterHoldsBack checks that a possible start of a value is not
// passed on before the Writer knows, and that nothing else is held.
func TestWriterHoldsBack(t *testing.T) {
	var out bytes.Buffer
	s := scrub.NewWriter(&out, []scrub.Secret{{Name: "PASS", Value: []byte("hunter22")}})
	s.Write([]byte("0123456789hunt"))
	if got, want := out.String(), "0123456789"; got != want {
		t.Errorf("after Write, passed on %q, want %q", got, want)
	}
	s.Flush()
	if got, want := out.String(), "0123456789hunt"; got != want {
		t.Errorf("after Flush, passed on %q, want %q", got, want)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriterError(t *testing.T) {
	boom := errors.New("boom")
	s := scrub.NewWriter(failWriter{boom}, []scrub.Secret{{Name: "K", Value: []byte("kk")}})
	if _, err := s.Write([]byte("hello")); !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want %v", err, boom)
	}
	if _, err := s.Write([]byte("again")); !errors.Is(err, boom) {
		t.Errorf("second Write = %v, want %v", err, boom)
	}
	if err := s.Flush(); !errors.Is(err, boom) {
		t.Errorf("Flush = %v, want %v", err, boom)
	}
}

// FuzzWriter checks that how a stream is split into writes changes nothing
// and that no value survives scrubbing.
func FuzzWriter(f *testing.F) {
	f.Add([]byte("key=sk-12345678 and hunter22"), uint8(3))
	f.Add([]byte("sk-12345678-extended sk-12345678-ext"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		secrets := []scrub.Secret{{Name: "KEY", Value: []byte("sk-12345678")}, {Name: "PASS", Value: []byte("hunter22")}, {Name: "LONG", Value: []byte("sk-12345678-extended")}}
		var whole, split bytes.Buffer
		w := scrub.NewWriter(&whole, secrets)
		w.Write(in)
		w.Flush()
		s := scrub.NewWriter(&split, secrets)
		n := int(step%16) + 1
		for rest := in; len(rest) > 0; {
			k := min(n, len(rest))
			s.Write(rest[:k])
			rest = rest[k:]
		}
		s.Flush()
		if whole.String() != split.String() {
			t.Fatalf("in %d-byte writes %q = %q, in one write %q", n, in, split.String(), whole.String())
		}
		for _, v := range secrets {
			if bytes.Contains(whole.Bytes(), v.Value) {
				t.Fatalf("scrubbed %q = %q, still holds %s", in, whole.String(), v.Name)
			}
		}
	})
}
