package layers_test

import (
	"path/filepath"
	"testing"

	"github.com/hearth/hearth/layers"
)

// FuzzValidateKey checks that every key ValidateKey accepts is one safe
// path element of the allowed bytes, as a store uses it for a file name.
func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"a", "img.v1", "..", ".", "a/b", "", "A", "a\x00b", "-x"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if layers.ValidateKey(key) != nil {
			return
		}
		if filepath.Base(key) != key || key == "." || key == ".." || len(key) > layers.MaxKeyLen || key[0] == '.' || key[0] == '-' {
			t.Errorf("ValidateKey(%q) = nil for a key that is not one safe path element", key)
		}
		for _, c := range []byte(key) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				t.Errorf("ValidateKey(%q) = nil with byte %q", key, c)
			}
		}
	})
}
