package fake_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/sandbox"
)

// newDriver returns a fake driver closed when t ends.
func newDriver(t *testing.T) *fake.Driver {
	t.Helper()
	d := fake.New(fake.Options{})
	t.Cleanup(func() { d.Close() })
	return d
}

// spec returns a spec for sandbox id on a fresh root.
func spec(t *testing.T, id string) driver.Spec {
	t.Helper()
	return driver.Spec{
		ID: id, RootFS: t.TempDir(), AgentPath: "/nonexistent/hearth-agent", Hostname: id,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "FAKE_TEST=" + id}, Home: "/home/sandbox",
	}
}

func start(t *testing.T, d *fake.Driver, s driver.Spec) {
	t.Helper()
	if err := d.Start(t.Context(), s); err != nil {
		t.Fatalf("Start(%s) = %v", s.ID, err)
	}
}

func client(d driver.Driver, id string) *agent.Client {
	return agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, id) })
}

// run runs shell in sandbox id and returns its stdout.
func run(t *testing.T, d driver.Driver, id, shell string) (string, sandbox.ExecResult) {
	t.Helper()
	var out bytes.Buffer
	res, err := client(d, id).Exec(t.Context(), sandbox.ExecRequest{Shell: shell}, nil, &out, nil)
	if err != nil {
		t.Fatalf("Exec(%s, %q) = %v", id, shell, err)
	}
	return out.String(), res
}

func wantState(t *testing.T, d driver.Driver, id string, want driver.Status, oom bool) driver.State {
	t.Helper()
	st, err := d.State(t.Context(), id)
	if err != nil || st.ID != id || st.Status != want || st.OOMKilled != oom {
		t.Fatalf("State(%s) = %+v, %v, want %s with OOMKilled %v", id, st, err, want, oom)
	}
	if (want == driver.StatusRunning) != (st.PID > 0) {
		t.Errorf("State(%s).PID = %d with status %s", id, st.PID, st.Status)
	}
	return st
}

func wantUnknown(t *testing.T, d driver.Driver, id string) {
	t.Helper()
	ctx := t.Context()
	if _, err := d.State(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("State(%s) = %v, want ErrNotFound", id, err)
	}
	if c, err := d.Dial(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Dial(%s) = %v, want ErrNotFound", id, err)
	}
	if err := d.Stop(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Stop(%s) = %v, want ErrNotFound", id, err)
	}
	if err := d.Delete(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Delete(%s) = %v, want ErrNotFound", id, err)
	}
	states, err := d.Recover(ctx)
	if err != nil || slices.ContainsFunc(states, func(st driver.State) bool { return st.ID == id }) {
		t.Errorf("Recover() = %+v, %v, want no %s", states, err, id)
	}
}

func TestCapabilities(t *testing.T) {
	if got, want := fake.New(fake.Options{}).Capabilities(), (driver.Capabilities{Runtime: "fake", Isolation: "none"}); got != want {
		t.Errorf("Capabilities() = %+v, want %+v", got, want)
	}
	opts := fake.Options{Runtime: "runsc", Isolation: "gvisor"}
	if got, want := fake.New(opts).Capabilities(), (driver.Capabilities{Runtime: "runsc", Isolation: "gvisor"}); got != want {
		t.Errorf("Capabilities() with %+v = %+v, want %+v", opts, got, want)
	}
}

func TestUnknown(t *testing.T) {
	d := newDriver(t)
	wantUnknown(t, d, "nosuch")
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"Die", d.Faults().Die("nosuch", true)},
		{"Vanish", d.Faults().Vanish("nosuch")},
		{"OOMNextExec", d.Faults().OOMNextExec("nosuch")},
	} {
		if !errors.Is(tt.err, driver.ErrNotFound) {
			t.Errorf("%s(nosuch) = %v, want ErrNotFound", tt.name, tt.err)
		}
	}
	if home := d.Home("nosuch"); home != "" {
		t.Errorf("Home(nosuch) = %q, want \"\"", home)
	}
}

// TestLifecycle: start, exec in the root's home, stop, wake on the same
// root, delete.
func TestLifecycle(t *testing.T) {
	d := newDriver(t)
	s := spec(t, "sb1")
	start(t, d, s)
	first := wantState(t, d, "sb1", driver.StatusRunning, false)
	if first.PID < 1<<22 {
		t.Errorf("State(sb1).PID = %d, want a made-up pid above any pid_max", first.PID)
	}
	home := filepath.Join(s.RootFS, "home", "sandbox")
	if got := d.Home("sb1"); got != home {
		t.Errorf("Home(sb1) = %q, want %q", got, home)
	}
	out, res := run(t, d, "sb1", "pwd; echo $FAKE_TEST $HOME; echo kept > note")
	if want := home + "\nsb1 " + home + "\n"; out != want || res.ExitCode != 0 {
		t.Errorf("Exec(pwd, env, write) = %q, %+v; want %q, exit 0", out, res, want)
	}
	if err := d.Start(t.Context(), s); err == nil {
		t.Errorf("Start(sb1) of a running sandbox succeeded, want an error")
	}
	wantState(t, d, "sb1", driver.StatusRunning, false)

	for i := range 2 {
		if err := d.Stop(t.Context(), "sb1"); err != nil {
			t.Fatalf("Stop(sb1) #%d = %v", i+1, err)
		}
		wantState(t, d, "sb1", driver.StatusStopped, false)
	}
	c, err := d.Dial(t.Context(), "sb1")
	if err == nil {
		c.Close()
	}
	if err == nil || errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Dial(sb1) of a stopped sandbox = %v, want a connection error", err)
	}

	s.Env = append(s.Env, "WOKEN=yes")
	start(t, d, s)
	second := wantState(t, d, "sb1", driver.StatusRunning, false)
	if second.PID == first.PID {
		t.Errorf("State(sb1).PID after a wake = %d, the pid of the first start", second.PID)
	}
	if out, _ := run(t, d, "sb1", "cat note; echo $WOKEN"); out != "kept\nyes\n" {
		t.Errorf("after a wake, Exec(cat note; echo $WOKEN) = %q, want the root's file and the new spec's env", out)
	}
	if got, _ := d.Spec("sb1"); !slices.Equal(got.Env, s.Env) {
		t.Errorf("Spec(sb1).Env = %q, want the wake's %q", got.Env, s.Env)
	}

	if err := d.Delete(t.Context(), "sb1"); err != nil {
		t.Fatalf("Delete(sb1) = %v", err)
	}
	wantUnknown(t, d, "sb1")
	if b, err := os.ReadFile(filepath.Join(home, "note")); err != nil || string(b) != "kept\n" {
		t.Errorf("Delete(sb1) touched the root: note = %q, %v", b, err)
	}
}

// TestStopKillsCommands: Stop returns once the running commands are dead,
// and their callers see the connection break.
func TestStopKillsCommands(t *testing.T) {
	d := newDriver(t)
	start(t, d, spec(t, "sb1"))
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := client(d, "sb1").Exec(context.Background(), sandbox.ExecRequest{Shell: "echo up; exec sleep 300"}, nil,
			writerFunc(func([]byte) { close(started) }), nil)
		done <- err
	}()
	<-started
	if err := d.Stop(t.Context(), "sb1"); err != nil {
		t.Fatalf("Stop(sb1) = %v", err)
	}
	select {
	case err := <-done:
		if !sandbox.IsCode(err, sandbox.CodeUnavailable) {
			t.Errorf("Exec during Stop = %v, want unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still running 10s after Stop returned")
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func TestStartFailures(t *testing.T) {
	boom := errors.New("boom")
	t.Run("new sandbox leaves nothing", func(t *testing.T) {
		d := newDriver(t)
		d.Faults().FailStart(boom)
		if err := d.Start(t.Context(), spec(t, "sb1")); !errors.Is(err, boom) {
			t.Fatalf("Start(sb1) with FailStart(boom) = %v, want boom", err)
		}
		wantUnknown(t, d, "sb1")
		d.Faults().FailStart(nil)
		start(t, d, spec(t, "sb1"))
	})
	t.Run("stopped sandbox stays stopped", func(t *testing.T) {
		d := newDriver(t)
		s := spec(t, "sb1")
		start(t, d, s)
		if err := d.Faults().Die("sb1", true); err != nil {
			t.Fatal(err)
		}
		d.Faults().FailStart(boom)
		if err := d.Start(t.Context(), s); !errors.Is(err, boom) {
			t.Fatalf("Start(sb1) with FailStart(boom) = %v, want boom", err)
		}
		wantState(t, d, "sb1", driver.StatusStopped, true)
	})
	t.Run("missing root", func(t *testing.T) {
		d := newDriver(t)
		s := spec(t, "sb1")
		s.RootFS = filepath.Join(s.RootFS, "nosuch")
		if err := d.Start(t.Context(), s); err == nil {
			t.Fatalf("Start(sb1) on a missing root succeeded")
		}
		wantUnknown(t, d, "sb1")
	})
	t.Run("hook sees the spec", func(t *testing.T) {
		d := newDriver(t)
		var seen []string
		d.Faults().SetStartHook(func(ctx context.Context, s driver.Spec) error {
			seen = append(seen, s.ID)
			return nil
		})
		start(t, d, spec(t, "sb1"))
		if !slices.Equal(seen, []string{"sb1"}) {
			t.Errorf("the start hook saw %q, want [sb1]", seen)
		}
	})
	t.Run("closed driver", func(t *testing.T) {
		d := newDriver(t)
		d.Close()
		if err := d.Start(t.Context(), spec(t, "sb1")); err == nil {
			t.Fatal("Start(sb1) on a closed driver succeeded")
		}
	})
}

func TestDieAndVanish(t *testing.T) {
	d := newDriver(t)
	for _, id := range []string{"died", "oom", "gone"} {
		start(t, d, spec(t, id))
	}
	if err := d.Faults().Die("died", false); err != nil {
		t.Fatal(err)
	}
	if err := d.Faults().Die("oom", true); err != nil {
		t.Fatal(err)
	}
	if err := d.Faults().Vanish("gone"); err != nil {
		t.Fatal(err)
	}
	wantState(t, d, "died", driver.StatusStopped, false)
	wantState(t, d, "oom", driver.StatusStopped, true)
	// Stopping a dead sandbox keeps how it died; a wake clears it.
	if err := d.Stop(t.Context(), "oom"); err != nil {
		t.Fatal(err)
	}
	wantState(t, d, "oom", driver.StatusStopped, true)
	s, _ := d.Spec("oom")
	start(t, d, s)
	wantState(t, d, "oom", driver.StatusRunning, false)
	wantUnknown(t, d, "gone")
}

func TestOOMNextExec(t *testing.T) {
	d := newDriver(t)
	start(t, d, spec(t, "sb1"))
	if err := d.Faults().OOMNextExec("sb1"); err != nil {
		t.Fatal(err)
	}
	// Other operations through an armed connection are untouched.
	if _, err := client(d, "sb1").Ping(t.Context()); err != nil {
		t.Fatalf("Ping(sb1) = %v", err)
	}
	out, res := run(t, d, "sb1", "echo big; kill -9 $$")
	if out != "big\n" || !res.OOMKilled || res.Signal == "" {
		t.Errorf("Exec after OOMNextExec = %q, %+v; want the output and an OOM-killed result", out, res)
	}
	if _, res := run(t, d, "sb1", "true"); res.OOMKilled {
		t.Errorf("the second Exec after one OOMNextExec = %+v, want OOMKilled false", res)
	}
}

// TestReopen: a second handle, as a restarted daemon builds it, recovers
// and reaches the sandboxes the first one started.
func TestReopen(t *testing.T) {
	d := newDriver(t)
	run1, stop1 := spec(t, "run1"), spec(t, "stop1")
	start(t, d, run1)
	start(t, d, stop1)
	if err := d.Stop(t.Context(), "stop1"); err != nil {
		t.Fatal(err)
	}
	before := wantState(t, d, "run1", driver.StatusRunning, false)

	d2 := d.Reopen()
	states, err := d2.Recover(t.Context())
	want := []driver.State{
		{ID: "run1", Status: driver.StatusRunning, PID: before.PID},
		{ID: "stop1", Status: driver.StatusStopped},
	}
	if err != nil || !slices.Equal(states, want) {
		t.Fatalf("Recover() after Reopen = %+v, %v; want %+v", states, err, want)
	}
	if out, _ := run(t, d2, "run1", "echo hi"); out != "hi\n" {
		t.Errorf("Exec through the reopened driver = %q, want hi", out)
	}
	start(t, d2, stop1)
	for _, id := range []string{"run1", "stop1"} {
		if err := d2.Delete(t.Context(), id); err != nil {
			t.Fatalf("Delete(%s) through the reopened driver = %v", id, err)
		}
		wantUnknown(t, d, id)
	}
}

func TestCalls(t *testing.T) {
	d := newDriver(t)
	ctx := t.Context()
	start(t, d, spec(t, "sb1"))
	d.State(ctx, "sb1")
	d.Reopen().Recover(ctx)
	d.Stop(ctx, "sb1")
	d.Delete(ctx, "sb1")
	want := []fake.Call{
		{Op: fake.OpStart, ID: "sb1"}, {Op: fake.OpState, ID: "sb1"}, {Op: fake.OpRecover},
		{Op: fake.OpStop, ID: "sb1"}, {Op: fake.OpDelete, ID: "sb1"},
	}
	got := d.Calls()
	if !slices.EqualFunc(got, want, func(a, b fake.Call) bool { return a.Op == b.Op && a.ID == b.ID }) {
		t.Errorf("Calls() = %v, want %v", got, want)
	}
	for i := 1; i < len(got); i++ {
		if got[i].At.IsZero() || got[i].At.Before(got[i-1].At) {
			t.Errorf("Calls()[%d].At = %v after %v: want the calls' times, in order", i, got[i].At, got[i-1].At)
		}
	}
	if n := d.Count(fake.OpStart, "sb1"); n != 1 {
		t.Errorf("Count(Start, sb1) = %d, want 1", n)
	}
	if n := d.Count(fake.OpStart, "other"); n != 0 {
		t.Errorf("Count(Start, other) = %d, want 0", n)
	}
}

// TestFreeze: a frozen sandbox is running to State but holds agent calls
// back until Thaw; Freeze and Thaw twice are fine; Stop works on a frozen
// sandbox and then both fail, saying so; unknown ids are ErrNotFound.
func TestFreeze(t *testing.T) {
	d := newDriver(t)
	ctx := t.Context()
	for name, call := range map[string]func(context.Context, string) error{"Freeze": d.Freeze, "Thaw": d.Thaw} {
		if err := call(ctx, "nosuch"); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("%s(nosuch) = %v, want ErrNotFound", name, err)
		}
	}
	start(t, d, spec(t, "sb1"))
	if d.Frozen("sb1") {
		t.Fatal("Frozen(sb1) = true before Freeze")
	}
	for i := range 2 {
		if err := d.Freeze(ctx, "sb1"); err != nil {
			t.Fatalf("Freeze(sb1) #%d = %v", i+1, err)
		}
	}
	if !d.Frozen("sb1") {
		t.Fatal("Frozen(sb1) = false after Freeze")
	}
	wantState(t, d, "sb1", driver.StatusRunning, false)

	pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if c, err := d.Dial(pctx, "sb1"); !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Dial(sb1) while frozen = %v, want the context's deadline", err)
	}
	held := make(chan string, 1)
	go func() {
		var out bytes.Buffer
		client(d, "sb1").Exec(context.Background(), sandbox.ExecRequest{Shell: "echo after"}, nil, &out, nil)
		held <- out.String()
	}()
	select {
	case out := <-held:
		t.Fatalf("Exec(sb1) while frozen returned %q, want it held until Thaw", out)
	case <-time.After(50 * time.Millisecond):
	}

	for i := range 2 {
		if err := d.Thaw(ctx, "sb1"); err != nil {
			t.Fatalf("Thaw(sb1) #%d = %v", i+1, err)
		}
	}
	if d.Frozen("sb1") {
		t.Error("Frozen(sb1) = true after Thaw")
	}
	select {
	case out := <-held:
		if out != "after\n" {
			t.Errorf("Exec(sb1) held by a freeze = %q, want %q", out, "after\n")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec(sb1) held by a freeze still waits 10s after Thaw")
	}

	// Stop thaws and stops; a Dial it held fails.
	if err := d.Freeze(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	dialed := make(chan error, 1)
	go func() {
		c, err := d.Dial(context.Background(), "sb1")
		if c != nil {
			c.Close()
		}
		dialed <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := d.Stop(ctx, "sb1"); err != nil {
		t.Fatalf("Stop(sb1) while frozen = %v", err)
	}
	if err := <-dialed; err == nil || errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Dial(sb1) held by a freeze, then Stop = %v, want a connection error", err)
	}
	wantState(t, d, "sb1", driver.StatusStopped, false)
	if d.Frozen("sb1") {
		t.Error("Frozen(sb1) = true after Stop")
	}
	for name, call := range map[string]func(context.Context, string) error{"Freeze": d.Freeze, "Thaw": d.Thaw} {
		if err := call(ctx, "sb1"); err == nil || errors.Is(err, driver.ErrNotFound) {
			t.Errorf("%s(sb1) of a stopped sandbox = %v, want an error saying it is stopped", name, err)
		}
	}
	if n := d.Count(fake.OpFreeze, "sb1"); n != 4 {
		t.Errorf("Count(Freeze, sb1) = %d, want 4", n)
	}
	if n := d.Count(fake.OpThaw, "sb1"); n != 3 {
		t.Errorf("Count(Thaw, sb1) = %d, want 3", n)
	}
}

// TestFreezeRecover: a daemon that dies with a sandbox frozen leaves it
// frozen; the next one's Recover thaws it.
func TestFreezeRecover(t *testing.T) {
	d := newDriver(t)
	start(t, d, spec(t, "sb1"))
	if err := d.Freeze(t.Context(), "sb1"); err != nil {
		t.Fatal(err)
	}
	d2 := d.Reopen()
	if !d2.Frozen("sb1") {
		t.Fatal("Frozen(sb1) through the reopened driver = false before Recover")
	}
	states, err := d2.Recover(t.Context())
	if err != nil || len(states) != 1 || states[0].Status != driver.StatusRunning {
		t.Fatalf("Recover() = %+v, %v; want sb1 running", states, err)
	}
	if d2.Frozen("sb1") {
		t.Error("Frozen(sb1) = true after Recover")
	}
	if out, _ := run(t, d2, "sb1", "echo hi"); out != "hi\n" {
		t.Errorf("Exec after Recover = %q, want hi", out)
	}
}
