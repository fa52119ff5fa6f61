package lifecycle

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Room on a full host. The node refuses a start the host has no memory
// for (node.HostLimitError; see runner.startSpec), and idle sandboxes are
// put to sleep to make room: every sweep while the node is under memory
// pressure (core.underPressure, the warm pool's rule too: MemAvailable
// below a tenth of MemTotal), and at once, in the background, when a
// start was refused, so that the caller's retry finds room. The
// sandboxes slept are this node's running ones with no command and no
// call for at least roomIdle, the longest idle first, roomBatch a round;
// a round a refused start began takes that start's tenant's own idle
// sandboxes first, so that a tenant with idle sandboxes of its own makes
// its room from them before it reaches another's. That is what idleness
// earns anyway (sleepIdle), only sooner: a sandbox keeps its disk and
// wakes on its owner's next call. A sandbox busier than that is never
// touched, whoever's start asked for room.
const (
	roomIdle  = time.Minute
	roomBatch = 8
	// roomTimeout bounds a round started by a refused start.
	roomTimeout = 2 * time.Minute
)

// roomMaker puts idle sandboxes to sleep for memory. A round started by kick
// runs alone; the sweep's own rounds run on the sweep's goroutine.
type roomMaker struct {
	*core
	sandboxes *Sandboxes
	kicked    atomic.Bool
}

// kick starts a round in the background that prefers tenant's idle
// sandboxes, unless one that kick started is under way: a start of
// tenant's was refused for memory.
func (r *roomMaker) kick(ctx context.Context, tenant string) {
	if !r.kicked.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.kicked.Store(false)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), roomTimeout)
		defer cancel()
		r.make(ctx, "a start found the host short of memory", tenant)
	}()
}

// make puts to sleep up to roomBatch of this node's running sandboxes
// idle for at least roomIdle, saying why, and returns how many it put to
// sleep: tenant's first ("" prefers none), then the rest, each the
// longest idle first.
func (r *roomMaker) make(ctx context.Context, why, tenant string) int {
	rows, err := r.opts.Store.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		r.log.Error("make room: list", "err", err)
		return 0
	}
	type idle struct {
		sb    sandbox.Sandbox
		since time.Time
	}
	now := r.now()
	var idles []idle
	for _, sb := range rows {
		if !r.mine(sb) || isPoolMember(sb) || sb.Status != sandbox.StatusRunning || now.Sub(sb.CreatedAt) < roomIdle {
			continue
		}
		if since, ok := r.leases.idleSince(sb.ID, now); ok && now.Sub(since) >= roomIdle {
			idles = append(idles, idle{sb, since})
		}
	}
	others := func(c idle) int { // 0 for tenant's, 1 for the rest
		if tenant != "" && c.sb.Tenant == tenant {
			return 0
		}
		return 1
	}
	slices.SortFunc(idles, func(a, b idle) int {
		return cmp.Or(cmp.Compare(others(a), others(b)), cmp.Compare(a.since.UnixNano(), b.since.UnixNano()))
	})
	slept := 0
	for _, c := range idles[:min(len(idles), roomBatch)] {
		reason := fmt.Sprintf("idle for %s when %s", now.Sub(c.since).Round(time.Second), why)
		if _, err := r.sandboxes.sleep(ctx, c.sb, reason); err != nil {
			r.log.Error("make room: sleep", "sandbox", c.sb.Name, "err", err)
			continue
		}
		slept++
	}
	if len(idles) > 0 {
		r.log.Info("made room: idle sandboxes put to sleep", "slept", slept, "idle", len(idles), "why", why)
	}
	return slept
}
