package lifecycle

import (
	"bytes"
	"strings"
	"testing"
)

func TestScrubber(t *testing.T) {
	secrets := []secretValue{{"KEY", []byte("sk-12345678")}, {"PASS", []byte("hunter22")}, {"LONG", []byte("sk-12345678-extended")}}
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"none", []string{"hello world\n"}, "hello world\n"},
		{"one", []string{"key=sk-12345678\n"}, "key=[secret KEY]\n"},
		{"twice", []string{"sk-12345678 sk-12345678"}, "[secret KEY] [secret KEY]"},
		{"split", []string{"key=sk-123", "45678 done"}, "key=[secret KEY] done"},
		{"byte by byte", strings.Split("a hunter22 b", ""), "a [secret PASS] b"},
		{"the longer wins", []string{"sk-12345678-extended!"}, "[secret LONG]!"},
		{"at the very end", []string{"x hunter2", "2"}, "x [secret PASS]"},
		{"a prefix only", []string{"hunter2"}, "hunter2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := newScrubber(&out, secrets)
			for _, c := range tc.chunks {
				if n, err := s.Write([]byte(c)); err != nil || n != len(c) {
					t.Fatalf("Write(%q) = %d, %v", c, n, err)
				}
			}
			if err := s.flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("scrubbed %q = %q, want %q", tc.chunks, out.String(), tc.want)
			}
		})
	}
}
