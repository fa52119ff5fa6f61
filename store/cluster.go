package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hearth/hearth/policy"
)

// The views in this file are what lets several daemons share one store
// and behave as one: a tenant's admissions decided under one lock, the
// create-rate state every daemon counts against, the daemons themselves
// (nodes) with their heartbeats, leases that elect one daemon for a job,
// and notices of changes pushed to every daemon. In an embedded store with
// one daemon they hold for that daemon alone.

// Admissions keeps what deciding a tenant's creates needs beyond the
// sandboxes themselves: a lock per tenant, and each agent identity's
// create-rate state (policy.Rate: its recent creates, its breaker and its
// last alarm), which outlives a daemon's restart.
type Admissions interface {
	// Lock takes tenant's admission lock, exclusive across every daemon
	// of the store, waiting until it is free or ctx is done (then ctx's
	// error, holding nothing). The lock is held until unlock is called,
	// the store is closed, or the process holding it dies. unlock may be
	// called more than once; only the first call counts. An empty tenant
	// is an error.
	Lock(ctx context.Context, tenant string) (unlock func(), err error)
	// Rate returns tenant's agent's create-rate state: the zero Rate when
	// none is stored.
	Rate(ctx context.Context, tenant, agent string) (policy.Rate, error)
	// SetRate stores r as tenant's agent's create-rate state, replacing
	// any. Times come back as Store's times do. An empty tenant is an
	// error (agent may be empty: a tenant admin's creates count under
	// it).
	SetRate(ctx context.Context, tenant, agent string, r policy.Rate) error
}

// Node is one daemon instance of a store, as its heartbeats describe it.
type Node struct {
	// Name is unique in the store (sandbox.ValidateNodeName's rules).
	Name string
	// Address is where the other nodes reach this one ("host:port"),
	// empty when it takes no calls from them.
	Address string
	// Version is the hearth version the node runs.
	Version string
	// Instance names the node's data dir (package instance): a daemon
	// that restarts on it is the same node, another with the node's name
	// is not.
	Instance string
	// StartedAt is when the node's process started, by its own clock.
	StartedAt time.Time
	// HeartbeatAt is the store's time of the node's last heartbeat.
	HeartbeatAt time.Time
	// NodeTime is the node's own clock at that heartbeat: its difference
	// from HeartbeatAt is the node's clock skew (plus the heartbeat's
	// latency).
	NodeTime time.Time
	// Credential is the SHA-256 (hex) of the secret the node proves itself
	// with to the others when it forwards them a call, and
	// PreviousCredential that of the secret before the last rotation,
	// still good for calls already under way. The secrets themselves never
	// leave the node's memory but to its peers.
	Credential, PreviousCredential string
}

// Nodes keeps the daemons of the store, unique by name. Every time it
// sets is the store's own clock (Now), so that nodes whose clocks
// disagree still agree on who is alive.
type Nodes interface {
	// Heartbeat records n as alive: it creates n's row or replaces its
	// Address, Version, Instance, StartedAt, NodeTime and credentials, and sets
	// HeartbeatAt to the store's now. It returns the row as stored. An empty Name is an
	// error.
	Heartbeat(ctx context.Context, n Node) (Node, error)
	// Get returns node name; ErrNotFound if missing.
	Get(ctx context.Context, name string) (Node, error)
	// List returns every node, by name. None is an empty slice.
	List(ctx context.Context) ([]Node, error)
	// Delete removes node name; ErrNotFound if missing.
	Delete(ctx context.Context, name string) error
	// Now is the store's clock.
	Now(ctx context.Context) (time.Time, error)
}

// Lease is a named, timed right held by one holder (a node): the daemon
// that holds lease "loops" runs the store-wide background loops.
type Lease struct {
	Name   string
	Holder string
	// Until is the store's time the lease lapses unless renewed.
	Until time.Time
}

// Leases keeps the leases, unique by name, timed by the store's clock.
type Leases interface {
	// Acquire takes lease name for holder, or renews it, for ttl from the
	// store's now. It succeeds, returning the new lease and true, when the
	// lease is free, has lapsed (Until not after now) or is holder's
	// already; otherwise it changes nothing and returns the current lease
	// and false. Two holders acquiring at once never both succeed. An
	// empty name or holder, or a ttl that is not positive, is an error.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, bool, error)
	// Release gives up holder's lease name at once, so that another may
	// take it without waiting for it to lapse. A lease holder does not
	// hold (or no lease) is left as it is, and is not an error.
	Release(ctx context.Context, name, holder string) error
	// Get returns lease name, lapsed or not; ErrNotFound if none was ever
	// acquired or it was released.
	Get(ctx context.Context, name string) (Lease, error)
}

// MaxNoticePayload is the longest payload Changes.Notify sends.
const MaxNoticePayload = 7000

// Changes pushes notices of changes to every daemon of the store, so
// that what one daemon changes (a token revoked, a policy updated, a
// breaker opened) the others act on at once rather than at their next
// poll.
type Changes interface {
	// Notify sends payload on topic to every Listen of topic, in every
	// daemon of the store, this one included, once the call returns. A
	// topic is 1–32 bytes of [a-z0-9_.-]; a payload at most
	// MaxNoticePayload bytes, without NUL. Notices are a hint, never the
	// state: delivery is at most once, in order per sender.
	Notify(ctx context.Context, topic, payload string) error
	// Listen returns a channel of the payloads sent on topic from now on,
	// closed when ctx is done. A listener that may have missed notices
	// (its connection to the store was lost and came back, or it fell far
	// behind) receives "" instead: anything on topic may have changed.
	Listen(ctx context.Context, topic string) (<-chan string, error)
}

// CheckNotice returns an error for a topic or payload that Changes.Notify
// refuses, so that every store refuses the same ones.
func CheckNotice(topic, payload string) error {
	if len(topic) == 0 || len(topic) > 32 {
		return fmt.Errorf("notice topic %q: want 1-32 bytes", topic)
	}
	for _, c := range []byte(topic) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("notice topic %q: only a-z, 0-9, '_', '.' and '-'", topic)
		}
	}
	if len(payload) > MaxNoticePayload {
		return fmt.Errorf("notice on %q: payload of %d bytes is over %d", topic, len(payload), MaxNoticePayload)
	}
	if strings.IndexByte(payload, 0) >= 0 {
		return fmt.Errorf("notice on %q: payload holds a NUL byte", topic)
	}
	return nil
}

// rateJSON is how a store keeps a policy.Rate: its times in UTC.
type rateJSON struct {
	Recent        []time.Time `json:"recent,omitempty"`
	OpenUntil     time.Time   `json:"open_until,omitzero"`
	HalfOpenSince time.Time   `json:"half_open_since,omitzero"`
	AlarmedAt     time.Time   `json:"alarmed_at,omitzero"`
}

// EncodeRate is r as the JSON a store keeps (see Admissions.SetRate).
func EncodeRate(r policy.Rate) ([]byte, error) {
	j := rateJSON{OpenUntil: utc(r.OpenUntil), HalfOpenSince: utc(r.HalfOpenSince), AlarmedAt: utc(r.AlarmedAt)}
	for _, t := range r.Recent {
		j.Recent = append(j.Recent, utc(t))
	}
	return json.Marshal(j)
}

// DecodeRate reads what EncodeRate wrote; its times come back in UTC.
func DecodeRate(b []byte) (policy.Rate, error) {
	var j rateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return policy.Rate{}, fmt.Errorf("stored create rate: %w", err)
	}
	r := policy.Rate{OpenUntil: utc(j.OpenUntil), HalfOpenSince: utc(j.HalfOpenSince), AlarmedAt: utc(j.AlarmedAt)}
	for _, t := range j.Recent {
		r.Recent = append(r.Recent, utc(t))
	}
	return r, nil
}

// utc is t in UTC without a monotonic reading; the zero time stays zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Round(0).UTC()
}
