package load_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
)

// TestSoak is scenario e: A agent identities of two tenants, S sandboxes
// each, make mixed calls for a duration (exec with output, file write and
// read back, checkpoints and their deletion, restores, forks, sleep and
// wake, destroy and re-create) while the daemon is SIGKILLed and
// restarted every P, half the time with calls in flight, half with the
// agents paused just before. Every call succeeds or fails with a code
// (retried while the daemon is down, for at most retryBound). Before each
// kill the soak records what the agents were acknowledged; after each
// restart it checks every sandbox, checkpoint and file. At the end it
// destroys everything and wants nothing of the daemon left on the host
// (processes, runtime sandboxes, cgroups, network namespaces and links,
// mounts of sandboxes, loop devices) and the daemon's RSS within 10% of
// its value after the warm-up.
func TestSoak(t *testing.T) {
	sz := loadSizes(t)
	var dataDir string
	t.Cleanup(func() { wantNoLoopDevice(t, dataDir) }) // runs after the daemon's cleanup
	tg := newTarget(t)
	if tg.d != nil {
		dataDir = tg.d.DataDir
	} else {
		t.Log("load: soak: driving HEARTH_URL's daemon: it is not killed, and its host is not checked for leftovers")
	}
	ctx := ctxFor(t, sz.soakFor+time.Hour)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("HEARTH_LOAD_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("soak: seed %d (HEARTH_LOAD_SEED)", seed)
	s := &soak{t: t, tg: tg, recs: &recorders{m: map[string]*recorder{}}}
	s.agents = s.setUp(ctx, sz, seed)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range s.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.pause.RLock()
				a.step()
				s.pause.RUnlock()
			}
		}()
	}
	start := time.Now()
	warm := s.control(sz, start, rand.New(rand.NewPCG(seed, 1)))
	end := s.rssWindow(rssGap(sz))
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	s.checkAll("at the end")
	s.report(elapsed)
	// The full soak holds the daemon to 10% over its RSS after the
	// warm-up (of the process that runs at the end); the short one, whose
	// last process lives 30 s, to twice it.
	tenths := int64(20) // of the RSS after the warm-up
	if sz.full {
		tenths = 11
	}
	if warm > 0 && end*10 > warm*tenths {
		t.Errorf("the daemon's RSS at the end is %d KiB, more than %d%% over its %d KiB after the warm-up", end>>10, tenths*10-100, warm>>10)
	}
	s.destroyAll(ctx)
	s.wantNoLeftovers()
	t.Logf("load: soak: %d agents × %d sandboxes for %s, %d kills: %d calls, %d failures, %d uncoded, RSS %d KiB after the warm-up, %d KiB at the end",
		sz.soakAgents, sz.soakBoxes, elapsed.Round(time.Second), s.kills, s.calls(), s.failures.Load(), s.uncoded(), warm>>10, end>>10)
}

// soak is the state of TestSoak.
type soak struct {
	t      *testing.T
	tg     *target
	agents []*soakAgent
	recs   *recorders
	// pause: each step holds it for reading; the controller takes it to
	// record, kill quietly and check.
	pause    sync.RWMutex
	kills    int
	failures atomic.Int64
}

// fail reports a failure of an agent, at most 50 of them in full.
func (s *soak) fail(format string, args ...any) {
	if n := s.failures.Add(1); n <= 50 {
		s.t.Errorf(format, args...)
	} else if n == 51 {
		s.t.Errorf("more failures follow; only their count is reported")
	}
}

// setUp makes the tenants (two, room for every create and no rate
// alarm), the agents with their tokens, and each agent's sandboxes.
func (s *soak) setUp(ctx context.Context, sz sizes, seed uint64) []*soakAgent {
	t := s.t
	admin := s.tg.client("").Admin()
	quota, alarm, share := 2*sz.soakBoxes+2, 10000, 100
	tenants := []string{s.tg.name("ta"), s.tg.name("tb")}
	for _, name := range tenants {
		_, err := admin.CreateTenant(ctx, sandbox.Tenant{Name: name,
			Allocation: sandbox.Resources{MilliCPU: 1 << 30, MemoryBytes: 1 << 50, DiskBytes: 1 << 50},
			Policy:     sandbox.PolicyOverrides{AgentQuota: &quota, AlarmCreatesPerMinute: &alarm, AgentSharePercent: &share}})
		if err != nil {
			t.Fatalf("CreateTenant(%s) = %v", name, err)
		}
	}
	agents := make([]*soakAgent, sz.soakAgents)
	for i := range agents {
		a := &soakAgent{name: fmt.Sprintf("a%d", i), tenant: tenants[i%2], tg: s.tg, recs: s.recs, fail: s.fail,
			rng: rand.New(rand.NewPCG(seed, uint64(i)+2))}
		if _, err := admin.CreateAgent(ctx, sandbox.Agent{Name: a.name, Tenant: a.tenant}); err != nil {
			t.Fatalf("CreateAgent(%s) = %v", a.name, err)
		}
		tok, _, err := admin.CreateToken(ctx, sandbox.TokenRequest{Tenant: a.tenant, Agent: a.name, Role: sandbox.RoleAgent})
		if err != nil {
			t.Fatalf("CreateToken(%s) = %v", a.name, err)
		}
		a.token = tok
		for j := range sz.soakBoxes {
			a.boxes = append(a.boxes, &soakBox{name: fmt.Sprintf("s%d", j)})
		}
		agents[i] = a
	}
	parallel(len(agents), 4, func(i int) {
		for _, b := range agents[i].boxes {
			if err := agents[i].create(b); err != nil {
				agents[i].fail("set up agent %s: %v", agents[i].name, err)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	return agents
}

// control runs the soak's clock in the test's goroutine: the warm-up,
// then a kill and restart every P until the duration ends (with P = 0,
// none: the daemon's RSS is logged every minute instead). It returns the
// RSS of the daemon running at the end, read a warm-up after it started:
// a reading of the same process as the one at the end, since a process's
// heap says nothing about another's.
func (s *soak) control(sz sizes, start time.Time, r *rand.Rand) (warm int64) {
	warmUp := time.Minute
	if sz.soakKill > 0 {
		warmUp = min(sz.soakKill/2, warmUp)
	}
	time.Sleep(warmUp)
	warm = s.rssWindow(rssGap(sz))
	s.t.Logf("soak: the daemon's RSS after a %s warm-up: %d KiB", warmUp, warm>>10)
	if sz.soakKill == 0 {
		for at := start.Add(2 * warmUp); at.Before(start.Add(sz.soakFor)); at = at.Add(warmUp) {
			time.Sleep(time.Until(at))
			s.t.Logf("soak: the daemon's RSS at %s: %d KiB", at.Sub(start).Round(time.Second), s.rss()>>10)
		}
	}
	for next := start.Add(sz.soakKill); sz.soakKill > 0 && next.Before(start.Add(sz.soakFor)); next = next.Add(sz.soakKill) {
		time.Sleep(time.Until(next))
		if s.tg.d == nil {
			s.checkAll(fmt.Sprintf("at %s (no kill: not our daemon)", time.Since(start).Round(time.Second)))
			continue
		}
		s.killAndCheck(start, r)
		if next.Add(warmUp).Before(start.Add(sz.soakFor)) {
			time.Sleep(time.Until(next.Add(warmUp)))
			warm = s.rssWindow(rssGap(sz))
			s.t.Logf("soak: the new daemon's RSS after a %s warm-up: %d KiB", warmUp, warm>>10)
		}
	}
	time.Sleep(time.Until(start.Add(sz.soakFor)))
	return warm
}

// killAndCheck kills the daemon, with the agents paused after recording
// what they were acknowledged (every other kill) or with calls in flight,
// restarts it and checks everything recorded.
func (s *soak) killAndCheck(start time.Time, r *rand.Rand) {
	s.kills++
	quiet := s.kills%2 == 1
	s.pause.Lock()
	boxes, files, cks := 0, 0, 0
	for _, a := range s.agents {
		b, f, c := a.record()
		boxes, files, cks = boxes+b, files+f, cks+c
	}
	if !quiet {
		s.pause.Unlock()
		time.Sleep(time.Duration(r.IntN(1000)) * time.Millisecond)
	}
	before := s.rss()
	killed := time.Now()
	s.tg.restart()
	s.t.Logf("soak: kill %d at %s (%s), RSS %d KiB before it; recorded %d sandboxes, %d files, %d checkpoints; listening again after %s",
		s.kills, killed.Sub(start).Round(time.Second), map[bool]string{true: "agents paused", false: "calls in flight"}[quiet],
		before>>10, boxes, files, cks, time.Since(killed).Round(time.Millisecond))
	if quiet {
		s.pause.Unlock()
	}
	s.checkAll(fmt.Sprintf("after kill %d", s.kills))
}

// checkAll pauses the agents and checks what each was acknowledged.
func (s *soak) checkAll(when string) {
	s.pause.Lock()
	defer s.pause.Unlock()
	before := s.failures.Load()
	checked := time.Now()
	var wg sync.WaitGroup
	for _, a := range s.agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.verify() }()
	}
	wg.Wait()
	boxes, files, cks := 0, 0, 0
	for _, a := range s.agents {
		b, f, c := a.record()
		boxes, files, cks = boxes+b, files+f, cks+c
	}
	s.t.Logf("soak: checked %s in %s: %d sandboxes, %d files, %d checkpoints whole; %d failures",
		when, time.Since(checked).Round(time.Millisecond), boxes, files, cks, s.failures.Load()-before)
}

// rssGap is the time between the readings of an RSS window: a tenth of
// the warm-up (6 s in the full soak).
func rssGap(sz sizes) time.Duration {
	if sz.soakKill > 0 {
		return min(sz.soakKill/2, time.Minute) / 10
	}
	return 6 * time.Second
}

// rssWindow is the median of five readings of the daemon's resident set,
// gap apart: a Go heap under load swings by a tenth within a minute, and a
// single reading would take a swing for a leak.
func (s *soak) rssWindow(gap time.Duration) int64 {
	var r []int64
	for i := range 5 {
		if i > 0 {
			time.Sleep(gap)
		}
		r = append(r, s.rss())
	}
	slices.Sort(r)
	return r[2]
}

// rss is the daemon's resident set in bytes (0 when it is not ours).
func (s *soak) rss() int64 {
	if s.tg.d == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.tg.d.Cmd.Process.Pid))
	if err != nil {
		s.t.Errorf("the daemon's RSS: %v", err)
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	s.t.Errorf("no VmRSS in the daemon's /proc status")
	return 0
}

// report logs each kind of call, and fails the soak for the calls that
// got an error without a code or no answer.
func (s *soak) report(elapsed time.Duration) {
	s.recs.mu.Lock()
	defer s.recs.mu.Unlock()
	for _, op := range slices.Sorted(maps.Keys(s.recs.m)) {
		s.recs.m[op].report(s.t, elapsed)
		s.recs.m[op].wantCoded(s.t)
	}
}

func (s *soak) calls() (n int) {
	for _, r := range s.recs.m {
		n += r.calls
	}
	return n
}

func (s *soak) uncoded() (n int) {
	for _, r := range s.recs.m {
		n += r.errs["uncoded"] + r.errs["no_answer"]
	}
	return n
}

// destroyAll destroys every sandbox of the soak's tenants as the
// operator, and wants none left.
func (s *soak) destroyAll(ctx context.Context) {
	c := s.tg.client("")
	list, err := c.List(ctx)
	if err != nil {
		s.t.Fatalf("List = %v", err)
	}
	mine := func(sb sandbox.Sandbox) bool { return strings.HasPrefix(sb.Tenant, s.tg.prefix) }
	for _, sb := range list {
		if mine(sb) {
			if err := c.Destroy(ctx, sandbox.Ref(sb.Tenant, sb.Name)); err != nil {
				s.t.Errorf("Destroy(%s/%s) = %v", sb.Tenant, sb.Name, err)
			}
		}
	}
	if list, err = c.List(ctx); err != nil || slices.ContainsFunc(list, mine) {
		s.t.Errorf("after destroying every sandbox, List = %v, %v", list, err)
	}
}

// wantNoLeftovers stops the daemon, whose sandboxes are all destroyed, and
// wants nothing of its instance on the host but what a stopped daemon
// keeps on purpose (see daemonproc.Leftovers): its network's chains,
// jumps and sets, its empty cgroup parent, and the data dir's own mounts.
func (s *soak) wantNoLeftovers() {
	d := s.tg.d
	if d == nil {
		return
	}
	d.Stop()
	names, err := d.Names()
	if err != nil {
		s.t.Fatal(err)
	}
	var leaks []string
	for _, left := range daemonproc.Leftovers(s.t, names, d.DataDir) {
		switch {
		case strings.HasPrefix(left, "mount "):
			if strings.Contains(left, "/roots/") || strings.Contains(left, "/sandboxes/") {
				leaks = append(leaks, left) // a sandbox's root or bundle
			}
		case strings.HasPrefix(left, "cgroup parent "), strings.HasPrefix(left, "filter: "), strings.HasPrefix(left, "nat: "):
		case strings.HasPrefix(left, "ipset ") && !strings.Contains(left, ": "):
		default:
			leaks = append(leaks, left)
		}
	}
	ids, err := d.RuntimeSandboxes()
	if err != nil {
		s.t.Errorf("list the runtime's sandboxes: %v", err)
	}
	for _, id := range ids {
		leaks = append(leaks, "runtime sandbox "+id)
	}
	for _, l := range leaks {
		s.t.Errorf("LEAK: after every sandbox was destroyed and the daemon stopped: %s", l)
	}
	s.t.Logf("soak: leftovers checked: %d leaks", len(leaks))
}

// wantNoLoopDevice wants no loop device backed by a file under dataDir
// once the daemon's cleanup unmounted the layer store.
func wantNoLoopDevice(t *testing.T, dataDir string) {
	if dataDir == "" {
		return
	}
	var held []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		held = nil
		files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dataDir) {
				held = append(held, f+" → "+strings.TrimSpace(string(b)))
			}
		}
		if len(held) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, h := range held {
		t.Errorf("LEAK: a loop device still backs a file of the daemon's data dir: %s", h)
	}
}
