package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/hearth/hearth/cluster"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// joinCluster makes the daemon a node of its store (see package cluster):
// it refuses a node name that another live daemon of the store uses (one
// of another data dir: a restart of this one is this node), and records the first heartbeat, so that the other
// nodes can verify this one's credential and reach it at its advertised
// address (ln's, or --advertise) before it serves. member.Run does the
// rest.
func joinCluster(ctx context.Context, cfg serveConfig, db store.Store, instance string, ln net.Listener, log *slog.Logger) (*cluster.Member, error) {
	addr := cfg.advertise
	if addr == "" {
		addr = advertised(ln.Addr())
	}
	opts := cluster.Options{Store: db, Node: cfg.node, Address: addr, Version: version(), Instance: instance, Logger: log.With("component", "cluster")}
	if cfg.storeURL == "" {
		// SQLite: this daemon is the store's only node, and leads; a
		// heartbeat every few seconds keeps its health row current
		// without a write (an fsync) every second.
		opts.Interval, opts.LeaseTTL, opts.DeadAfter = 10*time.Second, time.Minute, time.Minute
	}
	m := cluster.New(opts)
	if other, err := db.Nodes().Get(ctx, cfg.node); err == nil && other.Instance != instance {
		if now, err := db.Nodes().Now(ctx); err == nil && now.Sub(other.HeartbeatAt) <= cluster.DefaultDeadAfter {
			return nil, fmt.Errorf("node %s is already running at %s (its last heartbeat was %s ago): give this daemon another name with --node",
				cfg.node, other.Address, now.Sub(other.HeartbeatAt).Round(time.Millisecond))
		}
	}
	if err := m.Join(ctx); err != nil {
		return nil, fmt.Errorf("join the store's nodes: %w", err)
	}
	return m, nil
}

// advertised is where the other nodes reach a daemon listening on addr:
// addr itself, or, when it is every address of the host (0.0.0.0, ::),
// the host's name with addr's port.
func advertised(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return net.JoinHostPort(host, fmt.Sprint(tcp.Port))
}

// pruneAudit deletes the audit events older than retention, daily, while
// this daemon runs the store-wide loops (leading): one daemon of a store
// prunes, and the next leader takes over. Deleting is idempotent, so a
// change of leader at worst prunes twice.
func pruneAudit(ctx context.Context, db store.Store, retention time.Duration, leading func() bool, log *slog.Logger) {
	var last time.Time
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		if leading() && time.Since(last) >= 24*time.Hour {
			last = time.Now()
			before := last.Add(-retention)
			n, err := db.Audit().DeleteBefore(ctx, before)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Error("audit retention: deleting old events failed", "err", err)
				last = time.Time{} // try again at the next tick
			case n > 0:
				log.Info("audit retention: deleted old events", "events", n, "before", before.UTC().Format(time.RFC3339))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// doorCluster is what the doors ask of the daemon's node: its health for
// GET /v1/health, and, on a shared store, its forwarder.
type doorCluster struct {
	member *cluster.Member
	store  string             // the store's name on the start line
	fwd    *cluster.Forwarder // on a shared store; nil otherwise
	// imageNode, on a fleet's control plane, names the node that makes
	// an image a call asks for (door.Options.ImageNode); nil elsewhere.
	imageNode func(ctx context.Context) (string, error)
}

// newDoorCluster is the doors' view of member's node on the store where,
// with its forwarder fwd (nil on SQLite); on a control plane whose fleet
// names the node that makes images, calls that make one go there.
func newDoorCluster(member *cluster.Member, where string, fwd *cluster.Forwarder, fleet lifecycle.Fleet) doorCluster {
	nodes := doorCluster{member: member, store: where, fwd: fwd}
	if f, ok := fleet.(imageMaker); ok && fwd != nil {
		nodes.imageNode = f.ImageNode
	}
	return nodes
}

// imageMaker is a fleet that names the node a control plane's image
// calls go to (kube.Fleet).
type imageMaker interface {
	ImageNode(ctx context.Context) (string, error)
}

func (c doorCluster) health(ctx context.Context) (sandbox.ClusterHealth, error) {
	return c.member.Health(ctx, c.store)
}

// mcpForwarder is fwd for the MCP door: nil (no interface holding a nil
// pointer) when there is none.
func mcpForwarder(fwd *cluster.Forwarder) mcpserver.Forwarder {
	if fwd == nil {
		return nil
	}
	return fwd
}

// pickLive is lifecycle's Options.PickNode on a shared store without a
// fleet: a live node other than the sandbox's, the first by name. (On
// Kubernetes a node's Fleet chooses instead; see kubeWiring.)
func pickLive(m *cluster.Member, storeName string) func(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	return func(ctx context.Context, sb sandbox.Sandbox) (string, error) {
		h, err := m.Health(ctx, storeName)
		if err != nil {
			return "", sandbox.Errorf(sandbox.CodeUnavailable, "read the store's nodes: %v", err).WithHint("retry shortly")
		}
		for _, n := range h.Nodes {
			if n.Live && n.Name != sb.Node && n.Address != "" {
				return n.Name, nil
			}
		}
		return "", sandbox.Errorf(sandbox.CodeUnavailable, "no other live node of the store can take sandbox %q", sb.Name).
			WithHint("start another daemon on the store (hearth serve --store …), or name the node")
	}
}

// forwarding is the forwarder of a daemon on a shared store (nil on
// SQLite: only a shared store has other nodes to send calls and moves
// to), with opts' Move, PickNode and FetchLayer set to it, waking ahead
// of calls on a fleet (cluster.Forwarder.SetWakeMoves); svc returns the
// service once lifecycle.New made it (the forwarder asks it where a
// sandbox is).
func forwarding(cfg serveConfig, member *cluster.Member, storeName string, opts *lifecycle.Options, svc func() *lifecycle.Service) *cluster.Forwarder {
	if cfg.storeURL == "" {
		return nil
	}
	fwd := cluster.NewForwarder(member, func(ctx context.Context, p sandbox.Principal, ref string) string {
		return svc().Sandboxes.NodeOf(ctx, p, ref)
	})
	opts.Move, opts.PickNode, opts.FetchLayer = fwd.MoveSnapshot, pickLive(member, storeName), fwd.FetchLayer
	// A fleet's nodes move a sandbox to wake it where they are full.
	fwd.SetWakeMoves(cfg.kube.role != kubeNone)
	return fwd
}
