package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// imageColumns are selected in this order; scanImage follows it.
const imageColumns = `tenant, name, digest, source, ref, public, current, config, size_bytes, layers, created_at`

// imageLockClass is the first key of the transaction-level advisory locks
// (the two-int key space) that serialize the writes to one image name;
// the second is a hash of the tenant and the name. Two names whose hashes
// collide only wait for each other. "imag" in ASCII.
const imageLockClass int32 = 0x696d6167

// lockImageName is the statement that takes the lock of an image name
// ($1 imageLockClass, $2 tenant, $3 name) until the transaction ends.
const lockImageName = `SELECT pg_advisory_xact_lock($1::integer, hashtext($2::text || '/' || $3::text))`

// images is the store.Images view of db: the images table.
type images struct{ db *DB }

var _ store.Images = images{}

// Images returns the view of the images table.
func (db *DB) Images() store.Images { return images{db} }

// Put inserts img as the current version of its name, or makes the stored
// version of its digest current again with img.Public, in one transaction
// with clearing the name's other current version. The partial unique
// index images_current refuses a second current version of a name, so the
// clearing comes first; and the name's lock is taken before either, so
// that two Puts of one name never both clear before either inserts (under
// READ COMMITTED, the second's UPDATE would not see the first's new row,
// and its INSERT would break the index).
func (v images) Put(ctx context.Context, img sandbox.Image) error {
	args, err := imageArgs(img)
	if err != nil {
		return fmt.Errorf("postgres: put image %q of %q: %w", img.Name, img.Tenant, err)
	}
	err = v.db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockImageName, imageLockClass, img.Tenant, img.Name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx,
			`UPDATE images SET current = false WHERE tenant = $1 AND name = $2 AND digest <> $3 AND current`,
			img.Tenant, img.Name, img.Digest); err != nil {
			return err
		}
		_, err := tx.Exec(ctx,
			`INSERT INTO images (`+imageColumns+`) VALUES ($1, $2, $3, $4, $5, $6, true, $7, $8, $9, $10)
			 ON CONFLICT (tenant, name, digest) DO UPDATE SET current = true, public = excluded.public`,
			args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: put image %q@%s of %q: %w", img.Name, img.Digest, img.Tenant, writeErr(err))
	}
	return nil
}

// imageArgs checks img and binds it in imageColumns order, current left
// out (Put always sets it).
func imageArgs(img sandbox.Image) ([]any, error) {
	if img.Tenant == "" || img.Name == "" || img.Digest == "" {
		return nil, errors.New("tenant, name and digest must not be empty")
	}
	if len(img.Layers) == 0 || slices.Contains(img.Layers, "") {
		return nil, fmt.Errorf("layers %q: want at least one, none empty", img.Layers)
	}
	if err := checkTimes(img.CreatedAt); err != nil {
		return nil, fmt.Errorf("created_at: %w", err)
	}
	config, err := json.Marshal(img.Config)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return []any{img.Tenant, img.Name, img.Digest, img.Source, img.Ref, img.Public,
		string(config), img.Size, img.Layers, img.CreatedAt}, nil
}

// Get returns the current version of tenant's image name, or
// store.ErrNotFound.
func (v images) Get(ctx context.Context, tenant, name string) (sandbox.Image, error) {
	return getOne(ctx, v.db, fmt.Sprintf("image %q of %q", name, tenant), scanImage,
		`SELECT `+imageColumns+` FROM images WHERE tenant = $1 AND name = $2 AND current`, tenant, name)
}

// Version returns the version digest of tenant's image name, or
// store.ErrNotFound.
func (v images) Version(ctx context.Context, tenant, name, digest string) (sandbox.Image, error) {
	return getOne(ctx, v.db, fmt.Sprintf("image %q@%s of %q", name, digest, tenant), scanImage,
		`SELECT `+imageColumns+` FROM images WHERE tenant = $1 AND name = $2 AND digest = $3`, tenant, name, digest)
}

// List returns every version of tenant's images, by name, then oldest
// first, then insertion order.
func (v images) List(ctx context.Context, tenant string) ([]sandbox.Image, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list images of %q", tenant), scanImage,
		`SELECT `+imageColumns+` FROM images WHERE tenant = $1 ORDER BY name, created_at, seq`, tenant)
}

// ListPublic returns the current version of every public image, by tenant
// and name.
func (v images) ListPublic(ctx context.Context) ([]sandbox.Image, error) {
	return queryAll(ctx, v.db, "list public images", scanImage,
		`SELECT `+imageColumns+` FROM images WHERE public AND current ORDER BY tenant, name`)
}

// All returns every version of every tenant's images.
func (v images) All(ctx context.Context) ([]sandbox.Image, error) {
	return queryAll(ctx, v.db, "list all images", scanImage,
		`SELECT `+imageColumns+` FROM images ORDER BY tenant, name, created_at, seq`)
}

// SetPublic sets public on every version of tenant's image name, or
// returns store.ErrNotFound when it has none. It takes the name's lock, as
// Put does, so that the two never wait on each other's rows in opposite
// orders.
func (v images) SetPublic(ctx context.Context, tenant, name string, public bool) error {
	var n int64
	err := v.db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockImageName, imageLockClass, tenant, name); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE images SET public = $1 WHERE tenant = $2 AND name = $3`, public, tenant, name)
		n = tag.RowsAffected()
		return err
	})
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: set public image %q of %q: %w", name, tenant, err)
	}
	return nil
}

// Delete removes one version, or returns store.ErrNotFound.
func (v images) Delete(ctx context.Context, tenant, name, digest string) error {
	return v.db.execOne(ctx, "delete image", fmt.Sprintf("%q@%s of %q", name, digest, tenant),
		`DELETE FROM images WHERE tenant = $1 AND name = $2 AND digest = $3`, tenant, name, digest)
}

// ImageBytes sums size_bytes over tenant's versions.
func (v images) ImageBytes(ctx context.Context, tenant string) (int64, error) {
	var n int64
	if err := v.db.pool.QueryRow(ctx, `SELECT coalesce(sum(size_bytes), 0)::bigint FROM images WHERE tenant = $1`, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: image bytes of %q: %w", tenant, err)
	}
	return n, nil
}

// scanImage reads one row of imageColumns.
func scanImage(row pgx.Row) (sandbox.Image, error) {
	var (
		img    sandbox.Image
		config []byte
	)
	if err := row.Scan(&img.Tenant, &img.Name, &img.Digest, &img.Source, &img.Ref, &img.Public, &img.Current,
		&config, &img.Size, &img.Layers, &img.CreatedAt); err != nil {
		return sandbox.Image{}, err
	}
	if err := json.Unmarshal(config, &img.Config); err != nil {
		return sandbox.Image{}, fmt.Errorf("image %q@%s config: %w", img.Name, img.Digest, err)
	}
	return img, nil
}
