package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// checkpointSelect reads checkpoints in the order scanCheckpoint expects. The
// sandbox's name comes from sandboxes, not from the checkpoint row, so that
// a renamed sandbox's checkpoints carry its new name.
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

// Create inserts c; c.Sandbox is ignored, since reads take the
// name from the sandbox. It returns store.ErrExists if c.ID is taken,
// store.ErrNotFound if no sandbox has c.SandboxID, and an error if c.ID is
// empty.
func (v checkpoints) Create(ctx context.Context, c sandbox.Checkpoint) error {
	if c.ID == "" {
		return fmt.Errorf("sqlite: create checkpoint: checkpoint id must not be empty")
	}
	created, err := formatTime(c.CreatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: create checkpoint %q: created_at: %w", c.ID, err)
	}
	memory := 0
	if c.Memory {
		memory = 1
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO checkpoints (id, sandbox_id, label, parent, created_at, size_bytes, memory)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.SandboxID, c.Label, c.Parent, created, c.SizeBytes, memory)
	if isForeignKey(err) {
		return fmt.Errorf("sqlite: create checkpoint %q: sandbox %q: %w", c.ID, c.SandboxID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: create checkpoint %q: %w", c.ID, writeErr(err))
	}
	return nil
}

// Get returns checkpoint id of the sandbox with sandboxID, or
// store.ErrNotFound if there is none, including when id belongs to another
// sandbox.
func (v checkpoints) Get(ctx context.Context, sandboxID, id string) (sandbox.Checkpoint, error) {
	row := v.db.r.QueryRowContext(ctx,
		checkpointSelect+` WHERE c.sandbox_id = ? AND c.id = ?`, sandboxID, id)
	c, err := scanCheckpoint(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Checkpoint{}, fmt.Errorf("sqlite: checkpoint %q of sandbox %q: %w", id, sandboxID, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Checkpoint{}, fmt.Errorf("sqlite: get checkpoint %q: %w", id, err)
	}
	return c, nil
}

// SetMemory sets the memory flag of checkpoint id, or returns
// store.ErrNotFound.
func (v checkpoints) SetMemory(ctx context.Context, id string, memory bool) error {
	flag := 0
	if memory {
		flag = 1
	}
	res, err := v.db.w.ExecContext(ctx, `UPDATE checkpoints SET memory = ? WHERE id = ?`, flag, id)
	if err != nil {
		return fmt.Errorf("sqlite: set memory of checkpoint %q: %w", id, writeErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: set memory of checkpoint %q: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("sqlite: checkpoint %q: %w", id, store.ErrNotFound)
	}
	return nil
}

// List returns the checkpoints of the sandbox with sandboxID,
// oldest CreatedAt first and insertion order among equals. None, or no such
// sandbox, is an empty slice and no error.
func (v checkpoints) List(ctx context.Context, sandboxID string) ([]sandbox.Checkpoint, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list checkpoints of %q", sandboxID), scanCheckpoint,
		checkpointSelect+` WHERE c.sandbox_id = ? ORDER BY c.created_at, c.rowid`, sandboxID)
}

// Delete removes the checkpoint with that id, or returns
// store.ErrNotFound. Checkpoints that name it as Parent keep the name.
func (v checkpoints) Delete(ctx context.Context, id string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM checkpoints WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("sqlite: delete checkpoint %q: %w", id, err)
	}
	return affectedOne(res, "delete checkpoint", id)
}

// scanCheckpoint reads one row selected with checkpointSelect.
func scanCheckpoint(s scanner) (sandbox.Checkpoint, error) {
	var (
		c       sandbox.Checkpoint
		created string
		memory  int64
	)
	if err := s.Scan(&c.ID, &c.SandboxID, &c.Sandbox, &c.Label, &c.Parent, &created,
		&c.SizeBytes, &memory); err != nil {
		return sandbox.Checkpoint{}, err
	}
	var err error
	if c.CreatedAt, err = parseTime(created); err != nil {
		return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %q created_at: %w", c.ID, err)
	}
	c.Memory = memory != 0
	return c, nil
}
