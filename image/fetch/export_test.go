package fetch

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// WithDial is o with its TCP dialer replaced: tests reach loopback
// servers under other names, and see what is sent.
func WithDial(o Options, dial func(ctx context.Context, network, addr string) (net.Conn, error)) Options {
	o.dial = dial
	return o
}

// WithLookup is o with the resolver PublicOnly asks replaced: tests give
// names addresses without asking a name server.
func WithLookup(o Options, lookup func(ctx context.Context, host string) ([]netip.Addr, error)) Options {
	o.lookup = lookup
	return o
}

// WithBackoff is o with the first retry's delay set to d.
func WithBackoff(o Options, d time.Duration) Options {
	o.backoff = d
	return o
}

// WithStall is o with a download cut after d without a byte.
func WithStall(o Options, d time.Duration) Options {
	o.stall = d
	return o
}
