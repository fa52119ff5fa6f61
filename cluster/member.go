// Package cluster makes the daemons of one store (its nodes) behave as
// one: each node heartbeats into the store, proves itself to the others
// with a credential it mints and rotates, and at most one holds the
// store's loops lease, which elects it to run the store-wide background
// jobs; and a call that reaches a node for a sandbox another node runs is
// forwarded there (forward.go).
//
// Every time that decides who is alive or who leads is the store's clock
// (store.Nodes.Now), so nodes whose clocks disagree still agree on both.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hearth/hearth/store"
)

// LoopsLease is the lease whose holder runs the store-wide loops.
const LoopsLease = "loops"

// Defaults for the zero Options.
const (
	DefaultInterval  = time.Second
	DefaultLeaseTTL  = 5 * time.Second
	DefaultDeadAfter = 5 * time.Second
	DefaultRotation  = time.Hour
)

// Options configure a Member.
type Options struct {
	Store store.Store
	// Node is this daemon's node name; Address where the others reach it
	// ("host:port" of its API); Version its hearth version; Instance its
	// data dir's instance name.
	Node, Address, Version, Instance string
	// Interval is how often the node heartbeats and renews its lease.
	Interval time.Duration
	// LeaseTTL is how long the loops lease lasts unrenewed: how soon
	// another node takes the loops when their holder dies.
	LeaseTTL time.Duration
	// DeadAfter is how long after its last heartbeat a node counts as
	// gone: its sandboxes are unavailable.
	DeadAfter time.Duration
	// Rotation is how often the node mints a new credential.
	Rotation time.Duration
	// Logger receives elections and failures; nil discards.
	Logger *slog.Logger
}

// Member is one node's membership in its store's cluster. It is safe for
// concurrent use.
type Member struct {
	opts    Options
	log     *slog.Logger
	started time.Time

	mu       sync.Mutex
	peers    map[string]peer     // the other nodes' credentials, as last read
	downs    map[string]downness // Down's answers, by node
	secret   string              // the current credential's secret
	previous string              // the one before the last rotation
	minted   time.Time           // when secret was minted
	leadTill time.Time           // by this process's clock: when its lease may have lapsed
}

// New returns the membership of opts.Node, with a fresh credential. It
// writes nothing until Join or Run.
func New(opts Options) *Member {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.DeadAfter <= 0 {
		opts.DeadAfter = DefaultDeadAfter
	}
	if opts.Rotation <= 0 {
		opts.Rotation = DefaultRotation
	}
	m := &Member{opts: opts, log: opts.Logger, started: time.Now()}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.secret, m.minted = newSecret(), time.Now()
	return m
}

// Node is the member's node name.
func (m *Member) Node() string { return m.opts.Node }

// Address is where the store's other daemons reach this one.
func (m *Member) Address() string { return m.opts.Address }

// Join records the node's first heartbeat, so that the others can verify
// its credential and reach it before Run's loop has begun.
func (m *Member) Join(ctx context.Context) error {
	_, err := m.heartbeat(ctx)
	return err
}

// Run heartbeats, rotates the credential and contends for the loops lease
// every Interval until ctx ends, then releases the lease.
func (m *Member) Run(ctx context.Context) {
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		m.tick(ctx)
		select {
		case <-ctx.Done():
			m.resign()
			return
		case <-t.C:
		}
	}
}

// tick is one round of Run.
func (m *Member) tick(ctx context.Context) {
	m.mu.Lock()
	if time.Since(m.minted) >= m.opts.Rotation {
		m.previous, m.secret, m.minted = m.secret, newSecret(), time.Now()
	}
	m.mu.Unlock()
	if _, err := m.heartbeat(ctx); err != nil && ctx.Err() == nil {
		m.log.Warn("heartbeat failed", "node", m.opts.Node, "err", err)
	}
	m.contend(ctx)
}

// heartbeat writes the node's row.
func (m *Member) heartbeat(ctx context.Context) (store.Node, error) {
	m.mu.Lock()
	n := store.Node{Name: m.opts.Node, Address: m.opts.Address, Version: m.opts.Version, Instance: m.opts.Instance,
		StartedAt: m.started, NodeTime: time.Now(), Credential: hash(m.secret)}
	if m.previous != "" {
		n.PreviousCredential = hash(m.previous)
	}
	m.mu.Unlock()
	return m.opts.Store.Nodes().Heartbeat(ctx, n)
}

// contend takes or renews the loops lease. Leading holds until the lease
// may lapse by this process's clock, measured from before the renewal was
// sent: a node that cannot reach the store stops leading before another
// can take the lease.
func (m *Member) contend(ctx context.Context) {
	sent := time.Now()
	l, ok, err := m.opts.Store.Leases().Acquire(ctx, LoopsLease, m.opts.Node, m.opts.LeaseTTL)
	m.mu.Lock()
	defer m.mu.Unlock()
	was := time.Now().Before(m.leadTill)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			m.log.Warn("renewing the loops lease failed", "node", m.opts.Node, "err", err)
		}
		return // leading, if it was, until leadTill
	case ok:
		m.leadTill = sent.Add(m.opts.LeaseTTL)
		if !was {
			m.log.Info("this node runs the store-wide loops", "node", m.opts.Node, "lease_until", l.Until)
		}
	default:
		m.leadTill = time.Time{}
		if was {
			m.log.Warn("another node took the store-wide loops", "node", m.opts.Node, "leader", l.Holder)
		}
	}
}

// resign releases the lease, so that another node takes the loops at
// once rather than when it lapses.
func (m *Member) resign() {
	m.mu.Lock()
	m.leadTill = time.Time{}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = m.opts.Store.Leases().Release(ctx, LoopsLease, m.opts.Node)
}

// Leading reports whether this node holds the loops lease now.
func (m *Member) Leading() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Now().Before(m.leadTill)
}

// Secret is the credential this node proves itself with now.
func (m *Member) Secret() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.secret
}

// ErrUnknownNode is returned by Verify for a node the store has no row of.
var ErrUnknownNode = errors.New("cluster: unknown node")

// peer is a node's credential hashes as read from the store at a time.
type peer struct {
	hashes [2]string // current, previous
	at     time.Time
}

// peerTTL is how long a node's credential hashes, once they verified a
// call, are reused: far shorter than a rotation, after which the
// previous secret stays good anyway.
const peerTTL = time.Second

// Verify reports whether secret is node's current or previous credential,
// by the hashes node's heartbeats keep in the store (reused for peerTTL
// once they verified a call, so a forwarded call costs no store round
// trip; a secret they do not verify is checked against the store).
func (m *Member) Verify(ctx context.Context, node, secret string) (bool, error) {
	h := hash(secret)
	m.mu.Lock()
	p, ok := m.peers[node]
	m.mu.Unlock()
	if ok && time.Since(p.at) < peerTTL && matches(h, p.hashes) {
		return true, nil
	}
	n, err := m.opts.Store.Nodes().Get(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return false, ErrUnknownNode
	}
	if err != nil {
		return false, err
	}
	p = peer{hashes: [2]string{n.Credential, n.PreviousCredential}, at: time.Now()}
	if !matches(h, p.hashes) {
		return false, nil
	}
	m.mu.Lock()
	if m.peers == nil {
		m.peers = map[string]peer{}
	}
	m.peers[node] = p
	m.mu.Unlock()
	return true, nil
}

// matches reports whether h is one of hashes (an empty one matches
// nothing), in constant time.
func matches(h string, hashes [2]string) bool {
	ok := false
	for _, want := range hashes {
		if want != "" && subtle.ConstantTimeCompare([]byte(h), []byte(want)) == 1 {
			ok = true
		}
	}
	return ok
}

func newSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
