package storetest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

func testSandboxRoundTrip(t *testing.T, open OpenFunc) {
	full := newSandbox("sb-full", "full", "acme", "alice", t0)
	// Sub-microsecond digits are not promised, so the suite never uses them,
	// but a precise time in a far zone catches implementations that keep
	// only seconds or milliseconds, or drop the offset.
	full.UpdatedAt = time.Date(2025, time.March, 14, 3, 4, 5, 999_999_000, time.FixedZone("UTC-9:30", -(9*3600+1800)))
	full.Head = "ck-head"
	full.Labels = []string{"team-search", "Ünïcode label", "b", "a"} // order kept
	full.PublicPorts = []int{8080, 3000}
	full.Network = sandbox.NetworkEgress
	full.Egress = sandbox.EgressPolicy{Allow: []string{"203.0.113.0/24"}, Deny: []string{"203.0.113.9"}}
	full.ImageConfig = fullImageConfig()

	minimal := sandbox.Sandbox{
		ID:        "sb-min",
		Name:      "minimal",
		Status:    sandbox.StatusCreating,
		CreatedAt: at(time.Second),
		UpdatedAt: at(time.Second),
		// ExpiresAt zero: never. Capabilities nil. Resources zero.
	}
	empty := newSandbox("sb-empty", "empty-caps", "acme", "bob", at(2*time.Second))
	empty.Capabilities = []string{}
	utc := newSandbox("sb-utc", "utc", "acme", "bob", time.Date(2030, time.January, 1, 0, 0, 0, 1000, time.UTC))

	tests := []struct {
		name string
		sb   sandbox.Sandbox
	}{
		{"every field", full},
		{"zero values", minimal},
		{"empty capabilities", empty},
		{"utc one microsecond", utc},
	}
	s := openStore(t, open)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustCreate(t, s, tt.sb)
			got := mustGet(t, s, tt.sb.Tenant, tt.sb.Name)
			checkSandbox(t, "Sandboxes.Get("+tt.sb.Name+")", got, tt.sb)
			if tt.sb.ExpiresAt.IsZero() && !got.ExpiresAt.IsZero() {
				t.Errorf("ExpiresAt = %v, want zero (never)", got.ExpiresAt)
			}
		})
	}
}

func testSandboxEmptyKey(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	noID := newSandbox("", "no-id", "acme", "alice", t0)
	noName := newSandbox("sb-1", "", "acme", "alice", t0)
	for _, sb := range []sandbox.Sandbox{noID, noName} {
		if err := s.Sandboxes().Create(t.Context(), sb); err == nil {
			t.Errorf("Sandboxes.Create(id %q, name %q) = nil, want an error", sb.ID, sb.Name)
		}
	}
	list, err := s.Sandboxes().List(t.Context(), store.Filter{})
	if err != nil || len(list) != 0 {
		t.Errorf("Sandboxes.List after refused creates = %q, %v; want none, nil", names(list), err)
	}
}

func testSandboxConflict(t *testing.T, open OpenFunc) {
	tests := []struct {
		name string
		sb   sandbox.Sandbox
	}{
		{"same name", newSandbox("sb-2", "taken", "acme", "mallory", at(time.Second))},
		{"same id", newSandbox("sb-1", "fresh", "other", "mallory", at(time.Second))},
		{"same both", newSandbox("sb-1", "taken", "acme", "alice", t0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, open)
			orig := newSandbox("sb-1", "taken", "acme", "alice", t0)
			mustCreate(t, s, orig)
			err := s.Sandboxes().Create(t.Context(), tt.sb)
			if !errors.Is(err, store.ErrExists) {
				t.Fatalf("Sandboxes.Create(id %q, name %q) = %v, want ErrExists", tt.sb.ID, tt.sb.Name, err)
			}
			checkSandbox(t, "original after conflict", mustGet(t, s, orig.Tenant, orig.Name), orig)
			list, err := s.Sandboxes().List(t.Context(), store.Filter{})
			if err != nil || len(list) != 1 {
				t.Errorf("Sandboxes.List after conflict = %q, %v; want [taken], nil", names(list), err)
			}
		})
	}
}

// testSandboxNamesPerTenant: a name is unique within its tenant only.
// Another tenant's sandbox of the same name is no conflict, Sandboxes.Get
// finds each in its own tenant only, a Name filter lists both, and a move
// (Sandboxes.Update of tenant and name, as a warm-pool claim does) into a
// tenant that has the name is ErrExists and changes nothing.
func testSandboxNamesPerTenant(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	a := newSandbox("sb-a", "web", "acme", "alice", t0)
	g := newSandbox("sb-g", "web", "globex", "alice", at(time.Second))
	pool := newSandbox("sb-p", "pool-1", "system", "pool", at(2*time.Second))
	for _, sb := range []sandbox.Sandbox{a, g, pool} {
		mustCreate(t, s, sb)
	}
	checkSandbox(t, "acme's web", mustGet(t, s, "acme", "web"), a)
	checkSandbox(t, "globex's web", mustGet(t, s, "globex", "web"), g)
	if _, err := s.Sandboxes().Get(ctx, "initech", "web"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Get(web of initech) = %v, want ErrNotFound", err)
	}
	both, err := s.Sandboxes().List(ctx, store.Filter{Name: "web"})
	if err != nil || len(both) != 2 || both[0].ID != a.ID || both[1].ID != g.ID {
		t.Errorf("Sandboxes.List(name web) = %+v, %v; want acme's and globex's, oldest first", both, err)
	}
	if one, err := s.Sandboxes().List(ctx, store.Filter{Tenant: "globex", Name: "web"}); err != nil || len(one) != 1 || one[0].ID != g.ID {
		t.Errorf("Sandboxes.List(globex, name web) = %+v, %v; want globex's only", one, err)
	}
	dup := newSandbox("sb-dup", "web", "acme", "bob", at(3*time.Second))
	if err := s.Sandboxes().Create(ctx, dup); !errors.Is(err, store.ErrExists) {
		t.Errorf("Sandboxes.Create(a second web in acme) = %v, want ErrExists", err)
	}
	claim := pool
	claim.Name, claim.Tenant, claim.Owner = "web", "acme", "carol"
	if err := s.Sandboxes().Update(ctx, claim); !errors.Is(err, store.ErrExists) {
		t.Errorf("Sandboxes.Update(move onto acme's web) = %v, want ErrExists", err)
	}
	checkSandbox(t, "pool member after a refused move", mustGet(t, s, "system", "pool-1"), pool)
	claim.Tenant = "initech"
	if err := s.Sandboxes().Update(ctx, claim); err != nil {
		t.Fatalf("Sandboxes.Update(move to initech's web) = %v, want nil", err)
	}
	checkSandbox(t, "initech's web", mustGet(t, s, "initech", "web"), claim)
	checkSandbox(t, "acme's web after the move", mustGet(t, s, "acme", "web"), a)
}

func testSandboxGetMissing(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	mustCreate(t, s, newSandbox("sb-1", "present", "acme", "alice", t0))
	for _, tn := range [][2]string{{"acme", "absent"}, {"acme", ""}, {"acme", "sb-1"}, {"acme", "PRESENT"}, {"globex", "present"}, {"", "present"}} {
		_, err := s.Sandboxes().Get(t.Context(), tn[0], tn[1])
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Sandboxes.Get(%q of %q) = %v, want ErrNotFound", tn[1], tn[0], err)
		}
	}
}

// testSandboxByID: Sandboxes.ByID finds a sandbox by id, with every field as
// Sandboxes.Get has it, follows a rename, and is ErrNotFound for a name, an
// unknown or a deleted id.
func testSandboxByID(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	sb := newSandbox("sb-1", "present", "acme", "alice", t0)
	sb.Network = sandbox.NetworkEgress
	mustCreate(t, s, sb)
	mustCreate(t, s, newSandbox("sb-2", "other", "globex", "bob", at(time.Second)))
	got, err := s.Sandboxes().ByID(ctx, "sb-1")
	if err != nil {
		t.Fatalf("Sandboxes.ByID(sb-1) = %v, want nil", err)
	}
	checkSandbox(t, "Sandboxes.ByID(sb-1)", got, sb)
	sb.Name, sb.UpdatedAt = "renamed", at(time.Minute)
	if err := s.Sandboxes().Update(ctx, sb); err != nil {
		t.Fatalf("Sandboxes.Update = %v", err)
	}
	if got, err := s.Sandboxes().ByID(ctx, "sb-1"); err != nil || got.Name != "renamed" {
		t.Errorf("Sandboxes.ByID(sb-1) after a rename = %q, %v; want renamed", got.Name, err)
	}
	for _, id := range []string{"present", "renamed", "", "SB-1", "sb-3"} {
		if _, err := s.Sandboxes().ByID(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Sandboxes.ByID(%q) = %v, want ErrNotFound", id, err)
		}
	}
	if err := s.Sandboxes().Delete(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sandboxes().ByID(ctx, "sb-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.ByID(deleted) = %v, want ErrNotFound", err)
	}
}

func testSandboxUpdate(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	orig := newSandbox("sb-1", "before", "acme", "alice", t0)
	mustCreate(t, s, orig)

	changed := sandbox.Sandbox{
		ID:           orig.ID,
		Name:         "after",
		Tenant:       "acme-2",
		Owner:        "bob",
		Image:        "ghcr.io/hearth/base:2",
		Size:         "large",
		Runtime:      "runc",
		Status:       sandbox.StatusStopped,
		Reason:       "oom",
		CreatedAt:    at(-time.Hour),
		UpdatedAt:    at(time.Hour + 7*time.Microsecond),
		ExpiresAt:    time.Time{}, // cleared: never
		Capabilities: []string{sandbox.CapExec},
		Resources:    sandbox.Resources{MilliCPU: 4000, MemoryBytes: 8 << 30, Pids: 4096, NetBitsPerSec: 1e9, NetConns: 4096},
		Head:         "ck-7",
		Labels:       []string{"changed"},
		PublicPorts:  []int{443},
		ImageDigest:  "sha256:" + strings.Repeat("2", 64),
		ImageKey:     "img-base-2-top",
		ImageConfig:  fullImageConfig(),
	}
	if err := s.Sandboxes().Update(ctx, changed); err != nil {
		t.Fatalf("Sandboxes.Update(%q) = %v, want nil", changed.ID, err)
	}
	checkSandbox(t, "Sandboxes.Get(after)", mustGet(t, s, "acme-2", "after"), changed)
	for _, tn := range [][2]string{{"acme", "before"}, {"acme", "after"}, {"acme-2", "before"}} {
		if _, err := s.Sandboxes().Get(ctx, tn[0], tn[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Sandboxes.Get(%q of %q) after a move = %v, want ErrNotFound", tn[1], tn[0], err)
		}
	}

	// And back again, expiry and empty head and all, to catch an update that
	// skips NULLs or empty strings.
	if err := s.Sandboxes().Update(ctx, orig); err != nil {
		t.Fatalf("Sandboxes.Update(%q) back = %v, want nil", orig.ID, err)
	}
	checkSandbox(t, "Sandboxes.Get(before)", mustGet(t, s, "acme", "before"), orig)

	missing := newSandbox("sb-missing", "missing", "acme", "alice", t0)
	if err := s.Sandboxes().Update(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Update(missing id) = %v, want ErrNotFound", err)
	}
	if _, err := s.Sandboxes().Get(ctx, missing.Tenant, missing.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Get after Sandboxes.Update(missing id) = %v, want ErrNotFound (no upsert)", err)
	}
}

func testSandboxUpdateConflict(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	a := newSandbox("sb-a", "a", "acme", "alice", t0)
	b := newSandbox("sb-b", "b", "acme", "alice", at(time.Second))
	mustCreate(t, s, a)
	mustCreate(t, s, b)
	rename := b
	rename.Name = a.Name
	rename.Status = sandbox.StatusStopped
	if err := s.Sandboxes().Update(t.Context(), rename); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Sandboxes.Update(rename onto a taken name) = %v, want ErrExists", err)
	}
	checkSandbox(t, "a after conflict", mustGet(t, s, "acme", "a"), a)
	checkSandbox(t, "b after conflict", mustGet(t, s, "acme", "b"), b)
}

func testSandboxList(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	// Inserted out of time order, so that "oldest first" cannot be met by
	// returning insertion order.
	fixtures := []sandbox.Sandbox{
		newSandbox("sb-3", "acme-alice-3", "acme", "alice", at(3*time.Minute)),
		newSandbox("sb-1", "acme-alice-1", "acme", "alice", at(1*time.Minute)),
		newSandbox("sb-2", "acme-bob-2", "acme", "bob", at(2*time.Minute)),
		newSandbox("sb-5", "globex-alice-5", "globex", "alice", at(5*time.Minute)),
		newSandbox("sb-4", "globex-carol-4", "globex", "carol", at(4*time.Minute)),
		// One microsecond older than acme-alice-1.
		newSandbox("sb-0", "acme-bob-0", "acme", "bob", at(time.Minute-time.Microsecond)),
	}
	for _, sb := range fixtures {
		mustCreate(t, s, sb)
	}
	tests := []struct {
		name   string
		filter store.Filter
		want   []string
	}{
		{"everything", store.Filter{},
			[]string{"acme-bob-0", "acme-alice-1", "acme-bob-2", "acme-alice-3", "globex-carol-4", "globex-alice-5"}},
		{"tenant", store.Filter{Tenant: "acme"},
			[]string{"acme-bob-0", "acme-alice-1", "acme-bob-2", "acme-alice-3"}},
		{"owner across tenants", store.Filter{Owner: "alice"},
			[]string{"acme-alice-1", "acme-alice-3", "globex-alice-5"}},
		{"tenant and owner", store.Filter{Tenant: "acme", Owner: "alice"},
			[]string{"acme-alice-1", "acme-alice-3"}},
		{"tenant and owner of another tenant", store.Filter{Tenant: "globex", Owner: "bob"}, []string{}},
		{"unknown tenant", store.Filter{Tenant: "initech"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Sandboxes().List(t.Context(), tt.filter)
			if err != nil {
				t.Fatalf("Sandboxes.List(%+v) = %v, want nil", tt.filter, err)
			}
			if !reflect.DeepEqual(names(got), tt.want) {
				t.Errorf("Sandboxes.List(%+v) = %q, want %q", tt.filter, names(got), tt.want)
			}
		})
	}
	// Listed sandboxes carry every field, not just names.
	got, err := s.Sandboxes().List(t.Context(), store.Filter{Tenant: "globex", Owner: "carol"})
	if err != nil || len(got) != 1 {
		t.Fatalf("Sandboxes.List(globex, carol) = %q, %v; want one", names(got), err)
	}
	checkSandbox(t, "listed globex-carol-4", got[0], fixtures[4])
}

func testSandboxListTies(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	// Equal CreatedAt: insertion order. IDs and names sort the other way, so
	// a tie broken by either shows.
	want := []string{"z", "m", "a"}
	for i, name := range want {
		mustCreate(t, s, newSandbox("sb-"+string(rune('9'-i)), name, "acme", "alice", t0))
	}
	got, err := s.Sandboxes().List(t.Context(), store.Filter{})
	if err != nil {
		t.Fatalf("Sandboxes.List = %v", err)
	}
	if !reflect.DeepEqual(names(got), want) {
		t.Errorf("Sandboxes.List with equal CreatedAt = %q, want insertion order %q", names(got), want)
	}
}

func testSandboxDelete(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	victim := newSandbox("sb-1", "victim", "acme", "alice", t0)
	bystander := newSandbox("sb-2", "bystander", "acme", "alice", at(time.Second))
	mustCreate(t, s, victim)
	mustCreate(t, s, bystander)

	if err := s.Sandboxes().Delete(ctx, victim.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Delete(by name, not id) = %v, want ErrNotFound", err)
	}
	if err := s.Sandboxes().Delete(ctx, victim.ID); err != nil {
		t.Fatalf("Sandboxes.Delete(%q) = %v, want nil", victim.ID, err)
	}
	if _, err := s.Sandboxes().Get(ctx, victim.Tenant, victim.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Get(deleted) = %v, want ErrNotFound", err)
	}
	if err := s.Sandboxes().Delete(ctx, victim.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Delete(deleted) again = %v, want ErrNotFound", err)
	}
	checkSandbox(t, "bystander", mustGet(t, s, bystander.Tenant, bystander.Name), bystander)

	// The name is free again (a new sandbox, a new id).
	again := newSandbox("sb-3", victim.Name, "acme", "alice", at(time.Minute))
	mustCreate(t, s, again)
	checkSandbox(t, "recreated", mustGet(t, s, again.Tenant, again.Name), again)
}

// testSandboxUsingImage: Sandboxes.UsingImage finds the sandboxes of every
// tenant whose ImageKey is one of the keys, oldest first, under a limit,
// follows an update of the key, and never matches an empty key.
func testSandboxUsingImage(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	withKey := func(id, name, tenant, key string, created time.Time) sandbox.Sandbox {
		sb := newSandbox(id, name, tenant, "alice", created)
		sb.ImageKey = key
		return sb
	}
	// Inserted out of time order, so that oldest first is not insertion
	// order.
	late := withKey("sb-late", "late", "acme", "layer-a", at(3*time.Second))
	theirs := withKey("sb-theirs", "theirs", "globex", "layer-a", at(time.Second))
	other := withKey("sb-other", "other", "acme", "layer-b", at(2*time.Second))
	old := withKey("sb-old", "old", "acme", "", t0) // from before image keys
	for _, sb := range []sandbox.Sandbox{late, theirs, other, old} {
		mustCreate(t, s, sb)
	}
	tests := []struct {
		name  string
		keys  []string
		limit int
		want  []string
	}{
		{"one key across tenants", []string{"layer-a"}, 0, []string{"theirs", "late"}},
		{"limit", []string{"layer-a"}, 1, []string{"theirs"}},
		{"negative limit is none", []string{"layer-a"}, -1, []string{"theirs", "late"}},
		{"several keys", []string{"layer-b", "layer-a", "layer-z"}, 10, []string{"theirs", "other", "late"}},
		{"unknown key", []string{"layer-z"}, 0, []string{}},
		{"no keys", nil, 0, []string{}},
		{"empty key matches nothing", []string{""}, 0, []string{}},
		{"a key is not a prefix", []string{"layer"}, 0, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Sandboxes().UsingImage(ctx, tt.keys, tt.limit)
			if err != nil || got == nil {
				t.Fatalf("Sandboxes.UsingImage(%q, %d) = %#v, %v; want a list", tt.keys, tt.limit, got, err)
			}
			if !reflect.DeepEqual(names(got), tt.want) {
				t.Errorf("Sandboxes.UsingImage(%q, %d) = %q, want %q", tt.keys, tt.limit, names(got), tt.want)
			}
		})
	}
	got, err := s.Sandboxes().UsingImage(ctx, []string{"layer-b"}, 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("Sandboxes.UsingImage(layer-b) = %q, %v; want other", names(got), err)
	}
	checkSandbox(t, "Sandboxes.UsingImage(layer-b)[0]", got[0], other)

	// A sandbox whose root moves to another image's layers (a restore of a
	// checkpoint of another image) stops using the old one.
	late.ImageKey = "layer-b"
	if err := s.Sandboxes().Update(ctx, late); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Sandboxes().UsingImage(ctx, []string{"layer-a"}, 0); err != nil || !reflect.DeepEqual(names(got), []string{"theirs"}) {
		t.Errorf("Sandboxes.UsingImage(layer-a) after an update = %q, %v; want [theirs]", names(got), err)
	}
	if err := s.Sandboxes().Delete(ctx, theirs.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Sandboxes().UsingImage(ctx, []string{"layer-a"}, 0); err != nil || len(got) != 0 {
		t.Errorf("Sandboxes.UsingImage(layer-a) after its last user went = %q, %v; want none", names(got), err)
	}
}
