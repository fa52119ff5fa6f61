package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// imageColumns are selected in this order; scanImage follows it.
const imageColumns = `tenant, name, digest, source, ref, public, current, config, size_bytes, layers, created_at`

// images is the store.Images view of db: the images table.
type images struct{ db *DB }

var _ store.Images = images{}

// Images returns the view of the images table.
func (db *DB) Images() store.Images { return images{db} }

// Put inserts img as the current version of its name, or makes the
// stored version of its digest current again with img.Public, in one
// transaction with clearing the name's other current version. The partial
// unique index images_current refuses a second current version of a
// name, so the clearing comes first.
func (v images) Put(ctx context.Context, img sandbox.Image) (err error) {
	args, err := imageArgs(img)
	if err != nil {
		return fmt.Errorf("sqlite: put image %q of %q: %w", img.Name, img.Tenant, err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("sqlite: put image %q@%s of %q: %w", img.Name, img.Digest, img.Tenant, writeErr(err))
		}
	}()
	tx, err := v.db.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx,
		`UPDATE images SET current = 0 WHERE tenant = ? AND name = ? AND digest <> ? AND current = 1`,
		img.Tenant, img.Name, img.Digest); err != nil {
		return err
	}
	if _, err = tx.ExecContext(ctx,
		`INSERT INTO images (`+imageColumns+`) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)
		 ON CONFLICT (tenant, name, digest) DO UPDATE SET current = 1, public = excluded.public`,
		args...); err != nil {
		return err
	}
	return tx.Commit()
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
	created, err := formatTime(img.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("created_at: %w", err)
	}
	config, err := json.Marshal(img.Config)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	layers, err := json.Marshal(img.Layers)
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	return []any{img.Tenant, img.Name, img.Digest, img.Source, img.Ref, img.Public,
		string(config), img.Size, string(layers), created}, nil
}

// Get returns the current version of tenant's image name, or
// store.ErrNotFound.
func (v images) Get(ctx context.Context, tenant, name string) (sandbox.Image, error) {
	row := v.db.r.QueryRowContext(ctx,
		`SELECT `+imageColumns+` FROM images WHERE tenant = ? AND name = ? AND current = 1`, tenant, name)
	img, err := scanImage(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Image{}, fmt.Errorf("sqlite: image %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Image{}, fmt.Errorf("sqlite: get image %q of %q: %w", name, tenant, err)
	}
	return img, nil
}

// Version returns the version digest of tenant's image name, or
// store.ErrNotFound.
func (v images) Version(ctx context.Context, tenant, name, digest string) (sandbox.Image, error) {
	row := v.db.r.QueryRowContext(ctx,
		`SELECT `+imageColumns+` FROM images WHERE tenant = ? AND name = ? AND digest = ?`, tenant, name, digest)
	img, err := scanImage(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Image{}, fmt.Errorf("sqlite: image %q@%s of %q: %w", name, digest, tenant, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Image{}, fmt.Errorf("sqlite: get image %q@%s of %q: %w", name, digest, tenant, err)
	}
	return img, nil
}

// List returns every version of tenant's images, by name, then oldest
// first, then insertion order.
func (v images) List(ctx context.Context, tenant string) ([]sandbox.Image, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list images of %q", tenant), scanImage,
		`SELECT `+imageColumns+` FROM images WHERE tenant = ? ORDER BY name, created_at, rowid`, tenant)
}

// ListPublic returns the current version of every public image, by
// tenant and name.
func (v images) ListPublic(ctx context.Context) ([]sandbox.Image, error) {
	return queryAll(ctx, v.db, "list public images", scanImage,
		`SELECT `+imageColumns+` FROM images WHERE public = 1 AND current = 1 ORDER BY tenant, name`)
}

// All returns every version of every tenant's images.
func (v images) All(ctx context.Context) ([]sandbox.Image, error) {
	return queryAll(ctx, v.db, "list all images", scanImage,
		`SELECT `+imageColumns+` FROM images ORDER BY tenant, name, created_at, rowid`)
}

// SetPublic sets public on every version of tenant's image name, or
// returns store.ErrNotFound when it has none.
func (v images) SetPublic(ctx context.Context, tenant, name string, public bool) error {
	res, err := v.db.w.ExecContext(ctx, `UPDATE images SET public = ? WHERE tenant = ? AND name = ?`, public, tenant, name)
	if err != nil {
		return fmt.Errorf("sqlite: set public image %q of %q: %w", name, tenant, writeErr(err))
	}
	return affectedOne(res, "set public image", tenant+"/"+name)
}

// Delete removes one version, or returns store.ErrNotFound.
func (v images) Delete(ctx context.Context, tenant, name, digest string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM images WHERE tenant = ? AND name = ? AND digest = ?`, tenant, name, digest)
	if err != nil {
		return fmt.Errorf("sqlite: delete image %q@%s of %q: %w", name, digest, tenant, writeErr(err))
	}
	return affectedOne(res, "delete image", tenant+"/"+name+"@"+digest)
}

// ImageBytes sums size_bytes over tenant's versions.
func (v images) ImageBytes(ctx context.Context, tenant string) (int64, error) {
	var n int64
	if err := v.db.r.QueryRowContext(ctx, `SELECT coalesce(sum(size_bytes), 0) FROM images WHERE tenant = ?`, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: image bytes of %q: %w", tenant, err)
	}
	return n, nil
}

// scanImage reads one row of imageColumns.
func scanImage(s scanner) (sandbox.Image, error) {
	var (
		img                     sandbox.Image
		config, layers, created string
	)
	if err := s.Scan(&img.Tenant, &img.Name, &img.Digest, &img.Source, &img.Ref, &img.Public, &img.Current,
		&config, &img.Size, &layers, &created); err != nil {
		return sandbox.Image{}, err
	}
	var err error
	if img.CreatedAt, err = parseTime(created); err != nil {
		return sandbox.Image{}, fmt.Errorf("image %q@%s created_at: %w", img.Name, img.Digest, err)
	}
	if err := json.Unmarshal([]byte(config), &img.Config); err != nil {
		return sandbox.Image{}, fmt.Errorf("image %q@%s config: %w", img.Name, img.Digest, err)
	}
	if err := json.Unmarshal([]byte(layers), &img.Layers); err != nil {
		return sandbox.Image{}, fmt.Errorf("image %q@%s layers: %w", img.Name, img.Digest, err)
	}
	return img, nil
}
