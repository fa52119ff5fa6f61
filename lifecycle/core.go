package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/tracing"
)

// core is what every noun service shares, held by pointer, never copied:
// the options, the logger and clock, the per-name locks, the idle leases,
// the queue of heavy work, and the one authorization rule (access). Its methods are the steps every
// service takes on a sandbox's row.
type core struct {
	opts   Options
	log    *slog.Logger
	now    func() time.Time
	locks  keyedMutex
	leases leases
	// heavy queues the heavy node calls (see heavy.go).
	heavy *heavy
	// crashHook, set only by tests (export_test.go), is called at every
	// crash point; see crash.
	crashHook func(point string)
}

// newID returns a fresh sandbox id: 'x' and 15 lowercase base32 characters
// (75 random bits), a valid runtime id, layer key and DNS label.
func newID() string {
	var b [10]byte
	rand.Read(b[:])
	return "x" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:15]
}

// detached returns the context of an operation's durable steps: not
// cancelled when its caller goes away, since half an operation is worse
// than a late one, and bounded by startTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
}

// stillCreating is the unavailable of an operation on a sandbox (ref, as
// its caller wrote it) whose create has not finished.
func stillCreating(ref string) error {
	return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q is still being created", ref).WithHint("retry in a moment")
}

// slot waits in the heavy queue for a slot to start sb in (the warm
// pool's members in the background lane), with the caller's ctx: call it
// before detached, holding sb's name lock. The caller calls release once
// the start is done.
func (s *core) slot(ctx context.Context, sb sandbox.Sandbox) (release func(), err error) {
	return s.heavy.acquire(ctx, job{tenant: sb.Tenant, background: isPoolMember(sb)})
}

// crash marks a point between two durable steps of an operation: a daemon
// killed there must leave a state that Recover finishes or rolls back. The
// crash tests kill the operation at each point through crashHook; in
// production it does nothing.
func (s *core) crash(point string) {
	if s.crashHook != nil {
		s.crashHook(point)
	}
}

// internal logs cause and returns the opaque internal error.
func (s *core) internal(what string, cause error) error {
	s.log.Error("internal error", "op", what, "err", cause)
	return sandbox.AsError(cause)
}

// locked returns the sandbox ref names for p (see access) with its name's
// lock held: unlock releases it. The lock is taken before the row is
// read, so that the caller acts on the row as it stands.
func (s *core) locked(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, func(), error) {
	a := s.access(p)
	t, err := a.locate(ref)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	unlock := s.locks.lock(t.key())
	sb, err := a.sandbox(ctx, t)
	if err != nil {
		unlock()
		return sandbox.Sandbox{}, nil, err
	}
	return sb, unlock, nil
}

// current reads sb's row again under its name's lock, for an operation
// that found sb earlier without the lock (a wake, a sleep, the sweep): the
// row as it stands, and unlock. not_found when sb went or another sandbox
// took its name meanwhile.
func (s *core) current(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, func(), error) {
	unlock := s.locks.lock(sandbox.Ref(sb.Tenant, sb.Name))
	cur, err := s.opts.Store.Sandboxes().Get(ctx, sb.Tenant, sb.Name)
	if err != nil || cur.ID != sb.ID {
		unlock()
		return sandbox.Sandbox{}, nil, notFound(sb.Name)
	}
	return cur, unlock, nil
}

// setStatus records a status change when it is one.
func (s *core) setStatus(ctx context.Context, sb sandbox.Sandbox, status sandbox.Status, reason string) {
	if sb.Status == status && sb.Reason == reason {
		return
	}
	sb.Status, sb.Reason, sb.UpdatedAt = status, reason, s.now().UTC()
	if err := s.opts.Store.Sandboxes().Update(ctx, sb); err != nil {
		s.log.Error("update status", "sandbox", sb.Name, "err", err)
		return
	}
	s.log.Info("sandbox status", "sandbox", sb.Name, "status", status, "reason", reason)
}

// agentErr returns err, an answer of sb's agent to op, and logs it when it
// is internal: the cause the agent sent with it is for this log only (see
// agent.Client), the caller sees "internal error".
func (s *core) agentErr(op string, sb sandbox.Sandbox, err error) error {
	if err != nil && sandbox.ErrorCode(err) == sandbox.CodeInternal && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("internal error in a sandbox's agent", "sandbox", sb.Name, "op", op, "err", err)
	}
	return err
}

// keyedMutex serializes operations on one sandbox name of one tenant
// (keyed TENANT/NAME).
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// tracer makes lifecycle's spans (see package tracing).
var tracer = tracing.Tracer("github.com/hearth/hearth/lifecycle")

// mine reports whether sb runs on this node (see Options.NodeName).
func (s *core) mine(sb sandbox.Sandbox) bool { return sb.Node == s.opts.NodeName }

// movingHere says whether sb's row says it is moving to this node (a
// move's, or a fork's that its checkpoint's node sends).
func (s *core) movingHere(sb sandbox.Sandbox) bool {
	_, ok := movingToNode(sb.Reason, s.opts.NodeName)
	return ok
}

// elsewhere is the error of a call on sb, which another node runs: the
// door sends the call to that node (details node), or, when it cannot,
// the caller gets it.
func elsewhere(ref string, sb sandbox.Sandbox) error {
	return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q runs on node %s, which this daemon does not reach", ref, sb.Node).
		WithHint("send the call to a daemon that reaches node %s, or retry", sb.Node).With("node", sb.Node)
}

// pressurePercent is the share of MemTotal below which MemAvailable means
// memory pressure: the warm pool shrinks and stops refilling, and idle
// sandboxes are put to sleep sooner (see roomMaker).
const pressurePercent = 10

// underPressure reports whether the node's available memory is below
// pressurePercent of its total, as its MemInfo tells. A node that does
// not know, or fails to tell, is under no pressure.
func (s *core) underPressure(ctx context.Context) bool {
	avail, total, err := s.opts.Node.MemInfo(ctx)
	if err != nil {
		s.log.Warn("read the node's memory info", "err", err)
		return false
	}
	return total > 0 && avail*100 < total*pressurePercent
}
