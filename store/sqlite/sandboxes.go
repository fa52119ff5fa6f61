package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// sandboxColumns are selected and bound in this order; sandboxArgs and
// scanSandbox follow it, and UPDATE refers to them as ?1…?28.
const sandboxColumns = `id, name, tenant, owner, image, size, runtime, status, reason,
	created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids, head, disk_bytes, labels,
	public_ports, network, net_bits_per_sec, net_conns, egress, image_digest, image_key, image_config, node`

// sandboxes is the store.Sandboxes view of db: the sandboxes table.
type sandboxes struct{ db *DB }

var _ store.Sandboxes = sandboxes{}

// Sandboxes returns the view of the sandboxes table.
func (db *DB) Sandboxes() store.Sandboxes { return sandboxes{db} }

// Create inserts sb. It returns store.ErrExists if sb.ID is taken
// or sb.Tenant has a sandbox called sb.Name, and an error if either is
// empty.
func (v sandboxes) Create(ctx context.Context, sb sandbox.Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("sqlite: create sandbox %q: %w", sb.Name, err)
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO sandboxes (`+sandboxColumns+`)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)`,
		args...)
	if err != nil {
		return fmt.Errorf("sqlite: create sandbox %q: %w", sb.Name, writeErr(err))
	}
	return nil
}

// Update replaces every field of the sandbox with sb.ID by sb's. It
// returns store.ErrNotFound if there is none, and store.ErrExists if
// sb.Tenant has another sandbox called sb.Name.
func (v sandboxes) Update(ctx context.Context, sb sandbox.Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("sqlite: update sandbox %q: %w", sb.ID, err)
	}
	res, err := v.db.w.ExecContext(ctx, updateSandbox+`WHERE id = ?1`, args...)
	if err != nil {
		return fmt.Errorf("sqlite: update sandbox %q: %w", sb.ID, writeErr(err))
	}
	return affectedOne(res, "update sandbox", sb.ID)
}

// updateSandbox sets every column of a sandbox's row from sandboxArgs's
// ?2 to ?28; the caller adds the WHERE clause.
const updateSandbox = `UPDATE sandboxes SET name = ?2, tenant = ?3, owner = ?4, image = ?5, size = ?6,
	runtime = ?7, status = ?8, reason = ?9, created_at = ?10, updated_at = ?11,
	expires_at = ?12, capabilities = ?13, millicpu = ?14, memory_bytes = ?15, pids = ?16,
	head = ?17, disk_bytes = ?18, labels = ?19, public_ports = ?20,
	network = ?21, net_bits_per_sec = ?22, net_conns = ?23,
	egress = ?24, image_digest = ?25, image_key = ?26, image_config = ?27, node = ?28
`

// Swap replaces the row of sb.ID with sb while it has was's tenant, name,
// status and node, and reports whether it did.
func (v sandboxes) Swap(ctx context.Context, was, sb sandbox.Sandbox) (bool, error) {
	if was.ID != sb.ID {
		return false, fmt.Errorf("sqlite: swap sandbox %q: the row read is %q's", sb.ID, was.ID)
	}
	args, err := sandboxArgs(sb)
	if err != nil {
		return false, fmt.Errorf("sqlite: swap sandbox %q: %w", sb.ID, err)
	}
	args = append(args, asReadArgs(was)...)
	res, err := v.db.w.ExecContext(ctx,
		swapSandbox, args...)
	if err != nil {
		return false, fmt.Errorf("sqlite: swap sandbox %q: %w", sb.ID, writeErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: swap sandbox %q: %w", sb.ID, err)
	}
	return n == 1, nil
}

// Get returns tenant's sandbox called name, or store.ErrNotFound.
func (v sandboxes) Get(ctx context.Context, tenant, name string) (sandbox.Sandbox, error) {
	row := v.db.r.QueryRowContext(ctx,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE tenant = ? AND name = ?`, tenant, name)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Sandbox{}, fmt.Errorf("sqlite: sandbox %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sqlite: get sandbox %q of %q: %w", name, tenant, err)
	}
	return sb, nil
}

// ByID returns the sandbox whose id is id, or store.ErrNotFound.
func (v sandboxes) ByID(ctx context.Context, id string) (sandbox.Sandbox, error) {
	row := v.db.r.QueryRowContext(ctx,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Sandbox{}, fmt.Errorf("sqlite: sandbox id %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sqlite: get sandbox id %q: %w", id, err)
	}
	return sb, nil
}

// List returns the sandboxes matching f, oldest CreatedAt first and
// insertion order among equals. No match is an empty slice and no error.
func (v sandboxes) List(ctx context.Context, f store.Filter) ([]sandbox.Sandbox, error) {
	// Conditions are added only when set, rather than "? = '' OR tenant = ?",
	// so that SQLite can use the (tenant, owner, created_at), (owner,
	// created_at) and (name) indexes.
	var where []string
	var args []any
	if f.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, f.Tenant)
	}
	if f.Owner != "" {
		where = append(where, "owner = ?")
		args = append(args, f.Owner)
	}
	if f.Name != "" {
		where = append(where, "name = ?")
		args = append(args, f.Name)
	}
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at, rowid`

	return queryAll(ctx, v.db, "list sandboxes", scanSandbox, q, args...)
}

// Delete removes the sandbox with that id, and its checkpoints with
// it (ON DELETE CASCADE), or returns store.ErrNotFound.
func (v sandboxes) Delete(ctx context.Context, id string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("sqlite: delete sandbox %q: %w", id, err)
	}
	return affectedOne(res, "delete sandbox", id)
}

// asRead is the condition Swap and DeleteIf put on a sandbox's row: the
// tenant, name, status and node it was read with, bound from parameter n
// on (asReadArgs).
func asRead(n int) string {
	return fmt.Sprintf("tenant = ?%d AND name = ?%d AND status = ?%d AND node = ?%d", n, n+1, n+2, n+3)
}

// swapSandbox and deleteSandboxIf are Swap's and DeleteIf's statements:
// sandboxArgs then asReadArgs, and the id then asReadArgs.
var (
	swapSandbox     = updateSandbox + `WHERE id = ?1 AND ` + asRead(29)
	deleteSandboxIf = `DELETE FROM sandboxes WHERE id = ?1 AND ` + asRead(2)
)

// asReadArgs binds asRead's parameters from was.
func asReadArgs(was sandbox.Sandbox) []any {
	return []any{was.Tenant, was.Name, string(was.Status), was.Node}
}

// DeleteIf removes the row of was.ID while it has was's tenant, name,
// status and node, and reports whether it did.
func (v sandboxes) DeleteIf(ctx context.Context, was sandbox.Sandbox) (bool, error) {
	res, err := v.db.w.ExecContext(ctx,
		deleteSandboxIf, append([]any{was.ID}, asReadArgs(was)...)...)
	if err != nil {
		return false, fmt.Errorf("sqlite: delete sandbox %q if unchanged: %w", was.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: delete sandbox %q if unchanged: %w", was.ID, err)
	}
	return n == 1, nil
}

// UsingImage returns the sandboxes whose image_key is one of keys, of
// every tenant, oldest first, at most limit of them when limit is
// positive. keys travel as one JSON array, so their number is not bounded
// by SQLite's limit on bound parameters; empty keys are dropped.
func (v sandboxes) UsingImage(ctx context.Context, keys []string, limit int) ([]sandbox.Sandbox, error) {
	keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "" })
	if len(keys) == 0 {
		return []sandbox.Sandbox{}, nil
	}
	keysJSON, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("sqlite: sandboxes using image: %w", err)
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	return queryAll(ctx, v.db, "sandboxes using image", scanSandbox,
		`SELECT `+sandboxColumns+` FROM sandboxes
		WHERE image_key IN (SELECT value FROM json_each(?))
		ORDER BY created_at, rowid LIMIT ?`, string(keysJSON), limit)
}

// sandboxArgs binds sb in sandboxColumns order.
func sandboxArgs(sb sandbox.Sandbox) ([]any, error) {
	if sb.ID == "" || sb.Name == "" {
		return nil, errors.New("sandbox id and name must not be empty")
	}
	created, err := formatTime(sb.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("created_at: %w", err)
	}
	updated, err := formatTime(sb.UpdatedAt)
	if err != nil {
		return nil, fmt.Errorf("updated_at: %w", err)
	}
	expires, err := formatNullTime(sb.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("expires_at: %w", err)
	}
	caps := sb.Capabilities
	if caps == nil {
		caps = []string{} // a JSON array, never null
	}
	capsJSON, err := json.Marshal(caps)
	if err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	labels := sb.Labels
	if labels == nil {
		labels = []string{}
	}
	labelsJSON, err := json.Marshal(labels)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	egressJSON, err := json.Marshal(sb.Egress)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	network := sb.Network
	if network == "" {
		network = sandbox.NetworkNone
	}
	ports := sb.PublicPorts
	if ports == nil {
		ports = []int{}
	}
	portsJSON, err := json.Marshal(ports)
	if err != nil {
		return nil, fmt.Errorf("public ports: %w", err)
	}
	configJSON, err := json.Marshal(sb.ImageConfig)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return []any{
		sb.ID, sb.Name, sb.Tenant, sb.Owner, sb.Image, sb.Size, sb.Runtime,
		string(sb.Status), sb.Reason, created, updated, expires, string(capsJSON),
		sb.Resources.MilliCPU, sb.Resources.MemoryBytes, sb.Resources.Pids, sb.Head, sb.Resources.DiskBytes,
		string(labelsJSON), string(portsJSON), network,
		sb.Resources.NetBitsPerSec, sb.Resources.NetConns, string(egressJSON),
		sb.ImageDigest, sb.ImageKey, string(configJSON), sb.Node,
	}, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanSandbox reads one row selected with sandboxColumns. Capabilities,
// Labels and PublicPorts come back non-nil, so that doors render [] rather
// than null.
func scanSandbox(s scanner) (sandbox.Sandbox, error) {
	var (
		sb                     sandbox.Sandbox
		status                 string
		created, updated       string
		expires                sql.NullString
		capsJSON, labelsJSON   string
		portsJSON, egressJSON  string
		configJSON             string
		milli, mem, pids, disk int64
		netBits, netConns      int64
	)
	if err := s.Scan(&sb.ID, &sb.Name, &sb.Tenant, &sb.Owner, &sb.Image, &sb.Size,
		&sb.Runtime, &status, &sb.Reason, &created, &updated, &expires, &capsJSON,
		&milli, &mem, &pids, &sb.Head, &disk, &labelsJSON, &portsJSON, &sb.Network, &netBits, &netConns, &egressJSON,
		&sb.ImageDigest, &sb.ImageKey, &configJSON, &sb.Node); err != nil {
		return sandbox.Sandbox{}, err
	}
	sb.Status = sandbox.Status(status)
	sb.Resources = sandbox.Resources{MilliCPU: milli, MemoryBytes: mem, Pids: pids, DiskBytes: disk,
		NetBitsPerSec: netBits, NetConns: netConns}
	var err error
	if sb.CreatedAt, err = parseTime(created); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q created_at: %w", sb.ID, err)
	}
	if sb.UpdatedAt, err = parseTime(updated); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q updated_at: %w", sb.ID, err)
	}
	if sb.ExpiresAt, err = parseNullTime(expires); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q expires_at: %w", sb.ID, err)
	}
	sb.Capabilities = []string{}
	if err := json.Unmarshal([]byte(capsJSON), &sb.Capabilities); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q capabilities: %w", sb.ID, err)
	}
	sb.Labels = []string{}
	if err := json.Unmarshal([]byte(labelsJSON), &sb.Labels); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q labels: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(egressJSON), &sb.Egress); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q egress: %w", sb.ID, err)
	}
	sb.PublicPorts = []int{}
	if err := json.Unmarshal([]byte(portsJSON), &sb.PublicPorts); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q public ports: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(configJSON), &sb.ImageConfig); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q image config: %w", sb.ID, err)
	}
	return sb, nil
}

// affectedOne turns an UPDATE or DELETE that matched no row into
// store.ErrNotFound.
func affectedOne(res sql.Result, op, id string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlite: %s %q: %w", op, id, err)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: %s %q: %w", op, id, store.ErrNotFound)
	}
	return nil
}

// queryAll runs query with args on the read connections and returns every
// row scanned by scan, in order; no row is an empty slice. what names the
// list in errors ("list tenants").
func queryAll[T any](ctx context.Context, db *DB, what string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	return out, nil
}
