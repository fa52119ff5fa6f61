// Package drivertest is the conformance suite every driver.Driver passes,
// and the helpers its tests share: a static hearth-agent built from this
// module, and a cheap writable root filesystem per sandbox over a cached
// read-only image.
//
// A driver's test calls Run with a Config that makes a fresh driver per
// test; the suite starts real sandboxes with the real agent and talks to
// them through Dial, so it needs whatever the driver needs (for driver/oci:
// root and a runtime).
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/sandbox"
)

// Target is one driver under test, with what the suite needs to see
// through it.
type Target struct {
	// Driver is a driver with state of its own, not shared with any other
	// test.
	Driver driver.Driver
	// Reopen returns another Driver value over the same state, as a
	// daemon restarted on the same host would build it. Nil skips the
	// restart test.
	Reopen func(t *testing.T) driver.Driver
	// Leftovers describes what the host still holds for sandbox id
	// (processes, cgroups, directories, runtime state); the suite calls it
	// after Delete and after a failed Start and wants nothing. Nil skips
	// those checks.
	Leftovers func(id string) []string
	// AsRoot runs script with /bin/sh as root inside sandbox id, by the
	// runtime's own means (not through the agent), and returns its
	// combined output: the hostile tests' attacker. Nil makes them act
	// through a setuid-root copy of bash in the root (see
	// installRootHelper), which gVisor does not honour.
	AsRoot func(ctx context.Context, id, script string) (string, error)
	// ConsoleLog returns the host file that sandbox id's agent's own
	// output goes to, which AgentOutOfReach checks root inside cannot
	// write; nil skips that check.
	ConsoleLog func(id string) string
}

// Config describes the driver to test.
type Config struct {
	// New returns a fresh Target for one test; it registers its own
	// cleanup with t.
	New func(t *testing.T) Target
	// RootFS returns a writable root filesystem for one sandbox, removed
	// in t's cleanup (see OverlayRootFS).
	RootFS func(t *testing.T) string
	// AgentPath is the host path of a static hearth-agent (see BuildAgent).
	AgentPath string
	// StartTimeout bounds each Start; zero means 60 seconds.
	StartTimeout time.Duration
	// NewDNS is New for a driver whose network host serves sandboxes
	// DNS, forwarding their queries to upstream: a test name server of
	// the suite's own on 127.0.0.1 (see NewTestDNS), reached from the
	// test's process. Nil skips the name service test (EgressDNS), as
	// does a driver whose Capabilities do not say Egress.
	NewDNS func(t *testing.T, upstream netip.AddrPort) Target
}

// Run runs the conformance suite: the lifecycle of one sandbox (start,
// state, dial, stop, wake, delete), two sandboxes side by side, survival of a
// driver restart, start failures that leave nothing behind, errors for
// unknown ids, commands on a terminal of the sandbox's own, connections
// to a server in the sandbox through its agent, and what root in a hostile
// sandbox can make of the agent's channel (HostileChannel, HostileSwaps,
// CrossTenant) and, in a container, of the host (HostRoot: see hostile.go);
// for a driver that
// implements an optional capability, that capability (Freeze:
// driver.Freezer; MemoryCheckpoint: driver.MemoryCheckpointer); and for one whose Capabilities say Egress, the egress
// network policy and the network caps of Resources, against test hosts of
// its own on this machine (Egress, EgressLimits: see NewTestHost), its
// own egress rules at Start and changed live (EgressRules:
// driver.EgressSetter), and,
// with Config.NewDNS, names resolved through the host (EgressDNS, against
// a name server of its own: see NewTestDNS) and egress rules by domain
// (EgressDomains).
func Run(t *testing.T, cfg Config) {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	s := &suite{cfg: cfg}
	t.Run("Unknown", s.testUnknown)
	t.Run("Lifecycle", s.testLifecycle)
	t.Run("StartRunning", s.testStartRunning)
	t.Run("Concurrent", s.testConcurrent)
	t.Run("Restart", s.testRestart)
	t.Run("StartFailure", s.testStartFailure)
	t.Run("TTY", s.testTTY)
	t.Run("Connect", s.testConnect)
	t.Run("HostileChannel", s.testHostileChannel)
	t.Run("HostileSwaps", s.testHostileSwaps)
	t.Run("CrossTenant", s.testCrossTenant)
	t.Run("HostRoot", s.testHostRoot)
	t.Run("AgentOutOfReach", s.testAgentOutOfReach)
	t.Run("Freeze", s.testFreeze)
	t.Run("MemoryCheckpoint", s.testMemoryCheckpoint)
	t.Run("MemoryCheckpointStop", s.testMemoryCheckpointStop)
	t.Run("Egress", s.testEgress)
	t.Run("EgressLimits", s.testEgressLimits)
	t.Run("EgressRules", s.testEgressRules)
	t.Run("EgressDNS", s.testEgressDNS)
	t.Run("EgressDomains", s.testEgressDomains)
}

type suite struct {
	cfg Config
}

// newID returns a fresh sandbox id, valid for every driver.
func newID() string {
	var b [10]byte
	rand.Read(b[:])
	return "dt" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:14]
}

// spec returns a spec for a new sandbox on a fresh root.
func (s *suite) spec(t *testing.T) driver.Spec {
	t.Helper()
	id := newID()
	return driver.Spec{
		ID:        id,
		RootFS:    s.cfg.RootFS(t),
		AgentPath: s.cfg.AgentPath,
		Hostname:  "sb-" + id,
		Env:       []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HEARTH_TEST=1"},
		UID:       1000,
		GID:       1000,
		Home:      "/home/sandbox",
		Resources: sandbox.Resources{MilliCPU: 1000, MemoryBytes: 256 << 20, Pids: 128},
	}
}

// start starts spec on d and registers its deletion.
func (s *suite) start(t *testing.T, d driver.Driver, spec driver.Spec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.StartTimeout)
	defer cancel()
	began := time.Now()
	if err := d.Start(ctx, spec); err != nil {
		t.Fatalf("Start(%s) = %v", spec.ID, err)
	}
	t.Logf("Start(%s) took %v", spec.ID, time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Delete(ctx, spec.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("cleanup: Delete(%s) = %v", spec.ID, err)
		}
	})
}

// ping pings the agent of id through d.Dial and wants it to be PID 1.
func ping(t *testing.T, d driver.Driver, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, id) })
	res, err := c.Ping(ctx)
	if err != nil {
		t.Fatalf("Ping(%s) through Dial = %v", id, err)
	}
	if res.PID != 1 || res.Version != agent.ProtocolVersion {
		t.Errorf("Ping(%s) = %+v, want pid 1 and version %d", id, res, agent.ProtocolVersion)
	}
}

// wantState wants id's status on d.
func wantState(t *testing.T, d driver.Driver, id string, want driver.Status) driver.State {
	t.Helper()
	st, err := d.State(t.Context(), id)
	if err != nil {
		t.Fatalf("State(%s) = %v, want %s", id, err, want)
	}
	if st.ID != id || st.Status != want {
		t.Fatalf("State(%s) = %+v, want status %s", id, st, want)
	}
	if want == driver.StatusRunning && st.PID <= 0 {
		t.Errorf("State(%s).PID = %d, want the host pid of its init", id, st.PID)
	}
	if want == driver.StatusStopped && st.OOMKilled {
		t.Errorf("State(%s).OOMKilled = true for a sandbox that was stopped", id)
	}
	return st
}

// wantGone wants id unknown to d and, when the target can tell, nothing of
// it left on the host.
func wantGone(t *testing.T, tg Target, d driver.Driver, id string) {
	t.Helper()
	ctx := t.Context()
	if _, err := d.State(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("State(%s) after delete = %v, want ErrNotFound", id, err)
	}
	if c, err := d.Dial(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Dial(%s) after delete = %v, want ErrNotFound", id, err)
	}
	if err := d.Stop(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Stop(%s) after delete = %v, want ErrNotFound", id, err)
	}
	if err := d.Delete(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Delete(%s) twice = %v, want ErrNotFound", id, err)
	}
	if tg.Leftovers != nil {
		if left := tg.Leftovers(id); len(left) > 0 {
			t.Errorf("after Delete(%s), left on the host:\n%s", id, strings.Join(left, "\n"))
		}
	}
}

func (s *suite) testUnknown(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	if caps := d.Capabilities(); caps.Runtime == "" || caps.Isolation == "" {
		t.Errorf("Capabilities() = %+v, want runtime and isolation", caps)
	}
	states, err := d.Recover(t.Context())
	if err != nil || len(states) != 0 {
		t.Errorf("Recover() on a fresh driver = %v, %v; want none", states, err)
	}
	wantGone(t, Target{}, d, newID())
}

// testLifecycle: start → running → ping → stop (twice) → stopped → dial
// fails → wake on the same root → ping → delete → gone.
func (s *suite) testLifecycle(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	spec := s.spec(t)
	id := spec.ID
	s.start(t, d, spec)
	first := wantState(t, d, id, driver.StatusRunning)
	ping(t, d, id)

	// The root is the host's: a file written there now is in the sandbox
	// after a wake, and the driver left its data alone.
	marker := filepath.Join(spec.RootFS, "home", "drivertest-marker")
	if err := os.WriteFile(marker, []byte(id), 0o644); err != nil {
		t.Fatal(err)
	}
	// /tmp is the root's too (gVisor mounts a tmpfs there unless told
	// otherwise), so what a command leaves in /tmp survives a stop and is
	// in the root that checkpoints snapshot.
	if res, err := agentClient(d, id).Exec(t.Context(), sandbox.ExecRequest{Shell: "echo " + id + " > /tmp/drivertest-tmp"}, nil, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("write /tmp in %s: %+v, %v", id, res, err)
	}
	if b, err := os.ReadFile(filepath.Join(spec.RootFS, "tmp", "drivertest-tmp")); err != nil || string(b) != id+"\n" {
		t.Errorf("/tmp/drivertest-tmp in the root = %q, %v; want the sandbox's /tmp to be the root's", b, err)
	}
	// A command's environment is the spec's, and nothing the driver set
	// for the agent alone (the OCI driver's GOMAXPROCS).
	var env strings.Builder
	if res, err := agentClient(d, id).Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"env"}}, nil, &env, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("env in %s: %+v, %v", id, res, err)
	}
	if vars := strings.Split(env.String(), "\n"); !slices.Contains(vars, "HEARTH_TEST=1") || slices.ContainsFunc(vars, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
		t.Errorf("a command's environment = %q, want the spec's (HEARTH_TEST=1) and no GOMAXPROCS", vars)
	}

	for i := range 2 {
		if err := d.Stop(t.Context(), id); err != nil {
			t.Fatalf("Stop(%s) #%d = %v", id, i+1, err)
		}
		wantState(t, d, id, driver.StatusStopped)
	}
	if c, err := d.Dial(t.Context(), id); err == nil {
		c.Close()
		t.Errorf("Dial(%s) of a stopped sandbox succeeded", id)
	}
	if first.PID > 0 && processExists(first.PID) {
		t.Errorf("init pid %d of stopped sandbox %s still exists", first.PID, id)
	}

	// Wake.
	s.start(t, d, spec)
	wantState(t, d, id, driver.StatusRunning)
	ping(t, d, id)
	if b, err := os.ReadFile(marker); err != nil || string(b) != id {
		t.Errorf("root after wake: marker = %q, %v; want %q", b, err, id)
	}

	if err := d.Delete(t.Context(), id); err != nil {
		t.Fatalf("Delete(%s) = %v", id, err)
	}
	wantGone(t, tg, d, id)
	if _, err := os.Stat(filepath.Join(spec.RootFS, "etc")); err != nil {
		t.Errorf("Delete(%s) touched the root filesystem: %v", id, err)
	}
}

// testStartRunning: starting a running sandbox fails and leaves it running.
func (s *suite) testStartRunning(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	spec := s.spec(t)
	s.start(t, d, spec)
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.StartTimeout)
	defer cancel()
	if err := d.Start(ctx, spec); err == nil {
		t.Errorf("Start(%s) of a running sandbox succeeded, want an error", spec.ID)
	}
	wantState(t, d, spec.ID, driver.StatusRunning)
	ping(t, d, spec.ID)
}

// testConcurrent: two sandboxes started at once are independent; stopping
// one leaves the other answering.
func (s *suite) testConcurrent(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	specs := []driver.Spec{s.spec(t), s.spec(t)}
	var wg sync.WaitGroup
	errs := make([]error, len(specs))
	for i, spec := range specs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), s.cfg.StartTimeout)
			defer cancel()
			errs[i] = d.Start(ctx, spec)
		})
	}
	wg.Wait()
	for i, spec := range specs {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := d.Delete(ctx, spec.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
				t.Errorf("cleanup: Delete(%s) = %v", spec.ID, err)
			}
		})
		if errs[i] != nil {
			t.Fatalf("concurrent Start(%s) = %v", spec.ID, errs[i])
		}
	}
	a, b := specs[0].ID, specs[1].ID
	sa := wantState(t, d, a, driver.StatusRunning)
	sb := wantState(t, d, b, driver.StatusRunning)
	if sa.PID == sb.PID {
		t.Errorf("sandboxes %s and %s share init pid %d", a, b, sa.PID)
	}
	ping(t, d, a)
	ping(t, d, b)

	if err := d.Stop(t.Context(), a); err != nil {
		t.Fatalf("Stop(%s) = %v", a, err)
	}
	wantState(t, d, a, driver.StatusStopped)
	wantState(t, d, b, driver.StatusRunning)
	ping(t, d, b)

	if err := d.Delete(t.Context(), a); err != nil {
		t.Fatalf("Delete(%s) = %v", a, err)
	}
	wantGone(t, tg, d, a)
	ping(t, d, b)
}

// testRestart: a new driver value on the same state finds the running
// sandbox with Recover and reaches its agent; the old one is simply
// dropped, as a killed daemon would drop it.
func (s *suite) testRestart(t *testing.T) {
	tg := s.cfg.New(t)
	if tg.Reopen == nil {
		t.Skip("the target has no Reopen")
	}
	running, stopped := s.spec(t), s.spec(t)
	s.start(t, tg.Driver, running)
	s.start(t, tg.Driver, stopped)
	if err := tg.Driver.Stop(t.Context(), stopped.ID); err != nil {
		t.Fatalf("Stop(%s) = %v", stopped.ID, err)
	}
	before := wantState(t, tg.Driver, running.ID, driver.StatusRunning)

	d := tg.Reopen(t)
	states, err := d.Recover(t.Context())
	if err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	got := map[string]driver.State{}
	for _, st := range states {
		got[st.ID] = st
	}
	if st := got[running.ID]; st.Status != driver.StatusRunning || st.PID != before.PID {
		t.Errorf("Recover()[%s] = %+v, want running with pid %d", running.ID, st, before.PID)
	}
	if st := got[stopped.ID]; st.Status != driver.StatusStopped {
		t.Errorf("Recover()[%s] = %+v, want stopped", stopped.ID, st)
	}
	if len(states) != 2 {
		t.Errorf("Recover() = %+v, want exactly the 2 sandboxes", states)
	}
	ping(t, d, running.ID)

	// The new driver owns them now: wake and delete through it.
	s.start(t, d, stopped)
	ping(t, d, stopped.ID)
	for _, id := range []string{running.ID, stopped.ID} {
		if err := d.Delete(t.Context(), id); err != nil {
			t.Fatalf("Delete(%s) through the new driver = %v", id, err)
		}
		wantGone(t, tg, d, id)
	}
}

// testStartFailure: a start that cannot work fails, within its context,
// and leaves nothing behind: a missing agent, an agent that exits at once,
// and one that never answers.
func (s *suite) testStartFailure(t *testing.T) {
	dir := t.TempDir()
	exits := filepath.Join(dir, "exits")
	hangs := filepath.Join(dir, "hangs")
	writeScript(t, exits, "#!/bin/sh\necho drivertest: agent exits at once >&2\nexit 3\n")
	writeScript(t, hangs, "#!/bin/sh\nexec sleep 600\n")
	for _, tc := range []struct {
		name    string
		agent   string
		timeout time.Duration
	}{
		{"MissingAgent", filepath.Join(dir, "no-such-agent"), s.cfg.StartTimeout},
		{"AgentExits", exits, s.cfg.StartTimeout},
		{"AgentNeverAnswers", hangs, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := s.cfg.New(t)
			d := tg.Driver
			spec := s.spec(t)
			spec.AgentPath = tc.agent
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			began := time.Now()
			err := d.Start(ctx, spec)
			took := time.Since(began)
			if err == nil {
				d.Delete(context.Background(), spec.ID)
				t.Fatalf("Start(%s) with agent %s succeeded, want an error", spec.ID, tc.agent)
			}
			t.Logf("Start(%s) = %v (after %v)", spec.ID, err, took.Round(time.Millisecond))
			if took > tc.timeout+10*time.Second {
				t.Errorf("Start(%s) failed after %v, want within its context's %v", spec.ID, took, tc.timeout)
			}
			wantGone(t, tg, d, spec.ID)
			if states, err := d.Recover(t.Context()); err != nil || slices.ContainsFunc(states, func(st driver.State) bool { return st.ID == spec.ID }) {
				t.Errorf("Recover() after a failed start = %+v, %v; want no %s", states, err, spec.ID)
			}
		})
	}
}

func writeScript(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// processExists reports whether pid is a live (not zombie) process.
func processExists(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
