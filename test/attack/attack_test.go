// Package attack_test is hearth's attack suite: each test plays a hostile
// tenant, with nothing but what a tenant has (an agent token, and the code
// it runs in its own sandboxes), against real daemons under every
// installed runtime, and checks the effect on the host or on the other
// tenant (a host file unchanged, no connection received, memory bounded),
// not only the status code the attack got. docs/SECURITY.md is the threat
// model these tests hold hearth to.
package attack_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hearth/hearth/testutil/daemonproc"
)

// TestMain removes the binaries built for the suite's daemons.
func TestMain(m *testing.M) {
	code := m.Run()
	daemonproc.Cleanup()
	os.Exit(code)
}

// ctxT is a context for one test, ended by its cleanup.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
