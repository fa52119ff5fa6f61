package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/client"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/httpapi"
	layersfake "github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

// env is a daemon in miniature: the API over a real lifecycle.Service with
// a SQLite store in t.TempDir(), the directory-backed layers/fake holding
// the image "default", and driver/fake, whose every sandbox is a real
// hearth-agent served in this process (commands run as the test's own
// user, in the sandbox's home inside its root; see env.home).
type env struct {
	url    string
	svc    *lifecycle.Service
	db     store.Store
	driver *driverfake.Driver
	token  string // an agent principal's token: tenant t1, agent a1
	// recorder is the audit log's recorder over db, with envOptions.audit.
	recorder *audit.Recorder
}

// Principals of the tokens newEnv makes.
var (
	agentA1 = sandbox.Principal{Tenant: "t1", Agent: "a1", Role: sandbox.RoleAgent}
	agentA2 = sandbox.Principal{Tenant: "t1", Agent: "a2", Role: sandbox.RoleAgent}
)

const (
	tokenA1 = "hearth_testtokenforagenta1"
	tokenA2 = "hearth_testtokenforagenta2"
)

// envOptions adjust newEnv.
type envOptions struct {
	maxWrite int64
	api      httpapi.Options
	// audit keeps the audit log in the env's store (api.Audit and
	// api.AuditLog).
	audit bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "hearth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for secret, p := range map[string]sandbox.Principal{tokenA1: agentA1, tokenA2: agentA2} {
		sum := sha256.Sum256([]byte(secret))
		if err := db.CreateToken(ctx, store.Token{ID: "tok-" + p.Agent, Hash: hex.EncodeToString(sum[:]), Principal: p, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}

	lay := layersfake.New(t)
	if err := lay.Import(ctx, "default", fstest.MapFS{"home/sandbox": {Mode: fs.ModeDir | 0o755}}); err != nil {
		t.Fatal(err)
	}
	drv := driverfake.New(driverfake.Options{})
	t.Cleanup(func() { drv.Close() }) // before the roots go

	svc, err := lifecycle.New(lifecycle.Options{
		Store:         db,
		Driver:        drv,
		Layers:        lay,
		AgentPath:     "/nonexistent/hearth-agent",
		MaxWriteBytes: o.maxWrite,
	})
	if err != nil {
		t.Fatal(err)
	}
	operator := sandbox.Principal{Tenant: "system", Agent: "operator", Role: sandbox.RoleOperator}
	if _, err := svc.CreateTenant(ctx, operator, sandbox.Tenant{Name: "t1", Allocation: sandbox.Resources{MilliCPU: 1 << 20, MemoryBytes: 1 << 45, DiskBytes: 1 << 48}}); err != nil {
		t.Fatal(err)
	}
	var rec *audit.Recorder
	if o.audit {
		rec = audit.New(db, nil)
		t.Cleanup(func() { rec.Close(context.Background()) }) // before the store closes
		o.api.Audit, o.api.AuditLog = rec, db
	}
	srv := httptest.NewServer(httpapi.New(svc, o.api))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, svc: svc, db: db, driver: drv, token: tokenA1, recorder: rec}
}

// home returns the host directory that is sandbox name's home: where its
// commands start and its relative paths resolve.
func (e *env) home(t *testing.T, name string) string {
	t.Helper()
	sb, err := e.db.GetSandbox(t.Context(), agentA1.Resolve(name))
	if err != nil {
		t.Fatalf("GetSandbox(%s) = %v", name, err)
	}
	home := e.driver.Home(sb.ID)
	if home == "" {
		t.Fatalf("the driver does not know sandbox %s (%s)", name, sb.ID)
	}
	return home
}

// client returns a client with agent a1's token.
func (e *env) client() *client.Client { return client.New(e.url, e.token, nil) }

// create makes sandbox name for agent a1.
func (e *env) create(t *testing.T, name string) {
	t.Helper()
	if _, _, err := e.client().Create(t.Context(), sandbox.CreateRequest{Name: name}); err != nil {
		t.Fatalf("Create(%s) = %v", name, err)
	}
}
