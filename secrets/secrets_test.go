package secrets_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hearth/hearth/secrets"
)

func TestSealOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.key")
	b, err := secrets.LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != secrets.KeySize {
		t.Fatalf("key file = %v, %v; want 0600 and %d bytes", fi, err, secrets.KeySize)
	}
	value := []byte("sk-live-0123456789")
	sealed := b.Seal("acme", "OPENAI_API_KEY", value)
	if bytes.Contains(sealed, value) {
		t.Fatalf("the sealed value holds the plain one")
	}
	if again := b.Seal("acme", "OPENAI_API_KEY", value); bytes.Equal(again, sealed) {
		t.Errorf("two seals of one value are equal: the nonce is not random")
	}
	// The same key file opens it after a restart.
	b2, err := secrets.LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b2.Open("acme", "OPENAI_API_KEY", sealed); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open after reload = %q, %v", got, err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	other, _ := secrets.LoadOrCreate(filepath.Join(dir, "other.key"))
	for name, open := range map[string]func() ([]byte, error){
		"another tenant": func() ([]byte, error) { return b.Open("evil", "OPENAI_API_KEY", sealed) },
		"another name":   func() ([]byte, error) { return b.Open("acme", "OTHER", sealed) },
		"altered":        func() ([]byte, error) { return b.Open("acme", "OPENAI_API_KEY", tampered) },
		"another key":    func() ([]byte, error) { return other.Open("acme", "OPENAI_API_KEY", sealed) },
		"truncated":      func() ([]byte, error) { return b.Open("acme", "OPENAI_API_KEY", sealed[:5]) },
	} {
		if v, err := open(); !errors.Is(err, secrets.ErrSealed) || v != nil {
			t.Errorf("Open (%s) = %q, %v; want ErrSealed", name, v, err)
		}
	}
}

func TestKeyFileChecks(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose.key")
	os.WriteFile(loose, bytes.Repeat([]byte{1}, secrets.KeySize), 0o644)
	if _, err := secrets.LoadOrCreate(loose); err == nil {
		t.Errorf("LoadOrCreate(a 0644 key file) = nil error")
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("short"), 0o600)
	if _, err := secrets.LoadOrCreate(short); err == nil {
		t.Errorf("LoadOrCreate(a 5-byte key file) = nil error")
	}
}
