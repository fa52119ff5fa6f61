package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// auditColumns are selected in this order; scanAudit follows it. INSERT
// binds every column but id, which SQLite assigns.
const auditColumns = `id, at, door, verb, tenant, agent, role, token_id, sandbox, code, status, duration_ms`

// auditLog is the store.AuditLog view of db: the audit table.
type auditLog struct{ db *DB }

var _ store.AuditLog = auditLog{}

// Audit returns the view of the audit table.
func (db *DB) Audit() store.AuditLog { return auditLog{db} }

// Append appends events in one transaction, each getting the next id
// (AUTOINCREMENT: never reused). The ids events carry are ignored. An event
// with a zero At fails the whole call.
func (v auditLog) Append(ctx context.Context, events []sandbox.AuditEvent) (err error) {
	if len(events) == 0 {
		return nil
	}
	ats := make([]string, len(events))
	for i, e := range events {
		if e.At.IsZero() {
			return fmt.Errorf("sqlite: append audit: event %d (%s) has a zero time", i, e.Verb)
		}
		if ats[i], err = formatTime(e.At); err != nil {
			return fmt.Errorf("sqlite: append audit: event %d (%s): %w", i, e.Verb, err)
		}
	}
	tx, err := v.db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: append audit: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO audit
		(at, door, verb, tenant, agent, role, token_id, sandbox, code, status, duration_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("sqlite: append audit: %w", err)
	}
	defer stmt.Close()
	for i, e := range events {
		if _, err = stmt.ExecContext(ctx, ats[i], e.Door, e.Verb, e.Tenant, e.Agent, string(e.Role),
			e.TokenID, e.Sandbox, string(e.Code), e.Status, e.DurationMs); err != nil {
			return fmt.Errorf("sqlite: append audit: %w", err)
		}
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: append audit: commit: %w", err)
	}
	return nil
}

// List returns the events matching f, oldest first (id order among
// equal times); with a positive f.Limit, the newest f.Limit of them.
func (v auditLog) List(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	// As in sandboxes.List, conditions are added only when set, so that
	// SQLite can use the (at) and (tenant, agent, at) indexes.
	var where []string
	var args []any
	if !f.Since.IsZero() {
		since, err := formatTime(f.Since)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list audit: since: %w", err)
		}
		where = append(where, "at >= ?")
		args = append(args, since)
	}
	if f.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, f.Tenant)
	}
	if f.Agent != "" {
		where = append(where, "agent = ?")
		args = append(args, f.Agent)
	}
	if f.SandboxPrefix != "" {
		// The sandbox less OwnPrefix when it starts with it (substr, not
		// LIKE, whose '_' and '%' would be wildcards) starts with
		// SandboxPrefix.
		where = append(where, `substr(CASE WHEN substr(sandbox, 1, length(?)) = ?
			THEN substr(sandbox, length(?) + 1) ELSE sandbox END, 1, length(?)) = ?`)
		args = append(args, f.OwnPrefix, f.OwnPrefix, f.OwnPrefix, f.SandboxPrefix, f.SandboxPrefix)
	}
	if f.After > 0 {
		where = append(where, "id > ?")
		args = append(args, f.After)
	}
	if f.OnName != "" {
		where = append(where, "(tenant = ? AND sandbox = ? OR sandbox = ?)")
		args = append(args, f.OnTenant, f.OnName, sandbox.Ref(f.OnTenant, f.OnName))
	}
	q := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	if f.Limit > 0 {
		// The newest Limit, turned back to oldest first.
		q = `SELECT * FROM (` + q + ` ORDER BY at DESC, id DESC LIMIT ?) ORDER BY at, id`
		args = append(args, f.Limit)
	} else {
		q += ` ORDER BY at, id`
	}
	return queryAll(ctx, v.db, "list audit", scanAudit, q, args...)
}

// DeleteBefore deletes the events whose At is before t and returns
// how many went.
func (v auditLog) DeleteBefore(ctx context.Context, t time.Time) (int64, error) {
	before, err := formatTime(t)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete audit: %w", err)
	}
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM audit WHERE at < ?`, before)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete audit: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete audit: %w", err)
	}
	return n, nil
}

// scanAudit reads one row selected with auditColumns.
func scanAudit(s scanner) (sandbox.AuditEvent, error) {
	var (
		e              sandbox.AuditEvent
		at, role, code string
	)
	if err := s.Scan(&e.ID, &at, &e.Door, &e.Verb, &e.Tenant, &e.Agent, &role, &e.TokenID,
		&e.Sandbox, &code, &e.Status, &e.DurationMs); err != nil {
		return sandbox.AuditEvent{}, err
	}
	e.Role, e.Code = sandbox.Role(role), sandbox.Code(code)
	var err error
	if e.At, err = parseTime(at); err != nil {
		return sandbox.AuditEvent{}, fmt.Errorf("audit event %d at: %w", e.ID, err)
	}
	return e, nil
}
