package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/door"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/testutil/daemontest"
)

// env is the API over a daemon in miniature (testutil/daemontest).
type env struct {
	url    string
	svc    *lifecycle.Service
	db     store.Store
	driver *driverfake.Driver
	token  string // an agent principal's token: tenant t1, agent a1
	// recorder is the audit log's recorder over db, with envOptions.audit.
	recorder *audit.Recorder
	d        *daemontest.Env
}

// Principals and tokens of the env.
var (
	agentA1 = daemontest.AgentA1
	agentA2 = daemontest.AgentA2
)

const (
	tokenA1 = daemontest.TokenA1
	tokenA2 = daemontest.TokenA2
)

// envOptions adjust newEnv.
type envOptions struct {
	maxWrite int64
	api      httpapi.Options
	// maxConnections is the chain's door.Options.MaxConnections.
	maxConnections int
	// audit keeps the audit log in the env's store (api.Audit and
	// api.AuditLog).
	audit bool
	// wrap, if set, wraps the API's handler (to watch what it reads).
	wrap func(http.Handler) http.Handler
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	d := daemontest.New(t, daemontest.Options{MaxWriteBytes: o.maxWrite})
	var rec *audit.Recorder
	chain := door.Options{Metrics: o.api.Metrics, MaxConnections: o.maxConnections}
	if o.api.Metrics != nil {
		chain.Counts = d.Svc.Sandboxes.Counts
	}
	if o.audit {
		rec = audit.New(d.DB.Audit(), nil)
		t.Cleanup(func() { rec.Close(context.Background()) }) // before the store closes
		o.api.Audit, o.api.AuditLog, chain.Audit = rec, d.DB.Audit(), rec
	}
	h := door.New(d.Svc.Tenancy, d.Svc.Sandboxes, chain).Handler(httpapi.New(d.Svc, o.api))
	if o.wrap != nil {
		h = o.wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, svc: d.Svc, db: d.DB, driver: d.Driver, token: tokenA1, recorder: rec, d: d}
}

// home returns the host directory that is sandbox name's home: where its
// commands start and its relative paths resolve.
func (e *env) home(t *testing.T, name string) string { return e.d.Home(t, agentA1, name) }

// client returns a client with agent a1's token.
func (e *env) client() *client.Client { return client.New(e.url, e.token, nil) }

// create makes sandbox name for agent a1.
func (e *env) create(t testing.TB, name string) {
	t.Helper()
	if _, _, err := e.client().Create(t.Context(), sandbox.CreateRequest{Name: name}); err != nil {
		t.Fatalf("Create(%s) = %v", name, err)
	}
}
