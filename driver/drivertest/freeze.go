package drivertest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/sandbox"
)

// counterScript runs in the background of a sandbox and counts, about
// every 10 ms, into the file counterFile in the sandbox user's home. Each
// value replaces the last with a rename, so the host never reads a half
// written one.
const counterScript = `(i=0; while :; do i=$((i+1)); echo $i > ` + counterFile + `.tmp; mv ` + counterFile + `.tmp ` + counterFile + `; sleep 0.01; done) </dev/null >/dev/null 2>&1 &`

const counterFile = "drivertest-counter"

// frozenFor is how long a frozen sandbox is watched for a process that
// still runs: dozens of the counter's ticks, even under gVisor.
const frozenFor = 500 * time.Millisecond

// testFreeze, for a driver.Freezer: a frozen sandbox runs nothing (a
// counter in it stands still and its agent does not answer) yet is
// running to State; after Thaw it counts and answers again; Freeze and Thaw
// twice are fine; a new driver value on the same state (a daemon that died
// with the sandbox frozen) thaws it in Recover; Stop works on a frozen
// sandbox; a stopped sandbox cannot be frozen or thawed, and an unknown id is
// ErrNotFound.
func (s *suite) testFreeze(t *testing.T) {
	tg := s.cfg.New(t)
	f, ok := tg.Driver.(driver.Freezer)
	if !ok {
		t.Skip("the driver is not a driver.Freezer")
	}
	d := tg.Driver
	ctx := t.Context()
	unknown := newID()
	if err := f.Freeze(ctx, unknown); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Freeze(%s) of an unknown id = %v, want ErrNotFound", unknown, err)
	}
	if err := f.Thaw(ctx, unknown); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Thaw(%s) of an unknown id = %v, want ErrNotFound", unknown, err)
	}

	spec := s.spec(t)
	id := spec.ID
	s.start(t, d, spec)
	counter := filepath.Join(spec.RootFS, filepath.Join("/", spec.Home), counterFile)
	var out bytes.Buffer
	res, err := agentClient(d, id).Exec(ctx, sandbox.ExecRequest{Shell: counterScript}, nil, &out, &out)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%s, the counter) = %+v, %v: %s", id, res, err, out.Bytes())
	}
	last := waitCounting(t, counter, 0)

	for i := range 2 {
		began := time.Now()
		if err := f.Freeze(ctx, id); err != nil {
			t.Fatalf("Freeze(%s) #%d = %v", id, i+1, err)
		}
		t.Logf("Freeze(%s) #%d took %v", id, i+1, time.Since(began).Round(time.Microsecond))
	}
	wantFrozen(t, d, id, counter)

	for i := range 2 {
		began := time.Now()
		if err := f.Thaw(ctx, id); err != nil {
			t.Fatalf("Thaw(%s) #%d = %v", id, i+1, err)
		}
		t.Logf("Thaw(%s) #%d took %v", id, i+1, time.Since(began).Round(time.Microsecond))
	}
	last = waitCounting(t, counter, last)
	ping(t, d, id)

	// A daemon that dies with the sandbox frozen: the next one thaws it
	// in Recover.
	if tg.Reopen != nil {
		if err := f.Freeze(ctx, id); err != nil {
			t.Fatalf("Freeze(%s) = %v", id, err)
		}
		wantFrozen(t, d, id, counter)
		d = tg.Reopen(t)
		states, err := d.Recover(ctx)
		if err != nil {
			t.Fatalf("Recover() = %v", err)
		}
		if len(states) != 1 || states[0].ID != id || states[0].Status != driver.StatusRunning {
			t.Errorf("Recover() with %s frozen = %+v, want it running", id, states)
		}
		last = waitCounting(t, counter, readCounter(counter))
		ping(t, d, id)
		if f, ok = d.(driver.Freezer); !ok {
			t.Fatalf("the reopened driver %T is not a driver.Freezer", d)
		}
	}

	// Stop kills a frozen sandbox; a stopped one cannot be frozen.
	if err := f.Freeze(ctx, id); err != nil {
		t.Fatalf("Freeze(%s) = %v", id, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Stop(sctx, id); err != nil {
		t.Fatalf("Stop(%s) of a frozen sandbox = %v", id, err)
	}
	wantState(t, d, id, driver.StatusStopped)
	if n := readCounter(counter); n < last {
		t.Errorf("counter after Stop = %d, want at least %d", n, last)
	}
	for name, call := range map[string]func(context.Context, string) error{"Freeze": f.Freeze, "Thaw": f.Thaw} {
		if err := call(ctx, id); err == nil || errors.Is(err, driver.ErrNotFound) {
			t.Errorf("%s(%s) of a stopped sandbox = %v, want an error saying it is stopped", name, id, err)
		} else {
			t.Logf("%s(%s) of a stopped sandbox = %v", name, id, err)
		}
	}
}

// wantFrozen wants sandbox id, just frozen, to be running to State while
// the counter at path stands still and its agent does not answer, for
// frozenFor.
func wantFrozen(t *testing.T, d driver.Driver, id, counter string) {
	t.Helper()
	wantState(t, d, id, driver.StatusRunning)
	before, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), frozenFor)
	defer cancel()
	if res, err := agentClient(d, id).Ping(ctx); err == nil {
		t.Errorf("Ping(%s) of a frozen sandbox = %+v, want no answer", id, res)
	}
	<-ctx.Done()
	after, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the counter in frozen sandbox %s went from %q to %q in %v, want it to stand still", id, bytes.TrimSpace(before), bytes.TrimSpace(after), frozenFor)
	}
}

// waitCounting waits until the counter at path is at least 3 above from,
// and returns its value; it fails t after 20 seconds.
func waitCounting(t *testing.T, path string, from int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := readCounter(path)
		if n >= from+3 {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter %s = %d after 20s, want it counting from %d", path, n, from)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readCounter returns the counter at path, or -1 when it cannot be read.
func readCounter(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return -1
	}
	return n
}

// agentClient is a client of id's agent through d.Dial.
func agentClient(d driver.Driver, id string) *agent.Client {
	return agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, id) })
}
