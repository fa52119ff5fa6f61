// Package secrets seals what the daemon keeps at rest that must not be
// read from its disk: tenants' secret values, and the keys of sandboxes'
// memory images (a Box: AES-256-GCM under a key kept in a file, 0600, 32
// random bytes: the daemon's data dir's, made at its first start, or one
// made by CreateKey and given to every daemon of a shared store), and
// the memory images themselves (a stream: chunked AES-256-GCM under a
// random key of each image's own, which a Box seals; see stream.go). A
// sealed value is bound to its tenant and name, so a row copied to another
// tenant or name does not open. The key never leaves the file and the
// daemon's memory; losing it loses the secrets, which are then set again,
// and the memory of checkpoints, which then restore their files only.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeySize is the size of the key file's content: an AES-256 key.
const KeySize = 32

// Box seals and opens values. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// LoadOrCreate returns the Box of the key file at path, creating the file
// with a new random key (see CreateKey) when it does not exist. A key file
// of another size, or readable by anyone but its owner, is refused (see
// Load).
func LoadOrCreate(path string) (*Box, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		// Another process making it at once is no failure: both load it.
		if err := CreateKey(path, false); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return Load(path)
}

// ErrMalformedKey is returned by Load for a key file that does not hold a
// key: its size is not KeySize.
var ErrMalformedKey = errors.New("secrets: not a key file")

// Load returns the Box of the key file at path, which it never creates: a
// deployment whose daemons share one store must give them all the same
// key, made once by CreateKey. A missing file is an error wrapping
// fs.ErrNotExist; one of another size than KeySize wraps ErrMalformedKey;
// one readable by anyone but its owner is refused too, as the key is as
// good as every secret it seals. Each error names the file.
func Load(path string) (*Box, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: read the key file: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets: key file %s is readable by others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: %s holds %d bytes, want %d", ErrMalformedKey, path, len(key), KeySize)
	}
	return New(key)
}

// CreateKey writes a new random key to path, mode 0600, atomically: the
// key goes to a temporary file in path's directory, synced, then takes
// path's name, so that a reader sees no key or all of it. An existing path
// is replaced when replace is true (what the old key sealed no longer
// opens), else left alone and the error wraps fs.ErrExist: the new file is
// hard-linked to path, which fails if path exists, even when another
// process makes it at the same moment.
func CreateKey(path string, replace bool) error {
	key := make([]byte, KeySize)
	rand.Read(key)
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*") // mode 0600
	if err != nil {
		return fmt.Errorf("secrets: create the key file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a rename or a link: already gone, or a second name
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("secrets: write the key file: %w", err)
	}
	if replace {
		err = os.Rename(tmp, path)
	} else {
		err = os.Link(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("secrets: create the key file: %w", err)
	}
	// The new name is durable once the directory is.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// New returns a Box over a KeySize-byte key.
func New(key []byte) (*Box, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return &Box{aead: aead}, nil
}

// binding is the additional data a sealed value is bound to.
func binding(tenant, name string) []byte { return []byte(tenant + "\x00" + name) }

// Seal returns value sealed for tenant's secret name: a random nonce and
// the ciphertext with its tag.
func (b *Box) Seal(tenant, name string, value []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize(), b.aead.NonceSize()+len(value)+b.aead.Overhead())
	rand.Read(nonce)
	return b.aead.Seal(nonce, nonce, value, binding(tenant, name))
}

// ErrSealed is returned by Open for a value that does not open: sealed
// under another key, for another tenant or name, or altered.
var ErrSealed = errors.New("secrets: the sealed value does not open with this key, tenant and name")

// Open returns the value Seal sealed for tenant's secret name.
func (b *Box) Open(tenant, name string, sealed []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n+b.aead.Overhead() {
		return nil, ErrSealed
	}
	v, err := b.aead.Open(nil, sealed[:n], sealed[n:], binding(tenant, name))
	if err != nil {
		return nil, ErrSealed
	}
	return v, nil
}
