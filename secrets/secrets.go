// Package secrets seals what the daemon keeps at rest that must not be
// read from its disk: tenants' secret values, and the keys of sandboxes'
// memory images (a Box: AES-256-GCM under a key kept in a file of the
// daemon's data dir, 0600, 32 random bytes, made at the first start), and
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
)

// KeySize is the size of the key file's content: an AES-256 key.
const KeySize = 32

// Box seals and opens values. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// LoadOrCreate returns the Box of the key file at path, creating the file
// with a new random key (mode 0600) when it does not exist. A key file of
// another size, or readable by anyone but its owner, is refused.
func LoadOrCreate(path string) (*Box, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, KeySize)
		rand.Read(key)
		if err := writeKey(path, key); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets: key file %s is readable by others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets: key file %s holds %d bytes, want %d", path, len(key), KeySize)
	}
	return New(key)
}

// writeKey writes key to path atomically and durably, mode 0600.
func writeKey(path string, key []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
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
