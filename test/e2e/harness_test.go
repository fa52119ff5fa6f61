package e2e_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/kubetest"
	"github.com/hearth/hearth/testutil/pgtest"
)

// bins are the binaries the package's daemons run (set by requireDaemon).
var bins daemonproc.Binaries

// TestMain removes the binaries built for the package's daemons.
func TestMain(m *testing.M) {
	code := m.Run()
	daemonproc.Cleanup()
	pgtest.Stop()
	kubetest.Stop()
	os.Exit(code)
}

// requireDaemon skips unless this host can run hearth (root, a runtime,
// the image cache) and returns the path of the hearth binary.
func requireDaemon(t testing.TB) string {
	t.Helper()
	bins = daemonproc.Require(t)
	return bins.Hearth
}

// forEachRuntime runs f as a subtest per installed runtime.
func forEachRuntime(t *testing.T, f func(t *testing.T, runtime string)) {
	requireDaemon(t)
	daemonproc.ForEachRuntime(t, f)
}

// daemon is one `hearth serve` process on a temporary data dir, with the
// helpers of this package's tests.
type daemon struct{ *daemonproc.Daemon }

// newDaemon starts hearth serve with its own data dir (see daemonproc.New).
func newDaemon(t testing.TB, runtime string, serveArgs ...string) *daemon {
	t.Helper()
	requireDaemon(t)
	return &daemon{daemonproc.New(t, runtime, serveArgs...)}
}

// runscDaemon is newDaemon under runsc, for what only gVisor does
// (memory checkpoints); t is skipped where runsc is not installed.
func runscDaemon(t testing.TB) *daemon {
	t.Helper()
	requireDaemon(t)
	if !slices.Contains(bins.Runtimes, "runsc") {
		t.Skip("memory checkpoints need runsc, which is not installed")
	}
	return newDaemon(t, "runsc")
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
