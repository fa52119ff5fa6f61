package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// auditColumns are selected in this order; scanAudit follows it. INSERT
// binds every column but id, which the identity assigns.
const auditColumns = `id, at, door, verb, tenant, agent, role, token_id, sandbox, code, status, duration_ms`

// auditLog is the store.AuditLog view of db: the audit table.
type auditLog struct{ db *DB }

var _ store.AuditLog = auditLog{}

// Audit returns the view of the audit table.
func (db *DB) Audit() store.AuditLog { return auditLog{db} }

// Append appends events in one transaction, each getting the next id
// (an identity: never reused), in the order of events: the inserts go in
// one batch, which runs them in order. The ids events carry are ignored.
// An event with a zero At fails the whole call.
func (v auditLog) Append(ctx context.Context, events []sandbox.AuditEvent) error {
	if len(events) == 0 {
		return nil
	}
	for i, e := range events {
		if e.At.IsZero() {
			return fmt.Errorf("postgres: append audit: event %d (%s) has a zero time", i, e.Verb)
		}
		if err := checkTimes(e.At); err != nil {
			return fmt.Errorf("postgres: append audit: event %d (%s): %w", i, e.Verb, err)
		}
	}
	err := v.db.inTx(ctx, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, e := range events {
			b.Queue(`INSERT INTO audit (at, door, verb, tenant, agent, role, token_id, sandbox, code, status, duration_ms)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
				e.At, e.Door, e.Verb, e.Tenant, e.Agent, string(e.Role), e.TokenID, e.Sandbox, string(e.Code), e.Status, e.DurationMs)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: append audit: %w", err)
	}
	return nil
}

// List returns the events matching f, oldest first (id order among equal
// times); with a positive f.Limit, the newest f.Limit of them.
func (v auditLog) List(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	// As in sandboxes.List, conditions are added only when set, so that
	// the planner can use the (at) and (tenant, agent, at) indexes.
	var where []string
	var args []any
	arg := func(a any) string { args = append(args, a); return fmt.Sprintf("$%d", len(args)) }
	if !f.Since.IsZero() {
		if err := checkTimes(f.Since); err != nil {
			return nil, fmt.Errorf("postgres: list audit: since: %w", err)
		}
		where = append(where, "at >= "+arg(f.Since))
	}
	if f.Tenant != "" {
		where = append(where, "tenant = "+arg(f.Tenant))
	}
	if f.Agent != "" {
		where = append(where, "agent = "+arg(f.Agent))
	}
	if f.SandboxPrefix != "" {
		// The sandbox less OwnPrefix when it starts with it (starts_with,
		// not LIKE, whose '_' and '%' would be wildcards) starts with
		// SandboxPrefix.
		own := arg(f.OwnPrefix)
		where = append(where, fmt.Sprintf(`starts_with(CASE WHEN starts_with(sandbox, %s)
			THEN substr(sandbox, length(%s) + 1) ELSE sandbox END, %s)`, own, own, arg(f.SandboxPrefix)))
	}
	if f.After > 0 {
		where = append(where, "id > "+arg(f.After))
	}
	if f.OnName != "" {
		where = append(where, fmt.Sprintf("(tenant = %s AND sandbox = %s OR sandbox = %s)", arg(f.OnTenant), arg(f.OnName), arg(sandbox.Ref(f.OnTenant, f.OnName))))
	}
	q := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	if f.Limit > 0 {
		// The newest Limit, turned back to oldest first.
		q = `SELECT * FROM (` + q + ` ORDER BY at DESC, id DESC LIMIT ` + arg(f.Limit) + `) AS newest ORDER BY at, id`
	} else {
		q += ` ORDER BY at, id`
	}
	return queryAll(ctx, v.db, "list audit", scanAudit, q, args...)
}

// DeleteBefore deletes the events whose At is before t and returns how
// many went.
func (v auditLog) DeleteBefore(ctx context.Context, t time.Time) (int64, error) {
	if err := checkTimes(t); err != nil {
		return 0, fmt.Errorf("postgres: delete audit: %w", err)
	}
	n, err := v.db.exec(ctx, `DELETE FROM audit WHERE at < $1`, t)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete audit: %w", err)
	}
	return n, nil
}

// scanAudit reads one row selected with auditColumns.
func scanAudit(row pgx.Row) (sandbox.AuditEvent, error) {
	var (
		e          sandbox.AuditEvent
		role, code string
	)
	if err := row.Scan(&e.ID, &e.At, &e.Door, &e.Verb, &e.Tenant, &e.Agent, &role, &e.TokenID,
		&e.Sandbox, &code, &e.Status, &e.DurationMs); err != nil {
		return sandbox.AuditEvent{}, err
	}
	e.Role, e.Code = sandbox.Role(role), sandbox.Code(code)
	return e, nil
}
