package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

// env is a daemon in miniature: the API over a real lifecycle.Service with
// a SQLite store in t.TempDir(), in-memory layers, and a driver whose every
// sandbox is one hearth-agent served in this process (commands run as the
// test's own user, in home).
type env struct {
	url   string
	svc   *lifecycle.Service
	db    store.Store
	home  string
	token string // an agent principal's token: tenant t1, agent a1
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

	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	if len(sock) > 100 {
		sock = filepath.Join(os.TempDir(), filepath.Base(dir)+".sock")
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	agentSrv := agent.NewServer(agent.Options{
		UID: os.Geteuid(), GID: os.Getegid(), Home: home,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8"},
	})
	served := make(chan error, 1)
	go func() { served <- agentSrv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		agentSrv.Shutdown(ctx)
		<-served
		os.Remove(sock)
	})

	svc, err := lifecycle.New(lifecycle.Options{
		Store:         db,
		Driver:        &fakeDriver{sock: sock, running: map[string]bool{}},
		Layers:        &fakeLayers{snaps: map[string]layers.Info{"default": {Key: "default", Kind: layers.KindCommitted}}},
		AgentPath:     "/nonexistent/hearth-agent",
		MaxWriteBytes: o.maxWrite,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(svc, o.api))
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, svc: svc, db: db, home: home, token: tokenA1}
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

// fakeDriver runs nothing: every sandbox it starts is the one in-process
// agent listening on sock.
type fakeDriver struct {
	sock    string
	mu      sync.Mutex
	running map[string]bool
}

var _ driver.Driver = (*fakeDriver)(nil)

func (d *fakeDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Runtime: "fake", Isolation: "container"}
}

func (d *fakeDriver) Start(ctx context.Context, spec driver.Spec) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running[spec.ID] = true
	return nil
}

func (d *fakeDriver) Dial(ctx context.Context, id string) (net.Conn, error) {
	d.mu.Lock()
	running := d.running[id]
	d.mu.Unlock()
	if !running {
		return nil, driver.ErrNotFound
	}
	var dialer net.Dialer
	return dialer.DialContext(ctx, "unix", d.sock)
}

func (d *fakeDriver) State(ctx context.Context, id string) (driver.State, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.running[id] {
		return driver.State{}, driver.ErrNotFound
	}
	return driver.State{ID: id, Status: driver.StatusRunning, PID: 1}, nil
}

func (d *fakeDriver) Stop(ctx context.Context, id string) error { return nil }

func (d *fakeDriver) Delete(ctx context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.running[id] {
		return driver.ErrNotFound
	}
	delete(d.running, id)
	return nil
}

func (d *fakeDriver) Recover(ctx context.Context) ([]driver.State, error) { return nil, nil }

// fakeLayers keeps snapshot metadata only.
type fakeLayers struct {
	mu    sync.Mutex
	snaps map[string]layers.Info
}

var _ layers.Store = (*fakeLayers)(nil)

func (l *fakeLayers) Prepare(ctx context.Context, key, parent string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.snaps[key]; ok {
		return "", layers.ErrExists
	}
	path := "/nonexistent/layers/" + key
	l.snaps[key] = layers.Info{Key: key, Kind: layers.KindActive, Parent: parent, Path: path}
	return path, nil
}

func (l *fakeLayers) Commit(ctx context.Context, name, key string) error {
	return errors.New("fakeLayers: Commit is not used by these tests")
}

func (l *fakeLayers) Stat(ctx context.Context, key string) (layers.Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	info, ok := l.snaps[key]
	if !ok {
		return layers.Info{}, layers.ErrNotFound
	}
	return info, nil
}

func (l *fakeLayers) Remove(ctx context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.snaps[key]; !ok {
		return layers.ErrNotFound
	}
	delete(l.snaps, key)
	return nil
}

func (l *fakeLayers) Usage(ctx context.Context, key string) (int64, error) { return 0, nil }
