package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Per-sandbox usage: the node samples what each of its running sandboxes
// uses (node.Node.Meter: CPU time, memory, network bytes) every
// UsageInterval and keeps each one's samples for usageKept, in memory
// only; a call adds a fresh sample (with the process count, which may
// cost the runtime a process start) and the disk its root holds.

const (
	// defaultUsageInterval is Options.UsageInterval's default.
	defaultUsageInterval = 10 * time.Second
	// usageKept is how long samples are kept.
	usageKept = time.Hour
)

// usageSample is one sample as kept: 56 bytes, an hour of them at the
// default interval 20 KiB a sandbox.
type usageSample struct {
	at         int64 // unix nanoseconds
	cpuNanos   uint64
	memory     int64
	memoryPeak int64
	workingSet int64
	rx, tx     uint64
}

// usageSeries holds the samples of running sandboxes by id, oldest
// first. It is safe for concurrent use.
type usageSeries struct {
	mu sync.Mutex
	m  map[string][]usageSample
	// refs are the sandboxes' tenant and name, by id.
	refs map[string][2]string
}

// add appends s to the samples of sb and drops those older than
// usageKept.
func (u *usageSeries) add(sb sandbox.Sandbox, s usageSample) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m, u.refs = map[string][]usageSample{}, map[string][2]string{}
	}
	id := sb.ID
	u.refs[id] = [2]string{sb.Tenant, sb.Name}
	list := u.m[id]
	cut := s.at - int64(usageKept)
	i := 0
	for i < len(list) && list[i].at < cut {
		i++
	}
	u.m[id] = append(list[i:], s)
}

// since returns id's samples at or after t, oldest first, and the last
// sample before them (for the first one's CPU rate), if any.
func (u *usageSeries) since(id string, t time.Time) (before *usageSample, after []usageSample) {
	u.mu.Lock()
	defer u.mu.Unlock()
	list := u.m[id]
	i, _ := slices.BinarySearchFunc(list, t.UnixNano(), func(s usageSample, at int64) int {
		return cmpInt(s.at, at)
	})
	if i > 0 {
		b := list[i-1]
		before = &b
	}
	return before, slices.Clone(list[i:])
}

// keep forgets the samples of every sandbox not in ids.
func (u *usageSeries) keep(ids map[string]bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for id := range u.m {
		if !ids[id] {
			delete(u.m, id)
			delete(u.refs, id)
		}
	}
}

// LatestUsage is one running sandbox's latest sample, for the per-sandbox
// metrics.
type LatestUsage struct {
	ID, Tenant, Name string
	sandbox.UsageSample
}

// Latest returns the latest sample of each sandbox this node sampled
// within the last two intervals (those that still run), with its CPU rate
// over the sample before.
func (s *Usage) Latest() []LatestUsage {
	u := &s.samples
	u.mu.Lock()
	defer u.mu.Unlock()
	fresh := s.now().Add(-2 * s.interval()).UnixNano()
	var out []LatestUsage
	for id, list := range u.m {
		n := len(list)
		if n == 0 || list[n-1].at < fresh {
			continue
		}
		var prev *usageSample
		if n > 1 {
			prev = &list[n-2]
		}
		ref := u.refs[id]
		out = append(out, LatestUsage{ID: id, Tenant: ref[0], Name: ref[1], UsageSample: list[n-1].public(prev)})
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Usage samples what this node's running sandboxes use and answers for
// them (see above). It is safe for concurrent use.
type Usage struct {
	*core
	// disk is Sandboxes' cache of measured disk usage.
	disk    *usageCache
	samples usageSeries
}

// sample samples every running sandbox of this node once, and forgets
// the samples of the sandboxes that are gone.
func (s *Usage) sample(ctx context.Context) {
	rows, err := s.opts.Store.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		s.log.Warn("usage: list sandboxes", "err", err)
		return
	}
	known := map[string]bool{}
	for _, sb := range rows {
		if !s.mine(sb) || isPoolMember(sb) {
			continue
		}
		known[sb.ID] = true
		if sb.Status != sandbox.StatusRunning {
			continue
		}
		if u, err := s.opts.Node.Meter(ctx, sb.ID, false); err == nil {
			s.samples.add(sb, sampleOf(u, s.now()))
		} else if !errors.Is(err, node.ErrNotFound) {
			s.log.Debug("usage: sample", "sandbox", sb.Name, "err", err)
			if errors.Is(err, errors.ErrUnsupported) {
				return
			}
		}
	}
	s.samples.keep(known)
}

// loop samples usage every interval until ctx ends.
func (s *Usage) loop(ctx context.Context) {
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sampleOf(u node.Usage, at time.Time) usageSample {
	return usageSample{at: at.UnixNano(), cpuNanos: u.CPUNanos, memory: u.MemoryBytes, memoryPeak: u.MemoryPeakBytes,
		workingSet: u.MemoryWorkingSetBytes, rx: u.NetRxBytes, tx: u.NetTxBytes}
}

// public is s as the API shows it, its CPU rate counted from prev (none:
// 0).
func (s usageSample) public(prev *usageSample) sandbox.UsageSample {
	out := sandbox.UsageSample{
		At:          time.Unix(0, s.at).UTC(),
		CPUSeconds:  float64(s.cpuNanos) / 1e9,
		MemoryBytes: s.memory, MemoryPeakBytes: s.memoryPeak, MemoryWorkingSetBytes: s.workingSet,
		NetRxBytes: s.rx, NetTxBytes: s.tx,
		Processes: -1,
	}
	if prev != nil && s.at > prev.at && s.cpuNanos >= prev.cpuNanos {
		out.CPUCores = float64(s.cpuNanos-prev.cpuNanos) / float64(s.at-prev.at)
	}
	return out
}

// Of is what the sandbox ref names for p uses: a sample taken now,
// with its process count, its root's disk usage and its size's limits;
// and with since not zero, the samples the node kept since then (an hour
// at most), oldest first. A sandbox that does not run has only its disk
// and its past samples.
func (s *Usage) Of(ctx context.Context, p sandbox.Principal, ref string, since time.Time) (sandbox.Usage, error) {
	sb, err := s.access(p).get(ctx, ref)
	if err != nil {
		return sandbox.Usage{}, err
	}
	out := sandbox.Usage{Sandbox: sb.Name, Status: sb.Status, LimitMilliCPU: sb.Resources.MilliCPU,
		LimitMemoryBytes: sb.Resources.MemoryBytes, LimitDiskBytes: sb.Resources.DiskBytes,
		IntervalSeconds: s.interval().Seconds()}
	if sb.Status != sandbox.StatusCreating {
		if out.DiskBytes, err = s.disk.measure(ctx, s.opts.Node, sb.ID, s.now()); err != nil {
			return sandbox.Usage{}, s.internal("measure "+sb.ID, err)
		}
	}
	now := s.now()
	if !since.IsZero() {
		prev, list := s.samples.since(sb.ID, since)
		for _, smp := range list {
			out.Series = append(out.Series, smp.public(prev))
			prev = &smp
		}
	}
	if sb.Status != sandbox.StatusRunning {
		out.At = now.UTC()
		return out, nil
	}
	u, err := s.opts.Node.Meter(ctx, sb.ID, true)
	switch {
	case errors.Is(err, node.ErrNotFound):
		out.At = now.UTC()
		return out, nil
	case errors.Is(err, errors.ErrUnsupported):
		return sandbox.Usage{}, sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %q's node cannot read what its sandboxes use", sb.Name).
			WithHint("its runtime reports no usage")
	case err != nil:
		return sandbox.Usage{}, s.internal("meter "+sb.ID, err)
	}
	cur := sampleOf(u, now)
	// The rate over the last interval at least: a sample taken a moment
	// ago would make it noise.
	prev, _ := s.samples.since(sb.ID, now.Add(-s.interval()/2))
	out.UsageSample = cur.public(prev)
	out.Processes = u.Processes
	return out, nil
}

// interval is how often usage is sampled.
func (s *Usage) interval() time.Duration {
	if s.opts.UsageInterval > 0 {
		return s.opts.UsageInterval
	}
	return defaultUsageInterval
}
