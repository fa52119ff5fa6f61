package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// sandboxColumns are selected and bound in this order; sandboxArgs and
// scanSandbox follow it, and UPDATE refers to them as $1…$28.
const sandboxColumns = `id, name, tenant, owner, image, size, runtime, status, reason,
	created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids, head, disk_bytes, labels,
	public_ports, network, net_bits_per_sec, net_conns, egress, image_digest, image_key, image_config, node`

// sandboxes is the store.Sandboxes view of db: the sandboxes table.
type sandboxes struct{ db *DB }

var _ store.Sandboxes = sandboxes{}

// Sandboxes returns the view of the sandboxes table.
func (db *DB) Sandboxes() store.Sandboxes { return sandboxes{db} }

// Create inserts sb. It returns store.ErrExists if sb.ID is taken or
// sb.Tenant has a sandbox called sb.Name, and an error if either is empty.
func (v sandboxes) Create(ctx context.Context, sb sandbox.Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("postgres: create sandbox %q: %w", sb.Name, err)
	}
	if _, err := v.db.exec(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`) VALUES (`+params(1, 28)+`)`, args...); err != nil {
		return fmt.Errorf("postgres: create sandbox %q: %w", sb.Name, writeErr(err))
	}
	return nil
}

// Update replaces every field of the sandbox with sb.ID by sb's. It
// returns store.ErrNotFound if there is none, and store.ErrExists if
// sb.Tenant has another sandbox called sb.Name.
func (v sandboxes) Update(ctx context.Context, sb sandbox.Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("postgres: update sandbox %q: %w", sb.ID, err)
	}
	return v.db.execOne(ctx, "update sandbox", strconv.Quote(sb.ID),
		updateSandbox+`WHERE id = $1`, args...)
}

// updateSandbox sets every column of a sandbox's row from sandboxArgs's
// $1 to $28; the caller adds the WHERE clause.
var updateSandbox = `UPDATE sandboxes SET (` + sandboxColumns + `) = (` + params(1, 28) + `) `

// Swap replaces the row of sb.ID with sb while it has was's tenant, name,
// status and node, and reports whether it did.
func (v sandboxes) Swap(ctx context.Context, was, sb sandbox.Sandbox) (bool, error) {
	if was.ID != sb.ID {
		return false, fmt.Errorf("postgres: swap sandbox %q: the row read is %q's", sb.ID, was.ID)
	}
	args, err := sandboxArgs(sb)
	if err != nil {
		return false, fmt.Errorf("postgres: swap sandbox %q: %w", sb.ID, err)
	}
	args = append(args, asReadArgs(was)...)
	n, err := v.db.exec(ctx,
		swapSandbox, args...)
	if err != nil {
		return false, fmt.Errorf("postgres: swap sandbox %q: %w", sb.ID, writeErr(err))
	}
	return n == 1, nil
}

// Get returns tenant's sandbox called name, or store.ErrNotFound.
func (v sandboxes) Get(ctx context.Context, tenant, name string) (sandbox.Sandbox, error) {
	return getOne(ctx, v.db, fmt.Sprintf("sandbox %q of %q", name, tenant), scanSandbox,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE tenant = $1 AND name = $2`, tenant, name)
}

// ByID returns the sandbox whose id is id, or store.ErrNotFound.
func (v sandboxes) ByID(ctx context.Context, id string) (sandbox.Sandbox, error) {
	return getOne(ctx, v.db, fmt.Sprintf("sandbox id %q", id), scanSandbox,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE id = $1`, id)
}

// List returns the sandboxes matching f, oldest CreatedAt first and
// insertion order among equals. No match is an empty slice and no error.
func (v sandboxes) List(ctx context.Context, f store.Filter) ([]sandbox.Sandbox, error) {
	// Conditions are added only when set, rather than "$1 = '' OR tenant
	// = $1", so that the planner can use the indexes that match.
	var where []string
	var args []any
	for _, c := range []struct{ column, value string }{{"tenant", f.Tenant}, {"owner", f.Owner}, {"name", f.Name}} {
		if c.value != "" {
			args = append(args, c.value)
			where = append(where, fmt.Sprintf("%s = $%d", c.column, len(args)))
		}
	}
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return queryAll(ctx, v.db, "list sandboxes", scanSandbox, q+` ORDER BY created_at, seq`, args...)
}

// Delete removes the sandbox with that id, and its checkpoints with it
// (ON DELETE CASCADE), or returns store.ErrNotFound.
func (v sandboxes) Delete(ctx context.Context, id string) error {
	return v.db.execOne(ctx, "delete sandbox", strconv.Quote(id), `DELETE FROM sandboxes WHERE id = $1`, id)
}

// asRead is the condition Swap and DeleteIf put on a sandbox's row: the
// tenant, name, status and node it was read with, bound from parameter n
// on (asReadArgs).
func asRead(n int) string {
	return fmt.Sprintf("tenant = $%d AND name = $%d AND status = $%d AND node = $%d", n, n+1, n+2, n+3)
}

// swapSandbox and deleteSandboxIf are Swap's and DeleteIf's statements:
// sandboxArgs then asReadArgs, and the id then asReadArgs.
var (
	swapSandbox     = updateSandbox + `WHERE id = $1 AND ` + asRead(29)
	deleteSandboxIf = `DELETE FROM sandboxes WHERE id = $1 AND ` + asRead(2)
)

// asReadArgs binds asRead's parameters from was.
func asReadArgs(was sandbox.Sandbox) []any {
	return []any{was.Tenant, was.Name, string(was.Status), was.Node}
}

// DeleteIf removes the row of was.ID while it has was's tenant, name,
// status and node, and reports whether it did.
func (v sandboxes) DeleteIf(ctx context.Context, was sandbox.Sandbox) (bool, error) {
	n, err := v.db.exec(ctx, deleteSandboxIf, append([]any{was.ID}, asReadArgs(was)...)...)
	if err != nil {
		return false, fmt.Errorf("postgres: delete sandbox %q if unchanged: %w", was.ID, err)
	}
	return n == 1, nil
}

// UsingImage returns the sandboxes whose image_key is one of keys, of
// every tenant, oldest first, at most limit of them when limit is
// positive. keys travel as one array parameter, so their number is not
// bounded; empty keys are dropped.
func (v sandboxes) UsingImage(ctx context.Context, keys []string, limit int) ([]sandbox.Sandbox, error) {
	keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "" })
	if len(keys) == 0 {
		return []sandbox.Sandbox{}, nil
	}
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	return queryAll(ctx, v.db, "sandboxes using image", scanSandbox,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE image_key = ANY ($1)
		ORDER BY created_at, seq LIMIT $2`, keys, lim)
}

// params returns "$from, …, $to".
func params(from, to int) string {
	ps := make([]string, 0, to-from+1)
	for i := from; i <= to; i++ {
		ps = append(ps, "$"+strconv.Itoa(i))
	}
	return strings.Join(ps, ", ")
}

// sandboxArgs binds sb in sandboxColumns order. Lists are never NULL: a
// nil one is stored empty.
func sandboxArgs(sb sandbox.Sandbox) ([]any, error) {
	if sb.ID == "" || sb.Name == "" {
		return nil, errors.New("sandbox id and name must not be empty")
	}
	if err := checkTimes(sb.CreatedAt, sb.UpdatedAt, sb.ExpiresAt); err != nil {
		return nil, err
	}
	egress, err := json.Marshal(sb.Egress)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	config, err := json.Marshal(sb.ImageConfig)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	network := sb.Network
	if network == "" {
		network = sandbox.NetworkNone
	}
	r := sb.Resources
	return []any{
		sb.ID, sb.Name, sb.Tenant, sb.Owner, sb.Image, sb.Size, sb.Runtime,
		string(sb.Status), sb.Reason, sb.CreatedAt, sb.UpdatedAt, nullTime(sb.ExpiresAt),
		nonNil(sb.Capabilities), r.MilliCPU, r.MemoryBytes, r.Pids, sb.Head, r.DiskBytes,
		nonNil(sb.Labels), nonNil(sb.PublicPorts), network, r.NetBitsPerSec, r.NetConns,
		string(egress), sb.ImageDigest, sb.ImageKey, string(config), sb.Node,
	}, nil
}

// nonNil returns s, or an empty slice for nil, which pgx would send as
// NULL.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// scanSandbox reads one row selected with sandboxColumns. Capabilities,
// Labels and PublicPorts come back non-nil, so that doors render [] rather
// than null.
func scanSandbox(row pgx.Row) (sandbox.Sandbox, error) {
	var (
		sb             sandbox.Sandbox
		status         string
		expires        *time.Time
		egress, config []byte
		r              = &sb.Resources
	)
	if err := row.Scan(&sb.ID, &sb.Name, &sb.Tenant, &sb.Owner, &sb.Image, &sb.Size,
		&sb.Runtime, &status, &sb.Reason, &sb.CreatedAt, &sb.UpdatedAt, &expires, &sb.Capabilities,
		&r.MilliCPU, &r.MemoryBytes, &r.Pids, &sb.Head, &r.DiskBytes, &sb.Labels, &sb.PublicPorts,
		&sb.Network, &r.NetBitsPerSec, &r.NetConns, &egress, &sb.ImageDigest, &sb.ImageKey, &config, &sb.Node); err != nil {
		return sandbox.Sandbox{}, err
	}
	sb.Status, sb.ExpiresAt = sandbox.Status(status), fromNull(expires)
	sb.Capabilities, sb.Labels, sb.PublicPorts = nonNil(sb.Capabilities), nonNil(sb.Labels), nonNil(sb.PublicPorts)
	if err := json.Unmarshal(egress, &sb.Egress); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q egress: %w", sb.ID, err)
	}
	if err := json.Unmarshal(config, &sb.ImageConfig); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %q image config: %w", sb.ID, err)
	}
	return sb, nil
}
