package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestParseMemUsed(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"MemTotal:         851968 kB\nMemFree:          843136 kB\nMemAvailable:     843136 kB\n", (851968 - 843136) << 10, true},
		{"MemFree: 10 kB\nMemTotal: 30 kB\n", 20 << 10, true},
		{"MemTotal: 10 kB\nMemFree: 30 kB\n", 0, false}, // never negative
		{"MemTotal: 10 kB\n", 0, false},
		{"MemTotal: x kB\nMemFree: 1 kB\n", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := parseMemUsed([]byte(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseMemUsed(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseResident(t *testing.T) {
	page := uint64(os.Getpagesize())
	for in, want := range map[string]uint64{"2560 790 600 1 0 300 0\n": 790 * page, "0 0 0 0 0 0 0": 0} {
		if got, ok := parseResident([]byte(in)); !ok || got != want {
			t.Errorf("parseResident(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "12", "1 x 3"} {
		if _, ok := parseResident([]byte(in)); ok {
			t.Errorf("parseResident(%q) accepted", in)
		}
	}
}

// TestGuardWait: the guard looks rarely when far from the limit, more often
// as it nears, and at its fastest past it.
func TestGuardWait(t *testing.T) {
	const limit = 512 << 20
	if got := guardWait(limit, 0); got != guardMaxWait {
		t.Errorf("wait with nothing used = %v, want %v", got, guardMaxWait)
	}
	if got := guardWait(limit, limit+1); got != guardMinWait {
		t.Errorf("wait over the limit = %v, want %v", got, guardMinWait)
	}
	prev := guardMaxWait
	for used := uint64(0); used <= limit; used += 16 << 20 {
		got := guardWait(limit, used)
		if got > prev || got < guardMinWait {
			t.Fatalf("wait at %d of %d = %v, after %v: want it to shrink, never below %v", used, limit, got, prev, guardMinWait)
		}
		prev = got
	}
	// What a command allocating at guardRate commits in one wait near the
	// limit stays within the host's headroom (a quarter of the limit).
	if got := guardWait(limit, limit-(64<<20)); float64(got)/float64(time.Second)*guardRate > limit/4 {
		t.Errorf("wait 64 MiB below the limit = %v: too long at %d B/s", got, guardRate)
	}
}

// fakeProc is a procfs stand-in: a meminfo and, per pid, a statm and a
// stat. Killing a process makes it a zombie and frees its memory.
type fakeProc struct {
	t     *testing.T
	dir   string
	total uint64 // kB
	mu    sync.Mutex
	rss   map[int]uint64 // kB
	base  uint64         // kB held by no process (tmpfs)
	kills []int
	slow  bool // a killed process lives on, holding its memory
}

func newFakeProc(t *testing.T, totalKB, baseKB uint64, rss map[int]uint64) *fakeProc {
	f := &fakeProc{t: t, dir: t.TempDir(), total: totalKB, base: baseKB, rss: rss}
	for pid := range rss {
		f.write(pid, 'S')
	}
	f.writeMeminfo()
	return f
}

func (f *fakeProc) write(pid int, state byte) {
	d := filepath.Join(f.dir, strconv.Itoa(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		f.t.Fatal(err)
	}
	pages := f.rss[pid] * 1024 / uint64(os.Getpagesize())
	if err := os.WriteFile(filepath.Join(d, "statm"), fmt.Appendf(nil, "%d %d 0 0 0 0 0\n", pages*2, pages), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "stat"), fmt.Appendf(nil, "%d (p) %c 1 %d %d 0", pid, state, pid, pid), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) writeMeminfo() {
	used := f.base
	for _, kb := range f.rss {
		used += kb
	}
	b := fmt.Appendf(nil, "MemTotal: %d kB\nMemFree: %d kB\nMemAvailable: %d kB\n", f.total, f.total-used, f.total-used)
	if err := os.WriteFile(filepath.Join(f.dir, "meminfo"), b, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) kill(pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, pid)
	if f.slow {
		return nil
	}
	f.rss[pid] = 0
	f.write(pid, 'Z')
	f.writeMeminfo()
	return nil
}

func (f *fakeProc) killed() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.kills...)
}

func (f *fakeProc) guard(limitKB uint64) *memGuard {
	g := newMemGuard(limitKB<<10, f.dir, slog.New(slog.DiscardHandler))
	g.kill = f.kill
	return g
}

// TestMemGuardKillsTheLargest: past the limit the guard kills the process
// with the largest resident set, never itself or PID 1, one at a time, and
// stops once the sandbox is under its limit.
func TestMemGuardKillsTheLargest(t *testing.T) {
	self := os.Getpid()
	f := newFakeProc(t, 2000<<10, 10<<10, map[int]uint64{
		1: 30 << 10, self: 30 << 10, // never victims, however large
		100: 20 << 10, 200: 150 << 10, 300: 90 << 10,
	})
	g := f.guard(100 << 10) // 330 MiB held of 100
	g.self = self
	go g.run()
	defer g.close()
	// 200 goes first (180 MiB left), then 300 (90 MiB left: under).
	deadline := time.Now().Add(5 * time.Second)
	for len(f.killed()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(3 * guardMaxWait)
	if got := f.killed(); !slices.Equal(got, []int{200, 300}) {
		t.Errorf("killed %v, want 200 then 300 (largest first; never the agent or PID 1; none once under)", got)
	}
	if n := g.kills.Load(); n != 2 {
		t.Errorf("kills counted = %d, want 2", n)
	}
}

// TestMemGuardSlowDeath: a victim that takes its time to die holds its
// memory meanwhile; the guard counts it as freed and kills no one else for
// it, but does kill for what others allocate meanwhile.
func TestMemGuardSlowDeath(t *testing.T) {
	f := newFakeProc(t, 2000<<10, 10<<10, map[int]uint64{100: 600 << 10, 200: 100 << 10, 300: 50 << 10})
	f.slow = true
	g := f.guard(512 << 10)
	go g.run()
	defer g.close()
	time.Sleep(3 * guardMaxWait)
	if got := f.killed(); !slices.Equal(got, []int{100}) {
		t.Fatalf("killed %v while the first victim was dying, want only 100", got)
	}
	// 200 grows past what the limit leaves with 100 counted free.
	f.mu.Lock()
	f.rss[200] = 600 << 10
	f.write(200, 'S')
	f.writeMeminfo()
	f.mu.Unlock()
	time.Sleep(3 * guardMaxWait)
	if got := f.killed(); !slices.Equal(got, []int{100, 200}) {
		t.Errorf("killed %v, want 100 then 200", got)
	}
}

// TestMemGuardUnderLimit: a sandbox under its limit loses nothing, and one
// over it through memory its processes do not hold (tmpfs, or what gVisor
// has yet to count as freed) loses nothing either: killing would not free
// enough of it.
func TestMemGuardUnderLimit(t *testing.T) {
	for name, tc := range map[string]struct{ base, rss uint64 }{
		"under":          {10 << 10, 100 << 10},
		"held elsewhere": {600 << 10, 5 << 10},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeProc(t, 800<<10, tc.base, map[int]uint64{100: tc.rss, 200: 0})
			g := f.guard(512 << 10)
			go g.run()
			time.Sleep(3 * guardMaxWait)
			g.close()
			g.close() // a second close is harmless
			if got := f.killed(); len(got) != 0 {
				t.Errorf("killed %v", got)
			}
		})
	}
}

// TestMemGuardPace: with no process but the agent the guard does not look
// again until poked; with processes whose memory holds steady far from the
// limit it looks once a guardSteadyWait; any change, or a sandbox past half
// its limit, brings back guardWait's pace.
func TestMemGuardPace(t *testing.T) {
	self := os.Getpid()
	f := newFakeProc(t, 2000<<10, 0, map[int]uint64{1: 5 << 10, self: 10 << 10})
	g := f.guard(512 << 10)
	g.self = self
	dying := map[int]bool{}
	if _, idle := g.check(dying); !idle {
		t.Fatal("with only the agent and PID 1 the guard does not park")
	}
	f.rss[100] = 20 << 10
	f.write(100, 'S')
	f.writeMeminfo()
	var waits []time.Duration
	for range guardSteadyLooks + 1 {
		wait, idle := g.check(dying)
		if idle {
			t.Fatal("parked with a process to watch")
		}
		waits = append(waits, wait)
	}
	if waits[0] != guardMaxWait || waits[len(waits)-1] != guardSteadyWait {
		t.Errorf("waits while steady = %v; want %v first, %v once steady", waits, guardMaxWait, guardSteadyWait)
	}
	f.rss[100] = 300 << 10 // grows past half the limit
	f.write(100, 'S')
	f.writeMeminfo()
	if wait, _ := g.check(dying); wait >= guardMaxWait {
		t.Errorf("wait after a jump to %d of %d bytes = %v; want under %v", 330<<20, 512<<20, wait, guardMaxWait)
	}
}
