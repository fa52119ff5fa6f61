package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/store"
)

// The views several daemons share in store/postgres hold for the one
// daemon of an SQLite file: admission locks are in this DB's memory (two
// DBs on one file, or two processes, do not exclude each other), the
// store's clock is this process's, and change notices reach the listeners
// of this DB.

// admissions is the store.Admissions view of db: its tenant locks and the
// rates table.
type admissions struct{ db *DB }

// Admissions returns the view of the admission locks and create rates.
func (db *DB) Admissions() store.Admissions { return admissions{db} }

// keyedLocks are locks by key whose waits honour a context.
type keyedLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed when the key's holder unlocks
}

// lock waits for key's lock, or for ctx.
func (l *keyedLocks) lock(ctx context.Context, key string) (func(), error) {
	for {
		l.mu.Lock()
		if l.held == nil {
			l.held = map[string]chan struct{}{}
		}
		busy, ok := l.held[key]
		if !ok {
			freed := make(chan struct{})
			l.held[key] = freed
			l.mu.Unlock()
			return sync.OnceFunc(func() {
				l.mu.Lock()
				delete(l.held, key)
				l.mu.Unlock()
				close(freed)
			}), nil
		}
		l.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Lock takes tenant's lock in this DB.
func (v admissions) Lock(ctx context.Context, tenant string) (func(), error) {
	if tenant == "" {
		return nil, errors.New("sqlite: lock tenant: empty tenant")
	}
	if err := v.db.checkOpen(); err != nil {
		return nil, err
	}
	return v.db.locks.lock(ctx, tenant)
}

// Rate reads tenant's agent's row of rates, or the zero Rate.
func (v admissions) Rate(ctx context.Context, tenant, agent string) (policy.Rate, error) {
	var state string
	err := v.db.r.QueryRowContext(ctx, `SELECT state FROM rates WHERE tenant = ? AND agent = ?`, tenant, agent).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return policy.Rate{}, nil
	}
	if err != nil {
		return policy.Rate{}, fmt.Errorf("sqlite: get create rate of %q/%q: %w", tenant, agent, err)
	}
	return store.DecodeRate([]byte(state))
}

// SetRate writes tenant's agent's row of rates.
func (v admissions) SetRate(ctx context.Context, tenant, agent string, r policy.Rate) error {
	if tenant == "" {
		return errors.New("sqlite: set create rate: empty tenant")
	}
	state, err := store.EncodeRate(r)
	if err != nil {
		return fmt.Errorf("sqlite: set create rate: %w", err)
	}
	_, err = v.db.w.ExecContext(ctx, `INSERT INTO rates (tenant, agent, state) VALUES (?, ?, ?)
		ON CONFLICT (tenant, agent) DO UPDATE SET state = excluded.state`, tenant, agent, string(state))
	if err != nil {
		return fmt.Errorf("sqlite: set create rate of %q/%q: %w", tenant, agent, writeErr(err))
	}
	return nil
}

// nodes is the store.Nodes view of db: the nodes table.
type nodes struct{ db *DB }

// Nodes returns the view of the nodes table.
func (db *DB) Nodes() store.Nodes { return nodes{db} }

// Heartbeat upserts n with HeartbeatAt now.
func (v nodes) Heartbeat(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Name == "" {
		return store.Node{}, errors.New("sqlite: heartbeat: empty node name")
	}
	n.HeartbeatAt = time.Now().UTC()
	ts, err := formatTimes(n.StartedAt, n.HeartbeatAt, n.NodeTime)
	if err != nil {
		return store.Node{}, fmt.Errorf("sqlite: heartbeat of %q: %w", n.Name, err)
	}
	_, err = v.db.w.ExecContext(ctx, `INSERT INTO nodes (`+nodeColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET address = excluded.address, version = excluded.version, instance = excluded.instance,
		  started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, node_time = excluded.node_time,
		  credential = excluded.credential, previous_credential = excluded.previous_credential`,
		n.Name, n.Address, n.Version, n.Instance, ts[0], ts[1], ts[2], n.Credential, n.PreviousCredential)
	if err != nil {
		return store.Node{}, fmt.Errorf("sqlite: heartbeat of %q: %w", n.Name, writeErr(err))
	}
	return v.Get(ctx, n.Name)
}

const nodeColumns = `name, address, version, instance, started_at, heartbeat_at, node_time, credential, previous_credential`

func scanNode(row interface{ Scan(...any) error }) (store.Node, error) {
	var n store.Node
	var ts [3]string
	if err := row.Scan(&n.Name, &n.Address, &n.Version, &n.Instance, &ts[0], &ts[1], &ts[2], &n.Credential, &n.PreviousCredential); err != nil {
		return store.Node{}, err
	}
	var err error
	for i, p := range []*time.Time{&n.StartedAt, &n.HeartbeatAt, &n.NodeTime} {
		if *p, err = parseTime(ts[i]); err != nil {
			return store.Node{}, err
		}
	}
	return n, nil
}

// Get reads node name.
func (v nodes) Get(ctx context.Context, name string) (store.Node, error) {
	n, err := scanNode(v.db.r.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Node{}, fmt.Errorf("sqlite: node %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("sqlite: get node %q: %w", name, err)
	}
	return n, nil
}

// List reads every node, by name.
func (v nodes) List(ctx context.Context) ([]store.Node, error) {
	rows, err := v.db.r.QueryContext(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list nodes: %w", err)
	}
	defer rows.Close()
	out := []store.Node{}
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list nodes: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list nodes: %w", err)
	}
	return out, nil
}

// Delete removes node name.
func (v nodes) Delete(ctx context.Context, name string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM nodes WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("sqlite: delete node %q: %w", name, writeErr(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("sqlite: delete node %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// Now is this process's clock: the one daemon's.
func (v nodes) Now(ctx context.Context) (time.Time, error) {
	if err := v.db.checkOpen(); err != nil {
		return time.Time{}, err
	}
	return time.Now().UTC().Round(0), nil
}

// leases is the store.Leases view of db: the leases table.
type leases struct{ db *DB }

// Leases returns the view of the leases table.
func (db *DB) Leases() store.Leases { return leases{db} }

// Acquire takes or renews name for holder when it is free, lapsed or
// holder's already, in one statement on the one writer.
func (v leases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return store.Lease{}, false, fmt.Errorf("sqlite: acquire lease %q for %q for %s: want a name, a holder and a positive ttl", name, holder, ttl)
	}
	now := time.Now().UTC()
	ts, err := formatTimes(now, now.Add(ttl))
	if err != nil {
		return store.Lease{}, false, fmt.Errorf("sqlite: acquire lease %q: %w", name, err)
	}
	res, err := v.db.w.ExecContext(ctx, `INSERT INTO leases (name, holder, until) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
		WHERE leases.holder = excluded.holder OR leases.until <= ?`, name, holder, ts[1], ts[0])
	if err != nil {
		return store.Lease{}, false, fmt.Errorf("sqlite: acquire lease %q: %w", name, writeErr(err))
	}
	n, _ := res.RowsAffected()
	l, err := v.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) && n == 0 {
		return store.Lease{}, false, nil // released between the two statements
	}
	return l, n == 1 && err == nil && l.Holder == holder, err
}

// Release deletes holder's lease name.
func (v leases) Release(ctx context.Context, name, holder string) error {
	if _, err := v.db.w.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder); err != nil {
		return fmt.Errorf("sqlite: release lease %q: %w", name, writeErr(err))
	}
	return nil
}

// Get reads lease name.
func (v leases) Get(ctx context.Context, name string) (store.Lease, error) {
	l := store.Lease{Name: name}
	var until string
	err := v.db.r.QueryRowContext(ctx, `SELECT holder, until FROM leases WHERE name = ?`, name).Scan(&l.Holder, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("sqlite: lease %q: %w", name, store.ErrNotFound)
	}
	if err == nil {
		l.Until, err = parseTime(until)
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("sqlite: get lease %q: %w", name, err)
	}
	return l, nil
}

// changes is the store.Changes view of db: its hub.
type changes struct{ db *DB }

// Changes returns the view that hands notices to this DB's listeners.
func (db *DB) Changes() store.Changes { return changes{db} }

// Notify hands payload to this DB's listeners of topic.
func (v changes) Notify(ctx context.Context, topic, payload string) error {
	if err := store.CheckNotice(topic, payload); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if err := v.db.checkOpen(); err != nil {
		return err
	}
	v.db.hub.Publish(topic, payload)
	return nil
}

// Listen subscribes to topic in this DB.
func (v changes) Listen(ctx context.Context, topic string) (<-chan string, error) {
	if err := store.CheckNotice(topic, ""); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	ch, err := v.db.hub.Subscribe(ctx, topic)
	if err != nil {
		return nil, errClosed
	}
	return ch, nil
}

// formatTimes is formatTime of each of ts.
func formatTimes(ts ...time.Time) ([]string, error) {
	out := make([]string, len(ts))
	for i, t := range ts {
		s, err := formatTime(t)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
