package rootfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/hearth/hearth/layers"
)

// Import copies the root filesystem at rootfsDir into store as the
// committed snapshot name, which sandboxes are then prepared from.
//
// It prepares an empty active snapshot (key "import-" and a hash of name),
// copies rootfsDir into it with cp -a --reflink=auto (owners, modes,
// timestamps, symlinks, hard links, device nodes and xattrs where the
// filesystems allow; reflinks when both sides are on one btrfs), and
// commits it as name. Import is idempotent: if name exists it returns nil
// at once. A failed or cancelled import removes its snapshot, so it leaves
// nothing behind; one that was killed leaves the active snapshot, which
// the next Import of name removes. Imports of one name must not run
// concurrently.
func Import(ctx context.Context, store layers.Store, name, rootfsDir string) error {
	if err := layers.ValidateKey(name); err != nil {
		return fmt.Errorf("image: import: %w", err)
	}
	key := importKey(name)
	// A killed import's leftover; nothing if there is none.
	if err := store.Remove(ctx, key); err != nil && !errors.Is(err, layers.ErrNotFound) {
		return fmt.Errorf("image: import %s: removing a leftover: %w", name, err)
	}
	if _, err := store.Stat(ctx, name); err == nil {
		return nil
	} else if !errors.Is(err, layers.ErrNotFound) {
		return fmt.Errorf("image: import %s: %w", name, err)
	}
	fi, err := os.Stat(rootfsDir)
	if err != nil {
		return fmt.Errorf("image: import %s: %w", name, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("image: import %s: %s is not a directory", name, rootfsDir)
	}
	path, err := store.Prepare(ctx, key, "")
	if err != nil {
		return fmt.Errorf("image: import %s: %w", name, err)
	}
	err = copyTree(ctx, rootfsDir, path)
	if err == nil {
		err = store.Commit(ctx, name, key)
	}
	if err != nil {
		if rerr := store.Remove(context.WithoutCancel(ctx), key); rerr != nil && !errors.Is(rerr, layers.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", key, rerr))
		}
		if errors.Is(err, layers.ErrExists) {
			return nil // name appeared meanwhile
		}
		return fmt.Errorf("image: import %s: %w", name, err)
	}
	return nil
}

// importKey is the key of name's import while it runs: fixed, so that the
// next Import finds a killed one's leftover, and valid whatever name's length.
func importKey(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "import-" + hex.EncodeToString(sum[:8])
}

// copyTree copies the contents of src, and src's own owner, mode and
// times, onto the existing directory dst.
func copyTree(ctx context.Context, src, dst string) error {
	cmd := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src+"/.", dst+"/")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cp -a %s: %w: %s", src, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
