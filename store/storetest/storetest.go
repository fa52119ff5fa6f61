// Package storetest is the conformance suite for store.Store. Every
// implementation runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return openEmpty(t) })
//		storetest.RunReopen(t, func(t *testing.T) (store.Store, func() store.Store) {
//			… return a store and a function that opens the same state again
//		})
//	}
//
// The suite checks the promises in the documentation of store.Store and its
// views, including the ones a single-threaded test would miss: concurrent
// creates of one name have exactly one winner and no transient "busy"
// errors, and state survives Close.
package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// OpenFunc returns a new store over empty state, isolated from every other
// store it returns (subtests may run in any order). It reports its own
// failures through t. The suite closes every store it opens; open may also
// register Close with t.Cleanup, since Close is idempotent.
type OpenFunc func(t *testing.T) store.Store

// ReopenFunc is like OpenFunc, and also returns reopen, which opens the same
// state again. RunReopen closes the first store before it calls reopen.
type ReopenFunc func(t *testing.T) (s store.Store, reopen func() store.Store)

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, open OpenFunc) {
	tests := []struct {
		name string
		fn   func(*testing.T, OpenFunc)
	}{
		{"Sandbox/RoundTrip", testSandboxRoundTrip},
		{"Sandbox/EmptyKey", testSandboxEmptyKey},
		{"Sandbox/Conflict", testSandboxConflict},
		{"Sandbox/NamesPerTenant", testSandboxNamesPerTenant},
		{"Sandbox/GetMissing", testSandboxGetMissing},
		{"Sandbox/ByID", testSandboxByID},
		{"Sandbox/Update", testSandboxUpdate},
		{"Sandbox/UpdateConflict", testSandboxUpdateConflict},
		{"Sandbox/Swap", testSandboxSwap},
		{"Sandbox/DeleteIf", testSandboxDeleteIf},
		{"Sandbox/List", testSandboxList},
		{"Sandbox/ListTies", testSandboxListTies},
		{"Sandbox/Delete", testSandboxDelete},
		{"Sandbox/Head", testSandboxHead},
		{"Sandbox/Statuses", testSandboxStatuses},
		{"Sandbox/UsingImage", testSandboxUsingImage},
		{"Checkpoint/RoundTrip", testCheckpointRoundTrip},
		{"Checkpoint/EmptyKey", testCheckpointEmptyKey},
		{"Checkpoint/Conflict", testCheckpointConflict},
		{"Checkpoint/MissingSandbox", testCheckpointMissingSandbox},
		{"Checkpoint/GetMissing", testCheckpointGetMissing},
		{"Checkpoint/List", testCheckpointList},
		{"Checkpoint/Delete", testCheckpointDelete},
		{"Checkpoint/SetMemory", testCheckpointSetMemory},
		{"Checkpoint/SandboxDeleted", testCheckpointSandboxDeleted},
		{"Token/RoundTrip", testTokenRoundTrip},
		{"Token/Conflict", testTokenConflict},
		{"Token/EmptyKey", testTokenEmptyKey},
		{"Token/List", testTokenList},
		{"Token/Revoke", testTokenRevoke},
		{"Tenant/RoundTrip", testTenantRoundTrip},
		{"Tenant/EmptyName", testTenantEmptyName},
		{"Tenant/Conflict", testTenantConflict},
		{"Tenant/GetMissing", testTenantGetMissing},
		{"Tenant/List", testTenantList},
		{"Tenant/Update", testTenantUpdate},
		{"Agent/Create", testAgentCreate},
		{"Agent/List", testAgentList},
		{"Agent/NamesPerTenant", testAgentNamesPerTenant},
		{"Audit/RoundTrip", testAuditRoundTrip},
		{"Audit/IDs", testAuditIDs},
		{"Audit/ZeroTime", testAuditZeroTime},
		{"Audit/List", testAuditList},
		{"Audit/SandboxPrefix", testAuditSandboxPrefix},
		{"Audit/On", testAuditOn},
		{"Audit/Delete", testAuditDelete},
		{"Audit/Cancelled", testAuditCancelled},
		{"Secrets", testSecrets},
		{"Bindings", testBindings},
		{"Gone", testGone},
		{"Image/RoundTrip", testImageRoundTrip},
		{"Image/PutErrors", testImagePutErrors},
		{"Image/Current", testImageCurrent},
		{"Image/CurrentRace", testImageCurrentRace},
		{"Image/Tenants", testImageTenants},
		{"Image/Public", testImagePublic},
		{"Image/Delete", testImageDelete},
		{"Image/List", testImageList},
		{"Image/Bytes", testImageBytes},
		{"RegistryLogin/Put", testRegistryLoginPut},
		{"RegistryLogin/Tenants", testRegistryLoginTenants},
		{"BuildSteps", testBuildSteps},
		{"Admissions/Rates", testRates},
		{"Admissions/Lock", testLock},
		{"Admissions/LockExcludes", testLockExcludes},
		{"Nodes", testNodes},
		{"Leases", testLeases},
		{"Leases/Race", testLeaseRace},
		{"Changes", testNotices},
		{"Schema", testSchema},
		{"Concurrent/Creates", testConcurrentCreates},
		{"Concurrent/Swaps", testConcurrentSwaps},
		{"Concurrent/SwapOrDelete", testSwapOrDelete},
		{"Concurrent/Tenants", testConcurrentTenants},
		{"Context/Cancelled", testCancelled},
		{"Context/CancelledTenants", testTenantCancelled},
		{"Close/Idempotent", testCloseIdempotent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

// RunReopen checks that everything written before Close is there after a
// reopen, and that the reopened store takes new writes.
func RunReopen(t *testing.T, open ReopenFunc) {
	t.Run("Reopen", func(t *testing.T) { testReopen(t, open) })
	t.Run("ReopenRates", func(t *testing.T) { testReopenRates(t, open) })
}

// openStore opens a store and closes it when the test ends.
func openStore(t *testing.T, open OpenFunc) store.Store {
	t.Helper()
	s := open(t)
	if s == nil {
		t.Fatal("open returned a nil store")
	}
	closeAtEnd(t, s)
	return s
}

// closeAtEnd closes s when t ends, reporting a failure.
func closeAtEnd(t *testing.T, s store.Store) {
	t.Helper()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	})
}

// t0 is the suite's epoch: microsecond precision (the contract's minimum)
// and not in UTC, so that an implementation must convert.
var t0 = time.Date(2025, time.March, 14, 15, 9, 26, 535_897_000, time.FixedZone("UTC+1", 3600))

// at returns t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// newSandbox returns a sandbox with every field set, created at created.
func newSandbox(id, name, tenant, owner string, created time.Time) sandbox.Sandbox {
	return sandbox.Sandbox{
		ID:          id,
		Name:        name,
		Tenant:      tenant,
		Owner:       owner,
		Image:       "docker.io/library/debian:12",
		ImageDigest: "sha256:" + strings.Repeat("d", 64),
		ImageKey:    "img-debian-12-top",
		Node:        "node-1",
		ImageConfig: sandbox.ImageConfig{Env: []string{"PATH=/usr/bin:/bin"}, UID: 1000, GID: 1000, Home: "/home/debian"},
		Size:        "medium",
		Runtime:     "runsc",
		Status:      sandbox.StatusRunning,
		Reason:      "created",
		CreatedAt:   created,
		UpdatedAt:   created.Add(1500 * time.Microsecond),
		ExpiresAt:   created.Add(24 * time.Hour),
		Capabilities: []string{
			sandbox.CapExec, sandbox.CapExecStdin, sandbox.CapFiles,
			sandbox.CapIsolation + "gvisor", sandbox.CapRuntime + "runsc",
		},
		Resources: sandbox.Resources{MilliCPU: 2000, MemoryBytes: 2 << 30, Pids: 1024},
	}
}

// fullImageConfig is an image config with every field set.
func fullImageConfig() sandbox.ImageConfig {
	return sandbox.ImageConfig{
		Env:        []string{"PATH=/usr/local/bin:/usr/bin", "NODE_ENV=production", "EMPTY="},
		WorkingDir: "/srv/app",
		User:       "node",
		UID:        1000,
		GID:        1001,
		Home:       "/home/node",
		Entrypoint: []string{"docker-entrypoint.sh"},
		Cmd:        []string{"node", "server.js"},
		Labels:     map[string]string{"org.opencontainers.image.source": "https://example.com/app", "ünï": "cödé"},
	}
}

// mustCreate creates sb or fails the test.
func mustCreate(t *testing.T, s store.Store, sb sandbox.Sandbox) {
	t.Helper()
	if err := s.Sandboxes().Create(t.Context(), sb); err != nil {
		t.Fatalf("Sandboxes.Create(%q) = %v, want nil", sb.Name, err)
	}
}

// mustGet gets tenant's sandbox called name or fails the test.
func mustGet(t *testing.T, s store.Store, tenant, name string) sandbox.Sandbox {
	t.Helper()
	sb, err := s.Sandboxes().Get(t.Context(), tenant, name)
	if err != nil {
		t.Fatalf("Sandboxes.Get(%q of %q) = %v, want nil", name, tenant, err)
	}
	return sb
}

// checkTime reports got unless it is the same instant as want, in UTC.
func checkTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
	if got.Location() != time.UTC {
		t.Errorf("%s location = %v, want UTC", what, got.Location())
	}
}

// checkSandbox reports every way got differs from want, as stored: times
// the same instants in UTC, nil Capabilities read back as empty.
func checkSandbox(t *testing.T, what string, got, want sandbox.Sandbox) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	checkTime(t, what+".UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	checkTime(t, what+".ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	if got.Capabilities == nil {
		t.Errorf("%s.Capabilities = nil, want non-nil", what)
	}
	if got.Labels == nil || got.PublicPorts == nil {
		t.Errorf("%s.Labels = %#v, .PublicPorts = %#v; want both non-nil", what, got.Labels, got.PublicPorts)
	}
	if want.Capabilities == nil {
		want.Capabilities = []string{}
	}
	if want.Labels == nil {
		want.Labels = []string{}
	}
	if want.PublicPorts == nil {
		want.PublicPorts = []int{}
	}
	if want.Network == "" {
		want.Network = sandbox.NetworkNone // the store's default
	}
	got.CreatedAt, got.UpdatedAt, got.ExpiresAt = time.Time{}, time.Time{}, time.Time{}
	want.CreatedAt, want.UpdatedAt, want.ExpiresAt = time.Time{}, time.Time{}, time.Time{}
	if got.Capabilities == nil {
		got.Capabilities = []string{}
	}
	if got.Labels == nil {
		got.Labels = []string{}
	}
	if got.PublicPorts == nil {
		got.PublicPorts = []int{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s (times aside) =\n\t%+v\nwant\n\t%+v", what, got, want)
	}
}

// names returns the names of sbs, in order.
func names(sbs []sandbox.Sandbox) []string {
	out := []string{}
	for _, sb := range sbs {
		out = append(out, sb.Name)
	}
	return out
}

func testCancelled(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	sb := newSandbox("sb-1", "cancelled", "acme", "alice", t0)
	err := s.Sandboxes().Create(ctx, sb)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Sandboxes.Create(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Sandboxes().Get(t.Context(), sb.Tenant, sb.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Get after cancelled create = %v, want ErrNotFound", err)
	}
	if _, err := s.Sandboxes().List(ctx, store.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Sandboxes.List(cancelled ctx) = %v, want context.Canceled", err)
	}
	mustCreate(t, s, sb)
	c := newCheckpoint("ck-1", sb, "", t0)
	if err := s.Checkpoints().Create(ctx, c); !errors.Is(err, context.Canceled) {
		t.Errorf("Checkpoints.Create(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Checkpoints().Get(t.Context(), sb.ID, c.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.Get after cancelled create = %v, want ErrNotFound", err)
	}
	img := newImage("acme", "tools", digest('1'), t0)
	if err := s.Images().Put(ctx, img); !errors.Is(err, context.Canceled) {
		t.Errorf("Images.Put(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Images().Version(t.Context(), img.Tenant, img.Name, img.Digest); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Images.Version after cancelled put = %v, want ErrNotFound", err)
	}
	if _, err := s.Images().List(ctx, "acme"); !errors.Is(err, context.Canceled) {
		t.Errorf("Images.List(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Sandboxes().UsingImage(ctx, []string{sb.ImageKey}, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Sandboxes.UsingImage(cancelled ctx) = %v, want context.Canceled", err)
	}
}

func testCloseIdempotent(t *testing.T, open OpenFunc) {
	s := open(t)
	mustCreate(t, s, newSandbox("sb-1", "before-close", "acme", "alice", t0))
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if err := s.Sandboxes().Create(t.Context(), newSandbox("sb-2", "after-close", "acme", "alice", t0)); err == nil {
		t.Errorf("Sandboxes.Create after Close = nil, want an error")
	}
}

func testReopen(t *testing.T, open ReopenFunc) {
	s, reopen := open(t)
	if s == nil || reopen == nil {
		t.Fatal("open returned a nil store or reopen")
	}
	ctx := t.Context()
	keep := newSandbox("sb-keep", "keep", "acme", "alice", t0)
	keep.ExpiresAt = time.Time{}
	mustCreate(t, s, keep)
	updated := newSandbox("sb-upd", "updated", "acme", "bob", at(time.Second))
	mustCreate(t, s, updated)
	updated.Status, updated.Reason, updated.UpdatedAt = sandbox.StatusStopped, "oom", at(time.Minute)
	if err := s.Sandboxes().Update(ctx, updated); err != nil {
		t.Fatalf("Sandboxes.Update(%q) = %v, want nil", updated.ID, err)
	}
	gone := newSandbox("sb-gone", "gone", "acme", "alice", at(2*time.Second))
	mustCreate(t, s, gone)
	mustCreateCheckpoint(t, s, newCheckpoint("ck-gone", gone, "", at(2*time.Second)))
	if err := s.Sandboxes().Delete(ctx, gone.ID); err != nil {
		t.Fatalf("Sandboxes.Delete(%q) = %v, want nil", gone.ID, err)
	}
	ck := newCheckpoint("ck-1", updated, "", at(2*time.Second))
	mustCreateCheckpoint(t, s, ck)
	tok := newToken("tok-1", "hash-1", at(3*time.Second))
	if err := s.Tokens().Create(ctx, tok); err != nil {
		t.Fatalf("Tokens.Create = %v, want nil", err)
	}
	if err := s.Tokens().Revoke(ctx, tok.ID, at(time.Hour)); err != nil {
		t.Fatalf("Tokens.Revoke = %v, want nil", err)
	}
	tok.RevokedAt = at(time.Hour)
	tenant := newTenant("acme", at(4*time.Second))
	mustCreateTenant(t, s, tenant)
	tenant.Policy.BudgetPercent, tenant.Policy.MaxTTL = new(0), nil
	tenant.UpdatedAt = at(time.Hour)
	if err := s.Tenants().Update(ctx, tenant); err != nil {
		t.Fatalf("Tenants.Update = %v, want nil", err)
	}
	agent := sandbox.Agent{Name: "claude-1", Tenant: tenant.Name, CreatedAt: at(5 * time.Second)}
	mustCreateAgent(t, s, agent)
	event := newEvent("sandbox.create", "acme", "claude-1", at(6*time.Second))
	mustAppend(t, s, event)
	oldImg := newImage("acme", "tools", digest('1'), at(7*time.Second))
	newImg := newImage("acme", "tools", digest('2'), at(8*time.Second))
	mustPutImage(t, s, oldImg)
	mustPutImage(t, s, newImg)
	login := newLogin("acme", "127.0.0.1:5000", at(9*time.Second))
	if err := s.RegistryLogins().Put(ctx, login, []byte("sealed")); err != nil {
		t.Fatalf("RegistryLogins.Put = %v, want nil", err)
	}
	step := store.BuildStep{Tenant: "acme", Key: "step-x", Size: 42, CreatedAt: at(10 * time.Second), UsedAt: at(11 * time.Second)}
	putStep(t, s, step)
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}

	s = reopen()
	if s == nil {
		t.Fatal("reopen returned a nil store")
	}
	closeAtEnd(t, s)
	checkSandbox(t, "reopened keep", mustGet(t, s, keep.Tenant, keep.Name), keep)
	checkSandbox(t, "reopened updated", mustGet(t, s, updated.Tenant, updated.Name), updated)
	if _, err := s.Sandboxes().Get(ctx, gone.Tenant, gone.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Get(deleted %q) after reopen = %v, want ErrNotFound", gone.Name, err)
	}
	checkCheckpoint(t, "reopened checkpoint", mustGetCheckpoint(t, s, updated.ID, ck.ID), ck)
	if got := mustListCheckpoints(t, s, gone.ID); len(got) != 0 {
		t.Errorf("Checkpoints.List(deleted %q) after reopen = %q, want none", gone.ID, checkpointIDs(got))
	}
	got, err := s.Tokens().ByHash(ctx, tok.Hash)
	if err != nil {
		t.Fatalf("Tokens.ByHash after reopen = %v, want nil", err)
	}
	checkToken(t, "reopened token", got, tok)
	checkTenant(t, "reopened tenant", mustGetTenant(t, s, tenant.Name), tenant)
	checkAgent(t, "reopened agent", mustGetAgent(t, s, agent.Tenant, agent.Name), agent)
	if events := mustListAudit(t, s, sandbox.AuditFilter{}); len(events) != 1 {
		t.Errorf("Audit.List after reopen = %q, want the one event", verbs(events))
	} else {
		checkEvent(t, "reopened audit event", events[0], event)
	}
	if list := listImages(t, s, "acme"); len(list) != 2 {
		t.Errorf("Images.List(acme) after reopen = %q, want both versions", versions(list))
	} else {
		checkImage(t, "reopened old image version", list[0], current(oldImg, false))
		checkImage(t, "reopened current image version", list[1], current(newImg, true))
	}
	if got, sealed, err := s.RegistryLogins().Get(ctx, "acme", login.Host); err != nil || string(sealed) != "sealed" {
		t.Errorf("RegistryLogins.Get after reopen = %q, %v; want the sealed password", sealed, err)
	} else {
		checkLogin(t, "reopened registry login", got, login)
	}
	checkSteps(t, "reopened build steps", listSteps(t, s, "acme"), []store.BuildStep{step})
	mustCreateAgent(t, s, sandbox.Agent{Name: "after-reopen", Tenant: tenant.Name, CreatedAt: at(time.Hour)})
	mustCreate(t, s, newSandbox("sb-new", "after-reopen", "acme", "alice", at(time.Hour)))
	list, err := s.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		t.Fatalf("Sandboxes.List after reopen = %v", err)
	}
	if got, want := names(list), []string{"keep", "updated", "after-reopen"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Sandboxes.List after reopen = %q, want %q", got, want)
	}
}
