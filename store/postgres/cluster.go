package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/store"
)

// tenantLockSpace is the first key of the tenants' admission locks (the
// two-int4 advisory key space): "hear" in ASCII. The second is
// hashtext(tenant); two tenants whose names hash alike share a lock, which
// only serializes them.
const tenantLockSpace int32 = 0x68656172

// admissions is the store.Admissions view of db: session-level advisory
// locks on connections of db.locks, and the rates table.
type admissions struct{ db *DB }

// Admissions returns the view of the admission locks and create rates.
func (db *DB) Admissions() store.Admissions { return admissions{db} }

// Lock takes tenant's advisory lock on a connection of db.locks that
// keeps it until unlock: the lock is the session's, so it ends with the
// connection if this process dies. A wait cut short by ctx breaks its
// connection (pgx's cancellation), which the pool then drops, lock
// request and all. A connection the server ended while it sat in the
// pool (a restart) fails at once; the lock is then asked for once more
// on a fresh one, since a dead session holds nothing.
func (v admissions) Lock(ctx context.Context, tenant string) (func(), error) {
	if tenant == "" {
		return nil, errors.New("postgres: lock tenant: empty tenant")
	}
	for attempt := 1; ; attempt++ {
		conn, err := v.db.locks.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("postgres: lock tenant %q: %w", tenant, err)
		}
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, tenantLockSpace, tenant)
		if err == nil {
			return v.db.locked(conn, tenant)
		}
		dead := conn.Conn().IsClosed()
		discard(conn)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !dead || attempt == 2:
			return nil, fmt.Errorf("postgres: lock tenant %q: %w", tenant, err)
		}
	}
}

// locked records conn, which holds tenant's lock, and returns its unlock.
func (db *DB) locked(conn *pgxpool.Conn, tenant string) (func(), error) {
	if !db.hold(conn) {
		discard(conn)
		return nil, errClosed
	}
	return sync.OnceFunc(func() {
		if db.drop(conn) {
			unlockAndRelease(conn, `SELECT pg_advisory_unlock($1, hashtext($2))`, tenantLockSpace, tenant)
		}
	}), nil
}

// Rate reads tenant's agent's row of rates, or the zero Rate.
func (v admissions) Rate(ctx context.Context, tenant, agent string) (policy.Rate, error) {
	var state []byte
	err := v.db.pool.QueryRow(ctx, `SELECT state FROM rates WHERE tenant = $1 AND agent = $2`, tenant, agent).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return policy.Rate{}, nil
	}
	if err != nil {
		return policy.Rate{}, fmt.Errorf("postgres: get create rate of %q/%q: %w", tenant, agent, err)
	}
	return store.DecodeRate(state)
}

// SetRate writes tenant's agent's row of rates.
func (v admissions) SetRate(ctx context.Context, tenant, agent string, r policy.Rate) error {
	if tenant == "" {
		return errors.New("postgres: set create rate: empty tenant")
	}
	state, err := store.EncodeRate(r)
	if err != nil {
		return fmt.Errorf("postgres: set create rate: %w", err)
	}
	_, err = v.db.exec(ctx, `INSERT INTO rates (tenant, agent, state) VALUES ($1, $2, $3::jsonb)
		ON CONFLICT (tenant, agent) DO UPDATE SET state = excluded.state`, tenant, agent, string(state))
	if err != nil {
		return fmt.Errorf("postgres: set create rate of %q/%q: %w", tenant, agent, writeErr(err))
	}
	return nil
}

// hold records conn as holding an admission lock, so that Close unlocks
// it; false after Close.
func (db *DB) hold(conn *pgxpool.Conn) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return false
	}
	if db.held == nil {
		db.held = map[*pgxpool.Conn]struct{}{}
	}
	db.held[conn] = struct{}{}
	return true
}

// drop forgets conn's lock; false when Close has taken it already.
func (db *DB) drop(conn *pgxpool.Conn) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	_, ok := db.held[conn]
	delete(db.held, conn)
	return ok
}

// releaseLocks ends every admission lock still held: Close's part. The
// caller holds db.mu.
func (db *DB) releaseLocks() {
	for conn := range db.held {
		c := conn.Hijack()
		closeUnlocked(c)
	}
	db.held = nil
}

// unlockAndRelease runs unlock (an advisory unlock) on conn and returns
// conn to its pool, or, when the unlock fails, closes it: a connection
// whose lock may still be held must not serve anyone else.
func unlockAndRelease(conn *pgxpool.Conn, unlock string, args ...any) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, unlock, args...); err != nil {
		discard(conn)
		return
	}
	conn.Release()
}

// closeTimeout bounds the unlocking and closing of a connection that
// holds a lock.
const closeTimeout = 5 * time.Second

// closeUnlocked ends every advisory lock of c's session and closes it: a
// server frees a closed session's locks only when its backend notices
// the close, after Close has returned, so the locks go first.
func closeUnlocked(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	// An error leaves the locks to the session's end.
	_, _ = c.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	c.Close(ctx)
}

// discard closes conn instead of returning it to its pool.
func discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	c.Close(ctx)
}

// nodes is the store.Nodes view of db: the nodes table, timed by the
// database's clock.
type nodes struct{ db *DB }

// Nodes returns the view of the nodes table.
func (db *DB) Nodes() store.Nodes { return nodes{db} }

const nodeColumns = `name, address, version, instance, started_at, heartbeat_at, node_time, credential, previous_credential`

func scanNode(row pgx.Row) (store.Node, error) {
	var n store.Node
	err := row.Scan(&n.Name, &n.Address, &n.Version, &n.Instance, &n.StartedAt, &n.HeartbeatAt, &n.NodeTime, &n.Credential, &n.PreviousCredential)
	return n, err
}

// Heartbeat upserts n with HeartbeatAt the database's clock_timestamp().
func (v nodes) Heartbeat(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Name == "" {
		return store.Node{}, errors.New("postgres: heartbeat: empty node name")
	}
	if err := checkTimes(n.StartedAt, n.NodeTime); err != nil {
		return store.Node{}, fmt.Errorf("postgres: heartbeat of %q: %w", n.Name, err)
	}
	var out store.Node
	err := retry(ctx, func() error {
		var err error
		out, err = scanNode(v.db.pool.QueryRow(ctx, `INSERT INTO nodes (`+nodeColumns+`)
			VALUES ($1, $2, $3, $4, $5, clock_timestamp(), $6, $7, $8)
			ON CONFLICT (name) DO UPDATE SET address = excluded.address, version = excluded.version, instance = excluded.instance,
			  started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, node_time = excluded.node_time,
			  credential = excluded.credential, previous_credential = excluded.previous_credential
			RETURNING `+nodeColumns, n.Name, n.Address, n.Version, n.Instance, n.StartedAt, n.NodeTime, n.Credential, n.PreviousCredential))
		return err
	})
	if err != nil {
		return store.Node{}, fmt.Errorf("postgres: heartbeat of %q: %w", n.Name, writeErr(err))
	}
	return out, nil
}

// Get reads node name.
func (v nodes) Get(ctx context.Context, name string) (store.Node, error) {
	return getOne(ctx, v.db, fmt.Sprintf("node %q", name), scanNode, `SELECT `+nodeColumns+` FROM nodes WHERE name = $1`, name)
}

// List reads every node, by name.
func (v nodes) List(ctx context.Context) ([]store.Node, error) {
	return queryAll(ctx, v.db, "list nodes", scanNode, `SELECT `+nodeColumns+` FROM nodes ORDER BY name`)
}

// Delete removes node name.
func (v nodes) Delete(ctx context.Context, name string) error {
	return v.db.execOne(ctx, "delete", fmt.Sprintf("node %q", name), `DELETE FROM nodes WHERE name = $1`, name)
}

// Now is the database's clock_timestamp().
func (v nodes) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := v.db.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("postgres: now: %w", err)
	}
	return now, nil
}

// leases is the store.Leases view of db: the leases table, timed by the
// database's clock.
type leases struct{ db *DB }

// Leases returns the view of the leases table.
func (db *DB) Leases() store.Leases { return leases{db} }

func scanLease(row pgx.Row) (store.Lease, error) {
	var l store.Lease
	err := row.Scan(&l.Name, &l.Holder, &l.Until)
	return l, err
}

// Acquire takes or renews name for holder in one upsert whose condition
// the row lock makes atomic: of two holders racing for a free lease, the
// second re-reads the first's row and finds it held.
func (v leases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return store.Lease{}, false, fmt.Errorf("postgres: acquire lease %q for %q for %s: want a name, a holder and a positive ttl", name, holder, ttl)
	}
	var l store.Lease
	err := retry(ctx, func() error {
		var err error
		l, err = scanLease(v.db.pool.QueryRow(ctx, `INSERT INTO leases (name, holder, until)
			VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond')
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
			WHERE leases.holder = excluded.holder OR leases.until <= clock_timestamp()
			RETURNING name, holder, until`, name, holder, ttl.Microseconds()))
		return err
	})
	if err == nil {
		return l, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, false, fmt.Errorf("postgres: acquire lease %q: %w", name, err)
	}
	l, err = v.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Lease{}, false, nil // released between the two statements
	}
	return l, false, err
}

// Release deletes holder's lease name.
func (v leases) Release(ctx context.Context, name, holder string) error {
	if _, err := v.db.exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("postgres: release lease %q: %w", name, err)
	}
	return nil
}

// Get reads lease name.
func (v leases) Get(ctx context.Context, name string) (store.Lease, error) {
	return getOne(ctx, v.db, fmt.Sprintf("lease %q", name), scanLease, `SELECT name, holder, until FROM leases WHERE name = $1`, name)
}

// noticeChannel is the one LISTEN/NOTIFY channel of a store: a notice's
// payload is its topic, a space, and its own payload.
const noticeChannel = "hearth_changes"

// changes is the store.Changes view of db: NOTIFY on noticeChannel, and
// db's listener.
type changes struct{ db *DB }

// Changes returns the view that pushes notices to every daemon.
func (db *DB) Changes() store.Changes { return changes{db} }

// Notify sends topic's payload with pg_notify, delivered to every
// listening session when the statement commits.
func (v changes) Notify(ctx context.Context, topic, payload string) error {
	if err := store.CheckNotice(topic, payload); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if _, err := v.db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, noticeChannel, topic+" "+payload); err != nil {
		return fmt.Errorf("postgres: notify %s: %w", topic, err)
	}
	return nil
}

// Listen subscribes to topic, starting db's listener on the first call.
func (v changes) Listen(ctx context.Context, topic string) (<-chan string, error) {
	if err := store.CheckNotice(topic, ""); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := v.db.startListener(ctx); err != nil {
		return nil, err
	}
	ch, err := v.db.hub.Subscribe(ctx, topic)
	if err != nil {
		return nil, errClosed
	}
	return ch, nil
}

// splitNotice is a notification's topic and payload.
func splitNotice(s string) (topic, payload string) {
	topic, payload, _ = strings.Cut(s, " ")
	return topic, payload
}
