// Package load_test drives a real hearth daemon under load through the Go
// client: creates at a concurrency, busy exec loops, a probe beside
// CPU-bound neighbours, density of idle sandboxes, a fill of the host
// until the daemon refuses a create for memory, and a soak of agent
// identities with the daemon SIGKILLed and restarted (see
// docs/BENCHMARKS.md, "Under load").
//
// Each test starts its own `hearth serve` (testutil/daemonproc, under runsc
// unless HEARTH_LOAD_RUNTIME names another runtime), or drives the daemon
// at HEARTH_URL with the operator token HEARTH_TOKEN (then the soak does
// not kill it and checks no host leftovers). HEARTH_LOAD picks the sizes:
// short (the default, a few minutes in all, what `go test ./...` runs) or
// full; HEARTH_LOAD_DENSITY overrides the density scenario's count,
// HEARTH_LOAD_PROBES the neighbour scenario's probes, and
// HEARTH_LOAD_SERVE_ARGS adds flags to the daemon a test starts (to compare
// settings, e.g. --runtime-flag=--systrap-disable-fast-path).
//
// Every scenario logs p50/p99/max latency, throughput and errors by code,
// and one summary line starting "load:". A test fails on an error that
// carries no code, a call that got no answer within its bound, lost data,
// and anything of the daemon left on the host.
package load_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestMain removes the binaries built for the package's daemons.
func TestMain(m *testing.M) {
	code := m.Run()
	daemonproc.Cleanup()
	os.Exit(code)
}

// sizes are the scenarios' sizes (see loadSizes).
type sizes struct {
	full                  bool
	creates, createConc   int
	busyActive, busyTotal int
	busyFor               time.Duration
	neighbours, probes    int
	density               int
	soakAgents, soakBoxes int
	soakFor, soakKill     time.Duration
}

// loadSizes reads HEARTH_LOAD (short or full), and the overrides
// HEARTH_LOAD_DENSITY, HEARTH_LOAD_PROBES (the neighbour scenario's probes
// in each of its phases), HEARTH_LOAD_SOAK (the soak's duration) and
// HEARTH_LOAD_SOAK_KILL (its kill period; 0: no kills).
func loadSizes(t testing.TB) sizes {
	t.Helper()
	s := sizes{creates: 20, createConc: 5, busyActive: 5, busyTotal: 20, busyFor: 10 * time.Second,
		neighbours: 4, probes: 40, density: 20,
		soakAgents: 4, soakBoxes: 2, soakFor: 90 * time.Second, soakKill: 30 * time.Second}
	switch mode := os.Getenv("HEARTH_LOAD"); mode {
	case "", "short":
	case "full":
		s = sizes{full: true, creates: 100, createConc: 10, busyActive: 20, busyTotal: 100, busyFor: time.Minute,
			neighbours: 10, probes: 1000, density: 500,
			soakAgents: 20, soakBoxes: 5, soakFor: 30 * time.Minute, soakKill: 5 * time.Minute}
	default:
		t.Fatalf("HEARTH_LOAD=%q: want short or full", mode)
	}
	for env, d := range map[string]*time.Duration{"HEARTH_LOAD_SOAK": &s.soakFor, "HEARTH_LOAD_SOAK_KILL": &s.soakKill} {
		if v := os.Getenv(env); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil || *d < 0 {
				t.Fatalf("%s=%q: want a duration (0 for no kills)", env, v)
			}
		}
	}
	countEnv(t, "HEARTH_LOAD_DENSITY", "sandboxes", &s.density)
	countEnv(t, "HEARTH_LOAD_PROBES", "probes", &s.probes)
	return s
}

// countEnv sets *n from the environment variable env when it is set, a
// count (of what) of at least one.
func countEnv(t testing.TB, env, what string, n *int) {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return
	}
	c, err := strconv.Atoi(v)
	if err != nil || c < 1 {
		t.Fatalf("%s=%q: want a count of %s", env, v, what)
	}
	*n = c
}

// httpClient is shared by every client of the package: one pool of
// keep-alive connections large enough for the busiest scenario, so that
// loops of calls do not pile up sockets in TIME_WAIT.
var httpClient = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	MaxIdleConns:        512,
	MaxIdleConnsPerHost: 512,
	IdleConnTimeout:     time.Minute,
}}

// target is the daemon a test drives: its own (d) or an existing one.
type target struct {
	t *testing.T
	// d is the test's own daemon; nil when driving HEARTH_URL's.
	d *daemonproc.Daemon
	// prefix starts every sandbox name the test makes.
	prefix string

	mu         sync.Mutex
	url, token string
}

// newTarget starts a daemon with serveArgs (no warm pool unless they ask
// for one), or returns HEARTH_URL's; there, the test's sandboxes are
// destroyed at its end.
func newTarget(t *testing.T, serveArgs ...string) *target {
	t.Helper()
	if u := os.Getenv("HEARTH_URL"); u != "" {
		tok := os.Getenv("HEARTH_TOKEN")
		if tok == "" {
			t.Fatal("HEARTH_URL is set without HEARTH_TOKEN, an operator token of that daemon")
		}
		var b [3]byte
		rand.Read(b[:])
		tg := &target{t: t, prefix: "load" + hex.EncodeToString(b[:]) + "-", url: u, token: tok}
		t.Cleanup(tg.destroyOwn)
		return tg
	}
	b := daemonproc.Require(t)
	rt := os.Getenv("HEARTH_LOAD_RUNTIME")
	if rt == "" {
		rt = "runsc"
	}
	if !slices.Contains(b.Runtimes, rt) {
		testenv.Skip(t, "the load tests run under %s, which is not installed (./scripts/install.sh)", rt)
	}
	serveArgs = append(serveArgs, strings.Fields(os.Getenv("HEARTH_LOAD_SERVE_ARGS"))...)
	d := daemonproc.New(t, rt, serveArgs...)
	return &target{t: t, d: d, prefix: "ld-", url: d.URL, token: d.Token}
}

// client returns a client of the current daemon run with token ("" for
// the operator's).
func (tg *target) client(token string) *client.Client {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if token == "" {
		token = tg.token
	}
	return client.New(tg.url, token, &client.Options{HTTPClient: httpClient})
}

// restart SIGKILLs the test's daemon and starts it again on its data dir;
// clients made after it reach the new run.
func (tg *target) restart() {
	tg.t.Helper()
	tg.d.Kill()
	tg.d.Start()
	tg.mu.Lock()
	tg.url, tg.token = tg.d.URL, tg.d.Token
	tg.mu.Unlock()
}

// destroyOwn destroys the sandboxes of an existing daemon whose names
// start with the test's prefix.
func (tg *target) destroyOwn() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := tg.client("")
	list, err := c.List(ctx)
	if err != nil {
		tg.t.Errorf("list the test's sandboxes to destroy them: %v", err)
		return
	}
	for _, sb := range list {
		if len(sb.Name) >= len(tg.prefix) && sb.Name[:len(tg.prefix)] == tg.prefix {
			if err := c.Destroy(ctx, sandbox.Ref(sb.Tenant, sb.Name)); err != nil && !sandbox.IsCode(err, sandbox.CodeNotFound) {
				tg.t.Errorf("destroy %s: %v", sb.Name, err)
			}
		}
	}
}

// name is the test's sandbox name for what.
func (tg *target) name(format string, args ...any) string {
	return tg.prefix + fmt.Sprintf(format, args...)
}

// ctxFor is a context for a whole scenario, ended by the test's end.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exitError is a command that ran but did not exit 0.
type exitError struct{ res sandbox.ExecResult }

func (e *exitError) Error() string {
	return fmt.Sprintf("exit %d (signal %q, timed out %v)", e.res.ExitCode, e.res.Signal, e.res.TimedOut)
}

// execTrue runs `true` in sandbox name; a non-zero exit is an *exitError.
func execTrue(ctx context.Context, c *client.Client, name string) error {
	res, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
	if err == nil && res.ExitCode != 0 {
		err = &exitError{res}
	}
	return err
}

// cliTrue runs `true` in sandbox name through the hearth CLI against d;
// a non-zero exit is an error that says it, with the CLI's stderr.
func cliTrue(d *daemonproc.Daemon, name string) error {
	if _, stderr, code := d.CLI("", "exec", name, "--", "true"); code != 0 {
		return fmt.Errorf("hearth exec %s -- true: exit %d: %s", name, code, strings.TrimSpace(stderr))
	}
	return nil
}

// codeOf classifies err for the counts: "" for nil, the sandbox.Error's
// code, "no_answer" when the call's own deadline passed first, "exit_N"
// for a command that failed, and "uncoded" for any other error, which
// the daemon and the client must never return.
func codeOf(err error) string {
	var se *sandbox.Error
	var ee *exitError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		return string(se.Code)
	case errors.As(err, &ee):
		return fmt.Sprintf("exit_%d", ee.res.ExitCode)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "no_answer"
	}
	return "uncoded"
}

// parallel runs f(0) … f(n-1) on conc goroutines and waits for them.
func parallel(n, conc int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(conc, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
