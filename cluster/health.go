package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Health reports the store's nodes, which are alive and which leads, for
// GET /v1/health; storeName names the store.
func (m *Member) Health(ctx context.Context, storeName string) (sandbox.ClusterHealth, error) {
	h := sandbox.ClusterHealth{Store: storeName, Node: m.opts.Node, Nodes: []sandbox.NodeHealth{}}
	var err error
	if h.Schema, h.SchemaKnown, err = m.opts.Store.Schema(ctx); err != nil {
		return h, err
	}
	now, nodes, err := m.nodes(ctx)
	if err != nil {
		return h, err
	}
	for _, n := range nodes {
		h.Nodes = append(h.Nodes, sandbox.NodeHealth{
			Name: n.Name, Address: n.Address, Version: n.Version, HeartbeatAt: n.HeartbeatAt,
			Live:        now.Sub(n.HeartbeatAt) <= m.opts.DeadAfter,
			ClockSkewMS: n.NodeTime.Sub(n.HeartbeatAt).Milliseconds(),
		})
	}
	l, err := m.opts.Store.Leases().Get(ctx, LoopsLease)
	switch {
	case err == nil && l.Until.After(now):
		h.Leader = l.Holder
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return h, err
	}
	return h, nil
}

// nodes are the store's nodes, and its time.
func (m *Member) nodes(ctx context.Context) (time.Time, []store.Node, error) {
	now, err := m.opts.Store.Nodes().Now(ctx)
	if err != nil {
		return time.Time{}, nil, err
	}
	nodes, err := m.opts.Store.Nodes().List(ctx)
	return now, nodes, err
}

// livePeers are the names of the store's live nodes other than this one
// that have an address, by name.
func (m *Member) livePeers(ctx context.Context) ([]string, error) {
	now, nodes, err := m.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		if n.Name != m.opts.Node && n.Address != "" && now.Sub(n.HeartbeatAt) <= m.opts.DeadAfter {
			out = append(out, n.Name)
		}
	}
	return out, nil
}

// Down returns why node's sandboxes are unavailable, "" while it is
// alive: it stopped heartbeating, or the store does not know it. An
// answer the store gave is reused for downTTL, a fraction of the time a
// node takes to count as down, so that calls (a warm-pool claim, a list)
// cost no store round trips for it; the store's own trouble is never
// reused.
func (m *Member) Down(ctx context.Context, node string) string {
	m.mu.Lock()
	d, ok := m.downs[node]
	m.mu.Unlock()
	if ok && time.Since(d.at) < downTTL {
		return d.why
	}
	why, err := m.down(ctx, node)
	if err != nil {
		return "" // the store's trouble, not the node's: the row's status stands
	}
	m.mu.Lock()
	if m.downs == nil {
		m.downs = map[string]downness{}
	}
	m.downs[node] = downness{why: why, at: time.Now()}
	m.mu.Unlock()
	return why
}

// downTTL is how long Down reuses the store's answer.
const downTTL = time.Second

// downness is Down's answer for a node, and when the store gave it.
type downness struct {
	why string
	at  time.Time
}

// down is Down's answer from the store.
func (m *Member) down(ctx context.Context, node string) (string, error) {
	n, err := m.opts.Store.Nodes().Get(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Sprintf("node %s, which ran it, is not known to the store", node), nil
	}
	if err != nil {
		return "", err
	}
	now, err := m.opts.Store.Nodes().Now(ctx)
	if err != nil {
		return "", err
	}
	if now.Sub(n.HeartbeatAt) <= m.opts.DeadAfter {
		return "", nil
	}
	return fmt.Sprintf("node %s, which runs it, stopped heartbeating at %s", node, n.HeartbeatAt.UTC().Format(time.RFC3339)), nil
}
