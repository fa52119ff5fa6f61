package load_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/sandbox"
)

// fillShortRoom is the memory the short fill leaves its daemon's starts
// above its reserve: room for about seventy idle runsc sandboxes, and for
// what tests of other packages running beside it take meanwhile.
const fillShortRoom = 1 << 30

// fillEach is what the full fill expects an idle runsc sandbox to take,
// to size the host's task ids for the count it will reach.
const fillEach = 13 << 20

// TestFill is the density scenario taken to the end: how many running
// idle sandboxes this host holds. Creates (densityConc at a time) go on
// until the daemon refuses one for room (memory; or task ids, where
// sandboxes take little memory, as under runc): with its default memory
// reserve in the full run (the whole host), with a reserve that leaves
// room for about seventy in the short one. Every create either succeeds
// or is refused unavailable for room with the numbers, nothing else;
// every sandbox made still runs, or was put to sleep by the daemon to make
// room (those idle for a minute, in the full run), the host's OOM killer
// killed nothing, a probe exec among them keeps its latency (logged
// against density's 50 ms goal), and sleeping some of them makes room for
// one more create.
func TestFill(t *testing.T) {
	sz := loadSizes(t)
	if os.Getenv("HEARTH_URL") != "" {
		t.Skip("the fill scenario sets its own daemon's memory reserve")
	}
	m := readMemory(t)
	// room is about what the creates have before the reserve refuses one.
	room := m.Available - oci.DefaultMemoryReserve(m.Total)
	var args []string
	if !sz.full {
		room = fillShortRoom
		args = []string{"--memory-reserve", strconv.FormatInt(m.Available-oci.StartMemory-room, 10)}
	} else {
		wantPids(t, int(room/fillEach)*tasksPerSandbox)
	}
	tg := newTarget(t, args...)
	ctx := ctxFor(t, 2*time.Hour)
	c := tg.client("")
	oomBefore := oomKills(t)
	before := memAvailable(t)

	f := fillHost(t, ctx, tg, 10*int(room/fillEach))
	names, refusal := f.names, f.refusal
	free, _ := refusal.Number("free")
	needed, _ := refusal.Number("needed")
	if free >= needed || !strings.Contains(refusal.Hint, "sleep") {
		t.Errorf("the refusal: %+v; want free below needed and a hint", refusal)
	}
	time.Sleep(idleSettle)
	after := memAvailable(t)
	running, slept := countRunning(t, ctx, tg, "f-")
	if running+slept != len(names) {
		t.Errorf("of the %d sandboxes made, %d run and %d the daemon put to sleep for room at the end", len(names), running, slept)
	}
	if n := oomKills(t) - oomBefore; n > 0 {
		t.Errorf("the host's OOM killer killed %d processes while the host filled", n)
	}
	probe := newRecorder(fmt.Sprintf("probe `true` among %d idle sandboxes on a full host", len(names)))
	for range sz.probes {
		probe.time(func() error { return execTrue(ctx, c, names[0]) })
		time.Sleep(probeGap)
	}
	probe.report(t, 0)
	probe.wantNoErrors(t)
	asleep := sleepForRoom(t, ctx, tg, names[1:])
	t.Logf("load: fill: %d running idle sandboxes until a create was refused (%s); %.1f MiB of MemAvailable each (%.0f → %.0f MiB); %d of them put to sleep by the daemon for room by the end; probe p50 %.1f ms, p99 %.1f ms; creates/s %.2f at the start, %.2f at the end; %d more slept made room for one more create; %v for the creates",
		len(names), refusal.Message, float64(before-after)/float64(len(names))/(1<<20), float64(before)/(1<<20), float64(after)/(1<<20), slept,
		probe.p(0.5), probe.p(0.99), rateAt(f.ends, f.start, true), rateAt(f.ends, f.start, false), asleep, f.took.Round(time.Second))
	destroyAll(ctx, c, append(names, tg.name("f-room")), 2*densityConc)
}

// fill is what fillHost made: the sandboxes in the order their creates
// ended, when each ended, the refusal that ended the fill, when the first
// create began and how long the creates took.
type fill struct {
	names   []string
	ends    []time.Time
	refusal *sandbox.Error
	start   time.Time
	took    time.Duration
}

// fillHost creates sandboxes (create and a first `true`, densityConc at a
// time) until the daemon refuses one for room, at most bound, and reports
// them. It fails t unless a refusal ended it after at least one sandbox,
// and on any other error.
func fillHost(t *testing.T, ctx context.Context, tg *target, bound int) fill {
	t.Helper()
	c := tg.client("")
	rec := newRecorder("create + first exec of `true` until the host is full")
	var (
		mu     sync.Mutex
		f      fill
		others []error
		next   atomic.Int64
	)
	f.start = time.Now()
	parallel(densityConc, densityConc, func(int) {
		for {
			i := int(next.Add(1)) - 1
			mu.Lock()
			full := f.refusal != nil
			mu.Unlock()
			if full || i >= bound {
				return
			}
			name := tg.name("f-%d", i)
			err := rec.time(func() error { return createAndExec(ctx, c, name) })
			mu.Lock()
			var se *sandbox.Error
			switch {
			case err == nil:
				f.names = append(f.names, name)
				f.ends = append(f.ends, time.Now())
			case refusedForRoom(err, &se):
				if f.refusal == nil {
					f.refusal = se
				}
			default:
				others = append(others, err)
			}
			mu.Unlock()
		}
	})
	f.took = time.Since(f.start)
	rec.report(t, f.took)
	if f.refusal == nil {
		t.Fatalf("%d sandboxes made and no create refused for room: the reserve never held", len(f.names))
	}
	if len(f.names) == 0 {
		t.Fatalf("the first creates were refused (%s): the host had less than the room the test meant to leave", f.refusal.Message)
	}
	if len(others) > 0 {
		t.Errorf("%d creates failed other than by the host's refusal, the first: %v", len(others), others[0])
	}
	return f
}

// sleepForRoom puts sandboxes of names to sleep, one at a time, until a
// create succeeds on the full host, and returns how many it took; it
// fails t if all of them asleep made no room, or if the create fails
// other than by the memory refusal.
func sleepForRoom(t *testing.T, ctx context.Context, tg *target, names []string) int {
	t.Helper()
	c := tg.client("")
	for n := 0; n <= len(names); n++ {
		err := createAndExec(ctx, c, tg.name("f-room"))
		if err == nil {
			return n
		}
		if !refusedForRoom(err, new(*sandbox.Error)) {
			t.Fatalf("a create on the full host: %v; want the host's refusal or success", err)
		}
		if n < len(names) {
			if _, err := c.Sleep(ctx, names[n]); err != nil {
				t.Fatalf("sleep %s: %v", names[n], err)
			}
		}
	}
	t.Fatalf("%d sandboxes asleep made no room for a create", len(names))
	return 0
}

// refusedForRoom reports whether err is the daemon's refusal of a start
// the host has no room for (unavailable, naming the resource: memory, or
// task ids first where sandboxes take little memory, as under runc), and
// sets *se to it.
func refusedForRoom(err error, se **sandbox.Error) bool {
	return errors.As(err, se) && (*se).Code == sandbox.CodeUnavailable && ((*se).Details["resource"] == driver.LimitMemory || (*se).Details["resource"] == driver.LimitTaskIDs)
}

// countRunning counts the target's sandboxes whose names start with its
// prefix and kind that run, and that the daemon put to sleep to make room
// on a host short of memory.
func countRunning(t *testing.T, ctx context.Context, tg *target, kind string) (running, slept int) {
	t.Helper()
	list, err := tg.client("").List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		switch {
		case !strings.HasPrefix(sb.Name, tg.prefix+kind):
		case sb.Status == sandbox.StatusRunning:
			running++
		case sb.Status == sandbox.StatusSleeping && strings.Contains(sb.Reason, "memory"):
			slept++
		}
	}
	return running, slept
}

// readMemory reads the host's memory.
func readMemory(t *testing.T) hostusage.Memory {
	t.Helper()
	m, err := hostusage.ReadMemory(hostusage.Proc)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// oomKills is the host's count of processes its OOM killer has killed
// (/proc/vmstat oom_kill).
func oomKills(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/vmstat: %q", line)
			}
			return n
		}
	}
	t.Fatal("/proc/vmstat has no oom_kill")
	return 0
}
