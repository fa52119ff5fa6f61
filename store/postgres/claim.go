package postgres

import (
	"context"
	"errors"
	"fmt"
)

// ErrClaimed is returned by Claim while another process holds the
// database's claim.
var ErrClaimed = errors.New("postgres: another hearth daemon holds this database")

// claimLockKey is the session-level advisory lock (the one-bigint key
// space) of the database's claim: "hearthd1" in ASCII, apart from
// migrationLockKey.
const claimLockKey int64 = 0x6865617274686431

// Claim makes this DB the database's only daemon until Close: it holds a
// session-level advisory lock on a connection of its own, so the claim
// ends when the DB is closed or its process dies (the server ends the
// session). A second Claim of the same database, from this process or
// another, returns ErrClaimed at once. Until several daemons can share a
// store (admission across them, one set of background loops, each
// sandbox's node), a daemon claims its store at start: two daemons on one
// database would each take the other's sandboxes for gone.
func (db *DB) Claim(ctx context.Context) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: claim: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, claimLockKey).Scan(&ok); err != nil {
		conn.Release()
		return fmt.Errorf("postgres: claim: %w", err)
	}
	if !ok {
		conn.Release()
		return ErrClaimed
	}
	// The connection leaves the pool with its lock: closing the pool (and
	// with it every connection it made) must not wait for it.
	db.mu.Lock()
	defer db.mu.Unlock()
	db.claim = conn.Hijack()
	return nil
}

// releaseClaim ends the claim, if any (see closeUnlocked). The caller
// holds db.mu.
func (db *DB) releaseClaim() {
	if db.claim != nil {
		closeUnlocked(db.claim)
		db.claim = nil
	}
}
