package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The listener is one connection of its own per DB that LISTENs on
// noticeChannel and hands each notification to db.hub. When the
// connection fails (the server restarted, the network dropped) it
// reconnects, with a backoff up to listenBackoffMax, and tells every
// listener "" once it is back: what was sent meanwhile is lost.

// listenBackoffMax is the longest wait between reconnects.
const listenBackoffMax = 2 * time.Second

// startListener starts db's listener unless it runs; its first
// connection is made before it returns, so that a notice sent after
// Listen returns is received. ctx bounds that first connection.
func (db *DB) startListener(ctx context.Context) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return errClosed
	}
	if db.stopListen != nil {
		return nil
	}
	conn, err := db.listen(ctx)
	if err != nil {
		return fmt.Errorf("postgres: listen: %w", err)
	}
	lctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	db.stopListen = func() { stop(); <-done }
	go func() {
		defer close(done)
		db.runListener(lctx, conn)
	}()
	return nil
}

// listen connects and LISTENs.
func (db *DB) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, db.cfg.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+noticeChannel); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// runListener hands notifications to db.hub until ctx is done,
// reconnecting when the connection fails.
func (db *DB) runListener(ctx context.Context, conn *pgx.Conn) {
	backoff := 50 * time.Millisecond
	for {
		for conn != nil {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				conn.Close(context.Background())
				conn = nil
				break
			}
			backoff = 50 * time.Millisecond
			db.hub.Publish(splitNotice(n.Payload))
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenBackoffMax)
		var err error
		if conn, err = db.listen(ctx); err == nil {
			db.hub.PublishAll("")
		}
	}
}
