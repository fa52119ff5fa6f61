// Package daemontest is a daemon in miniature for the tests of the doors
// (httpapi, spritesapi, mcpserver, and test/e2e's MCP conformance test): a
// real lifecycle.Service over a SQLite store in t.TempDir(), the
// directory-backed layers/fake holding the image "default", and
// driver/fake, whose every sandbox is a real hearth-agent served in the
// test's process (commands run as the test's own user, in the sandbox's
// home inside its root; see Env.Home). The node keeps images (package
// image, over the same layer store) and the service seals secrets and
// registry logins with a key of the test's. Tenant t1 exists with room to
// spare, and TokenA1 and TokenA2 authenticate its agents a1 and a2.
package daemontest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/image"
	layersfake "github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

// Principals of the tokens New makes.
var (
	AgentA1 = sandbox.Principal{Tenant: "t1", Agent: "a1", Role: sandbox.RoleAgent}
	AgentA2 = sandbox.Principal{Tenant: "t1", Agent: "a2", Role: sandbox.RoleAgent}
)

// Tokens of AgentA1 and AgentA2.
const (
	TokenA1 = "hearth_testtokenforagenta1"
	TokenA2 = "hearth_testtokenforagenta2"
)

// Env is the daemon's parts.
type Env struct {
	Svc    *lifecycle.Service
	DB     store.Store
	Driver *driverfake.Driver
}

// Options adjust New.
type Options struct {
	// MaxWriteBytes is lifecycle.Options.MaxWriteBytes.
	MaxWriteBytes int64
	// AgentQuota, if not zero, is tenant t1's agent quota (the default's
	// otherwise).
	AgentQuota int
}

// New builds an Env whose parts t's cleanup closes.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hearth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	lay := layersfake.New(t)
	if err := lay.Import(ctx, "default", fstest.MapFS{
		"home/sandbox": {Mode: fs.ModeDir | 0o755},
		// The sandbox user, as the default image has it: an image made
		// from a sandbox resolves its user in its root.
		"etc/passwd": {Data: []byte("root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000::/home/sandbox:/bin/sh\n"), Mode: 0o644},
		"etc/group":  {Data: []byte("root:x:0:\nsandbox:x:1000:\n"), Mode: 0o644},
	}); err != nil {
		t.Fatal(err)
	}
	drv := driverfake.New(driverfake.Options{})
	t.Cleanup(func() { drv.Close() }) // before the roots go
	images, err := image.New(image.Options{Layers: lay})
	if err != nil {
		t.Fatal(err)
	}
	local, err := node.NewLocal(node.Options{Driver: drv, Layers: lay, AgentPath: "/nonexistent/hearth-agent", Images: images, ImageDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	box, err := secrets.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lifecycle.New(lifecycle.Options{
		Store:         db,
		Node:          local,
		MaxWriteBytes: o.MaxWriteBytes,
		Secrets:       box,
	})
	if err != nil {
		t.Fatal(err)
	}
	operator := sandbox.Principal{Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator}
	t1 := sandbox.Tenant{Name: "t1", Allocation: sandbox.Resources{MilliCPU: 1 << 20, MemoryBytes: 1 << 45, DiskBytes: 1 << 48}}
	if o.AgentQuota != 0 {
		t1.Policy.AgentQuota = &o.AgentQuota
	}
	if _, err := svc.Tenancy.CreateTenant(ctx, operator, t1); err != nil {
		t.Fatal(err)
	}
	e := &Env{Svc: svc, DB: db, Driver: drv}
	e.AddToken(t, "tok-a1", TokenA1, AgentA1)
	e.AddToken(t, "tok-a2", TokenA2, AgentA2)
	return e
}

// AddToken stores secret as the token id of p (its agent need not exist).
func (e *Env) AddToken(t testing.TB, id, secret string, p sandbox.Principal) {
	t.Helper()
	sum := sha256.Sum256([]byte(secret))
	if err := e.DB.Tokens().Create(t.Context(), store.Token{ID: id, Hash: hex.EncodeToString(sum[:]), Principal: p, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
}

// Home returns the host directory that is the home of the sandbox ref
// names for p: where its commands start and its relative paths resolve.
func (e *Env) Home(t testing.TB, p sandbox.Principal, name string) string {
	t.Helper()
	tenant, stored, err := p.Locate(name)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.DB.Sandboxes().Get(t.Context(), tenant, stored)
	if err != nil {
		t.Fatalf("Sandboxes.Get(%s) = %v", name, err)
	}
	home := e.Driver.Home(sb.ID)
	if home == "" {
		t.Fatalf("the driver does not know sandbox %s (%s)", name, sb.ID)
	}
	return home
}

// TrustRegistry gives tenant t1 an anonymous login for the registry host
// (host:port), as its tenant admin would: what lets t1's agents pull from
// a registry on loopback.
func (e *Env) TrustRegistry(t testing.TB, host string) {
	t.Helper()
	admin := sandbox.Principal{Tenant: "t1", Agent: "boss", Role: sandbox.RoleTenantAdmin}
	if _, err := e.Svc.Images.Login(t.Context(), admin, sandbox.RegistryLogin{Host: host}, nil); err != nil {
		t.Fatal(err)
	}
}
