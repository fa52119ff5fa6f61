package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// checkpointSelect reads checkpoints in the order scanCheckpoint expects.
// The sandbox's name comes from sandboxes, not from the checkpoint row, so
// that a renamed sandbox's checkpoints carry its new name.
const checkpointSelect = `SELECT c.id, c.sandbox_id, s.name, c.label, c.parent, c.created_at,
	c.size_bytes, c.memory
	FROM checkpoints AS c JOIN sandboxes AS s ON s.id = c.sandbox_id`

// checkpoints is the store.Checkpoints view of db: the checkpoints table,
// read joined with sandboxes.
type checkpoints struct{ db *DB }

var _ store.Checkpoints = checkpoints{}

// Checkpoints returns the view of the checkpoints table, read joined with
// sandboxes.
func (db *DB) Checkpoints() store.Checkpoints { return checkpoints{db} }

// Create inserts c; c.Sandbox is ignored, since reads take the name from
// the sandbox. It returns store.ErrExists if c.ID is taken,
// store.ErrNotFound if no sandbox has c.SandboxID, and an error if c.ID is
// empty.
func (v checkpoints) Create(ctx context.Context, c sandbox.Checkpoint) error {
	if c.ID == "" {
		return errors.New("postgres: create checkpoint: checkpoint id must not be empty")
	}
	if err := checkTimes(c.CreatedAt); err != nil {
		return fmt.Errorf("postgres: create checkpoint %q: created_at: %w", c.ID, err)
	}
	_, err := v.db.exec(ctx,
		`INSERT INTO checkpoints (id, sandbox_id, label, parent, created_at, size_bytes, memory)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		c.ID, c.SandboxID, c.Label, c.Parent, c.CreatedAt, c.SizeBytes, c.Memory)
	if isForeignKey(err) {
		return fmt.Errorf("postgres: create checkpoint %q: sandbox %q: %w", c.ID, c.SandboxID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("postgres: create checkpoint %q: %w", c.ID, writeErr(err))
	}
	return nil
}

// Get returns checkpoint id of the sandbox with sandboxID, or
// store.ErrNotFound if there is none, including when id belongs to another
// sandbox.
func (v checkpoints) Get(ctx context.Context, sandboxID, id string) (sandbox.Checkpoint, error) {
	return getOne(ctx, v.db, fmt.Sprintf("checkpoint %q of sandbox %q", id, sandboxID), scanCheckpoint,
		checkpointSelect+` WHERE c.sandbox_id = $1 AND c.id = $2`, sandboxID, id)
}

// SetMemory sets the memory flag of checkpoint id, or returns
// store.ErrNotFound.
func (v checkpoints) SetMemory(ctx context.Context, id string, memory bool) error {
	return v.db.execOne(ctx, "set memory of checkpoint", strconv.Quote(id),
		`UPDATE checkpoints SET memory = $1 WHERE id = $2`, memory, id)
}

// List returns the checkpoints of the sandbox with sandboxID, oldest
// CreatedAt first and insertion order among equals. None, or no such
// sandbox, is an empty slice and no error.
func (v checkpoints) List(ctx context.Context, sandboxID string) ([]sandbox.Checkpoint, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list checkpoints of %q", sandboxID), scanCheckpoint,
		checkpointSelect+` WHERE c.sandbox_id = $1 ORDER BY c.created_at, c.seq`, sandboxID)
}

// Delete removes the checkpoint with that id, or returns
// store.ErrNotFound. Checkpoints that name it as Parent keep the name.
func (v checkpoints) Delete(ctx context.Context, id string) error {
	return v.db.execOne(ctx, "delete checkpoint", strconv.Quote(id), `DELETE FROM checkpoints WHERE id = $1`, id)
}

// scanCheckpoint reads one row selected with checkpointSelect.
func scanCheckpoint(row pgx.Row) (sandbox.Checkpoint, error) {
	var c sandbox.Checkpoint
	err := row.Scan(&c.ID, &c.SandboxID, &c.Sandbox, &c.Label, &c.Parent, &c.CreatedAt, &c.SizeBytes, &c.Memory)
	return c, err
}
