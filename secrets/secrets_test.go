package secrets_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// TestLoad: Load opens a key file CreateKey made, and never creates one: a
// missing file wraps fs.ErrNotExist, one of another size ErrMalformedKey,
// and each error names the file.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "deploy.key")
	if err := secrets.CreateKey(path, false); err != nil {
		t.Fatal(err)
	}
	b, err := secrets.Load(path)
	if err != nil {
		t.Fatalf("Load(a created key) = %v", err)
	}
	// Another daemon loading the same file opens what this one sealed.
	b2, err := secrets.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	sealed := b.Seal("acme", "TOKEN", []byte("v"))
	if got, err := b2.Open("acme", "TOKEN", sealed); err != nil || string(got) != "v" {
		t.Errorf("Open of another Load's seal = %q, %v; want v", got, err)
	}

	missing := filepath.Join(dir, "missing.key")
	if _, err := secrets.Load(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v; want fs.ErrNotExist naming the file", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Load(missing) the file exists (%v); Load must not create it", err)
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("short"), 0o600)
	if _, err := secrets.Load(short); !errors.Is(err, secrets.ErrMalformedKey) || !strings.Contains(err.Error(), short) {
		t.Errorf("Load(a 5-byte file) = %v; want ErrMalformedKey naming the file", err)
	}
}

// TestCreateKey: CreateKey writes KeySize random bytes, mode 0600, leaves
// no temporary file, refuses an existing file (wrapping fs.ErrExist, the
// file unchanged) unless told to replace it.
func TestCreateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "deploy.key")
	if err := secrets.CreateKey(path, false); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(path)
	if fi, serr := os.Stat(path); err != nil || serr != nil || fi.Mode().Perm() != 0o600 || len(first) != secrets.KeySize {
		t.Fatalf("key file = %v, %v, %d bytes; want mode 0600 and %d bytes", fi, err, len(first), secrets.KeySize)
	}
	if err := secrets.CreateKey(path, false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateKey(existing, false) = %v; want fs.ErrExist", err)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, first) {
		t.Errorf("CreateKey(existing, false) changed the file")
	}
	if err := secrets.CreateKey(path, true); err != nil {
		t.Fatalf("CreateKey(existing, true) = %v", err)
	}
	if again, _ := os.ReadFile(path); len(again) != secrets.KeySize || bytes.Equal(again, first) {
		t.Errorf("CreateKey(existing, true) left %d bytes, the old key: %v; want a new key", len(again), bytes.Equal(again, first))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d files, want the key file alone", len(ents))
	}
	if err := secrets.CreateKey(filepath.Join(dir, "no", "such", "dir.key"), false); err == nil {
		t.Errorf("CreateKey(in a missing directory) = nil error")
	}
}
