package oci

import (
	"context"
	"os"
	"path/filepath"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/internal/sockdiag"
	"github.com/hearth/hearth/network"
)

var _ driver.AgentListeners = (*Driver)(nil)

// AgentsListening implements driver.AgentListeners with one look at the
// socket table that holds the agents' sockets and a stat of each
// sandbox's socket file, reached as Dial reaches it: a sandbox is
// listening when a listening socket is bound to that very file. Nothing
// connects, so no sandbox wakes. Under runsc the agents' sockets are made
// on the host by the gofers, in the empty network namespace they share
// (null-netns in the runtime's shared root, which runsc makes with its
// first sandbox); under runc and crun the daemon makes them, in its own.
// A sandbox whose socket cannot be looked at, or whose gofer runs in
// another namespace (a --gofer-network-namespace in RuntimeFlags), is
// left out, to be dialed.
func (d *Driver) AgentsListening(ctx context.Context, ids []string) (map[string]bool, error) {
	listening, err := d.unixListeners()
	if err != nil || len(listening) == 0 {
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
		if f, err := d.channels.socketFile(id); err == nil && listening[f] {
			out[id] = true
		}
	}
	return out, ctx.Err()
}

// unixListeners returns the files the listening unix sockets of the
// agents' network namespace (see AgentsListening) are bound to; none
// under runsc before its first sandbox made that namespace.
func (d *Driver) unixListeners() (map[sockdiag.File]bool, error) {
	var c *sockdiag.Conn
	var err error
	if d.runtime == RuntimeRunsc {
		ns := filepath.Join(d.dir.root(), "null-netns")
		if _, serr := os.Stat(ns); serr != nil {
			return nil, nil
		}
		err = network.InNamespace(ns, func() (err error) {
			c, err = sockdiag.Open()
			return err
		})
	} else {
		c, err = sockdiag.Open()
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.UnixListeners()
}
