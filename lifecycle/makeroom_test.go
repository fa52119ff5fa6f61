package lifecycle_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// TestMakeRoomUnderPressure: under memory pressure a sweep puts to sleep
// the running sandboxes idle for a minute or more, the longest idle first
// and at most eight a round, saying why; it leaves alone one called
// within the minute and one whose command runs, whoever owns them.
// Without pressure nothing sleeps before its idle timeout.
func TestMakeRoomUnderPressure(t *testing.T) {
	ctx := t.Context()
	var pressure atomic.Bool
	e := newEnv(t, func(o *envOptions) {
		o.IdleTimeout = time.Hour
		o.MemInfo = func() (int64, int64, error) {
			if pressure.Load() {
				return 5 << 20, 100 << 20, nil
			}
			return 50 << 20, 100 << 20, nil
		}
	})
	// Ten sandboxes called a second apart in an order neither of their
	// making nor its reverse, so the two called last (idle6 and idle4)
	// are the two a round of eight leaves; then one with a command that
	// outlasts the test's clock, and one called last.
	var idle []string
	for i := range 10 {
		idle = append(idle, fmt.Sprintf("idle%d", i))
		e.create(t, a1, idle[i])
	}
	for _, i := range []int{3, 7, 0, 9, 5, 1, 8, 2, 6, 4} {
		e.exec(t, a1, idle[i], "true")
		e.clock.Advance(time.Second)
	}
	e.create(t, a2, "busy")
	stdin, hold := io.Pipe()
	started, out := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		e.svc.Processes.Exec(ctx, a2, "busy", sandbox.ExecRequest{Shell: "echo started; cat"}, stdin, out, io.Discard)
		out.Close()
	})
	defer func() { hold.Close(); wg.Wait() }()
	if _, err := io.ReadFull(started, make([]byte, len("started\n"))); err != nil {
		t.Fatalf("busy's command: %v", err)
	}
	go io.Copy(io.Discard, started)
	e.clock.Advance(2 * time.Minute)
	e.create(t, a2, "recent")

	lifecycle.Sweep(ctx, e.svc)
	for _, name := range append(idle, "busy", "recent") {
		if row := e.row(t, name); row.Status != sandbox.StatusRunning {
			t.Fatalf("without pressure, %s is %s %q; want running", name, row.Status, row.Reason)
		}
	}

	pressure.Store(true)
	lifecycle.Sweep(ctx, e.svc)
	for i, name := range idle {
		row := e.row(t, name)
		last := i == 6 || i == 4
		switch {
		case !last && (row.Status != sandbox.StatusSleeping || !strings.Contains(row.Reason, "memory pressure")):
			t.Errorf("%s, among the eight longest idle, is %s %q; want asleep for memory pressure", name, row.Status, row.Reason)
		case last && row.Status != sandbox.StatusRunning:
			t.Errorf("%s, called after the eight longest idle, is %s %q; want running", name, row.Status, row.Reason)
		}
	}
	lifecycle.Sweep(ctx, e.svc)
	for _, name := range []string{idle[6], idle[4]} {
		if row := e.row(t, name); row.Status != sandbox.StatusSleeping {
			t.Errorf("after a second round, %s is %s %q; want asleep", name, row.Status, row.Reason)
		}
	}
	for _, name := range []string{"busy", "recent"} {
		if row := e.row(t, name); row.Status != sandbox.StatusRunning {
			t.Errorf("%s (a command running, or called within the minute) is %s %q; want running", name, row.Status, row.Reason)
		}
	}
}

// TestMakeRoomAfterRefusal: a start the host refused for memory is
// unavailable at once, with a hint to retry, and has the sandboxes idle
// for a minute or more put to sleep in the background; the retry, on the
// room that made, starts.
func TestMakeRoomAfterRefusal(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, func(o *envOptions) { o.IdleTimeout = time.Hour })
	old := e.create(t, a1, "old")
	e.clock.Advance(2 * time.Minute)
	// The host is full while old runs.
	e.drv.Faults().SetStartHook(func(ctx context.Context, _ driver.Spec) error {
		if st, err := e.drv.State(ctx, old.ID); err == nil && st.Status == driver.StatusRunning {
			return fmt.Errorf("oci: start x: %w", &driver.HostLimitError{What: driver.LimitMemory, Free: 1200, Need: 1292, Limit: 24576})
		}
		return nil
	})
	_, _, err := e.svc.Sandboxes.Create(ctx, a2, sandbox.CreateRequest{Name: "new"})
	se := wantCode(t, "Create(new) on a host short of memory", err, sandbox.CodeUnavailable)
	if !strings.Contains(se.Hint, "retry") {
		t.Errorf("the refusal's hint %q does not say to retry", se.Hint)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.row(t, "old").Status != sandbox.StatusSleeping {
		if time.Now().After(deadline) {
			t.Fatalf("old is %s 10 s after the refusal; want put to sleep to make room", e.row(t, "old").Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if row := e.row(t, "old"); !strings.Contains(row.Reason, "short of memory") {
		t.Errorf("old asleep because %q; want the reason to say memory", row.Reason)
	}
	if _, _, err := e.svc.Sandboxes.Create(ctx, a2, sandbox.CreateRequest{Name: "new"}); err != nil {
		t.Errorf("the retried create: %v", err)
	}
}

// TestMakeRoomPrefersItsTenant: the round a refused start begins puts
// that start's tenant's idle sandboxes to sleep before another tenant's,
// even ones idle longer: of nine of t1's sandboxes and one of t2's, all
// idle for minutes and t2's the least, t2's refused create sleeps its own
// and t1's seven longest idle, and leaves t1's two others running.
func TestMakeRoomPrefersItsTenant(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, func(o *envOptions) { o.IdleTimeout = time.Hour })
	var theirs []string
	for i := range 9 {
		theirs = append(theirs, fmt.Sprintf("theirs%d", i))
		e.create(t, a1, theirs[i])
		e.clock.Advance(time.Second)
	}
	e.create(t, b1, "mine")
	e.clock.Advance(2 * time.Minute)
	var refused atomic.Bool
	e.drv.Faults().SetStartHook(func(context.Context, driver.Spec) error {
		if refused.CompareAndSwap(false, true) {
			return fmt.Errorf("oci: start x: %w", &driver.HostLimitError{What: driver.LimitMemory, Free: 1200, Need: 1292, Limit: 24576})
		}
		return nil
	})
	_, _, err := e.svc.Sandboxes.Create(ctx, b1, sandbox.CreateRequest{Name: "new"})
	wantCode(t, "Create(new) on a host short of memory", err, sandbox.CodeUnavailable)
	all := append([]string{"mine"}, theirs...)
	asleep := func() (n int) {
		for _, name := range all {
			if e.row(t, name).Status == sandbox.StatusSleeping {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for asleep() < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes asleep 10 s after the refusal; want a round of eight", asleep())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, name := range all {
		row := e.row(t, name)
		want := sandbox.StatusSleeping
		if name == theirs[7] || name == theirs[8] {
			want = sandbox.StatusRunning
		}
		if row.Status != want {
			t.Errorf("%s is %s %q; want %s", name, row.Status, row.Reason, want)
		}
	}
}
