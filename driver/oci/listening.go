package oci

import (
	"context"
	"os"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/internal/sockdiag"
	"github.com/hearth/hearth/network"
)

var _ driver.AgentListeners = (*Driver)(nil)

// AgentsListening implements driver.AgentListeners (see
// channels.listening): nothing connects, so no sandbox wakes.
func (d *Driver) AgentsListening(ctx context.Context, ids []string) (map[string]bool, error) {
	return d.channels.listening(ctx, ids)
}

// listening returns the ids among ids whose agent's socket has a
// listener, from one look at the socket table that holds the agents'
// sockets and a stat of each sandbox's socket file, reached as dial
// reaches it: a sandbox is listening when a listening socket is bound to
// that very file. Under runsc the agents' sockets are made on the host by
// the gofers, in the empty network namespace they share (nullNetns,
// which runsc makes with its first sandbox); under runc and crun the
// daemon makes them, in its own. A sandbox whose socket cannot be looked
// at, or whose gofer runs in another namespace (a
// --gofer-network-namespace in RuntimeFlags), is left out, to be dialed.
func (c *channels) listening(ctx context.Context, ids []string) (map[string]bool, error) {
	listeners, err := c.unixListeners()
	if err != nil || len(listeners) == 0 {
		return nil, err
	}
	out := map[string]bool{}
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		if validID(id) != nil {
			continue
		}
		if f, err := c.socketFile(id); err == nil && listeners[f] {
			out[id] = true
		}
	}
	return out, ctx.Err()
}

// unixListeners returns the files the listening unix sockets of the
// agents' network namespace (see listening) are bound to; none under
// runsc before its first sandbox made that namespace.
func (c *channels) unixListeners() (map[sockdiag.File]bool, error) {
	var conn *sockdiag.Conn
	var err error
	if c.runtime == RuntimeRunsc {
		ns := c.dir.nullNetns()
		if _, serr := os.Stat(ns); serr != nil {
			return nil, nil
		}
		err = network.InNamespace(ns, func() (err error) {
			conn, err = sockdiag.Open()
			return err
		})
	} else {
		conn, err = sockdiag.Open()
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.UnixListeners()
}
