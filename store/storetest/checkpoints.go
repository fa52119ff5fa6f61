package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// newCheckpoint returns a checkpoint of sb with every field set, taken at
// created.
func newCheckpoint(id string, sb sandbox.Sandbox, parent string, created time.Time) sandbox.Checkpoint {
	return sandbox.Checkpoint{
		ID:        id,
		SandboxID: sb.ID,
		Sandbox:   sb.Name,
		Label:     "before " + id,
		Parent:    parent,
		CreatedAt: created,
		SizeBytes: 3<<30 + 7, // past 32 bits
		Memory:    true,
	}
}

// mustCreateCheckpoint creates c or fails the test.
func mustCreateCheckpoint(t *testing.T, s store.Store, c sandbox.Checkpoint) {
	t.Helper()
	if err := s.Checkpoints().Create(t.Context(), c); err != nil {
		t.Fatalf("Checkpoints.Create(%q) = %v, want nil", c.ID, err)
	}
}

// mustGetCheckpoint gets checkpoint id of sandboxID or fails the test.
func mustGetCheckpoint(t *testing.T, s store.Store, sandboxID, id string) sandbox.Checkpoint {
	t.Helper()
	c, err := s.Checkpoints().Get(t.Context(), sandboxID, id)
	if err != nil {
		t.Fatalf("Checkpoints.Get(%q, %q) = %v, want nil", sandboxID, id, err)
	}
	return c
}

// mustListCheckpoints lists the checkpoints of sandboxID or fails the test.
func mustListCheckpoints(t *testing.T, s store.Store, sandboxID string) []sandbox.Checkpoint {
	t.Helper()
	cps, err := s.Checkpoints().List(t.Context(), sandboxID)
	if err != nil {
		t.Fatalf("Checkpoints.List(%q) = %v, want nil", sandboxID, err)
	}
	return cps
}

// checkCheckpoint reports every way got differs from want: CreatedAt the
// same instant in UTC, every other field equal.
func checkCheckpoint(t *testing.T, what string, got, want sandbox.Checkpoint) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	got.CreatedAt, want.CreatedAt = time.Time{}, time.Time{}
	if got != want {
		t.Errorf("%s (time aside) =\n\t%+v\nwant\n\t%+v", what, got, want)
	}
}

// checkpointIDs returns the ids of cps, in order.
func checkpointIDs(cps []sandbox.Checkpoint) []string {
	out := []string{}
	for _, c := range cps {
		out = append(out, c.ID)
	}
	return out
}

func testCheckpointRoundTrip(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	sb := newSandbox("sb-1", "owner", "acme", "alice", t0)
	mustCreate(t, s, sb)

	full := newCheckpoint("ck-full", sb, "ck-parent", at(time.Minute))
	// A precise time in a far zone catches an implementation that keeps only
	// seconds or milliseconds, or drops the offset.
	full.CreatedAt = time.Date(2025, time.March, 14, 3, 4, 5, 999_999_000, time.FixedZone("UTC-9:30", -(9*3600+1800)))
	minimal := sandbox.Checkpoint{
		ID:        "ck-min",
		SandboxID: sb.ID,
		Sandbox:   sb.Name,
		CreatedAt: at(time.Second),
		// Label, Parent empty; SizeBytes zero; Memory false.
	}
	tests := []struct {
		name string
		c    sandbox.Checkpoint
	}{
		{"every field", full},
		{"zero values", minimal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustCreateCheckpoint(t, s, tt.c)
			checkCheckpoint(t, "Checkpoints.Get("+tt.c.ID+")", mustGetCheckpoint(t, s, sb.ID, tt.c.ID), tt.c)
		})
	}

	// Sandbox is the sandbox's name as it is now, not as it was when the
	// checkpoint was taken.
	renamed := sb
	renamed.Name = "renamed"
	if err := s.Sandboxes().Update(t.Context(), renamed); err != nil {
		t.Fatalf("Sandboxes.Update(rename) = %v, want nil", err)
	}
	want := full
	want.Sandbox = renamed.Name
	checkCheckpoint(t, "Checkpoints.Get after rename", mustGetCheckpoint(t, s, sb.ID, full.ID), want)
	list := mustListCheckpoints(t, s, sb.ID)
	if len(list) != 2 {
		t.Fatalf("Checkpoints.List after rename = %q, want 2", checkpointIDs(list))
	}
	checkCheckpoint(t, "listed after rename", list[0], want)
}

func testCheckpointEmptyKey(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	sb := newSandbox("sb-1", "owner", "acme", "alice", t0)
	mustCreate(t, s, sb)
	if err := s.Checkpoints().Create(t.Context(), newCheckpoint("", sb, "", t0)); err == nil {
		t.Errorf("Checkpoints.Create(empty id) = nil, want an error")
	}
	if got := mustListCheckpoints(t, s, sb.ID); len(got) != 0 {
		t.Errorf("Checkpoints.List after refused create = %q, want none", checkpointIDs(got))
	}
}

func testCheckpointConflict(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	a := newSandbox("sb-a", "a", "acme", "alice", t0)
	b := newSandbox("sb-b", "b", "acme", "alice", t0)
	mustCreate(t, s, a)
	mustCreate(t, s, b)
	orig := newCheckpoint("ck-1", a, "", at(time.Second))
	mustCreateCheckpoint(t, s, orig)

	tests := []struct {
		name string
		c    sandbox.Checkpoint
	}{
		{"same sandbox", newCheckpoint("ck-1", a, "ck-0", at(time.Minute))},
		// Ids are unique across sandboxes, not per sandbox.
		{"other sandbox", newCheckpoint("ck-1", b, "", at(time.Minute))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Checkpoints().Create(t.Context(), tt.c); !errors.Is(err, store.ErrExists) {
				t.Fatalf("Checkpoints.Create(%q of %q) = %v, want ErrExists", tt.c.ID, tt.c.SandboxID, err)
			}
			checkCheckpoint(t, "original after conflict", mustGetCheckpoint(t, s, a.ID, orig.ID), orig)
			if got := mustListCheckpoints(t, s, b.ID); len(got) != 0 {
				t.Errorf("Checkpoints.List(%q) after conflict = %q, want none", b.ID, checkpointIDs(got))
			}
		})
	}
}

func testCheckpointMissingSandbox(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	sb := newSandbox("sb-1", "present", "acme", "alice", t0)
	mustCreate(t, s, sb)
	tests := []struct {
		name      string
		sandboxID string
	}{
		{"unknown id", "sb-missing"},
		{"a name, not an id", sb.Name},
		{"empty", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCheckpoint("ck-"+tt.name, sb, "", t0)
			c.SandboxID = tt.sandboxID
			if err := s.Checkpoints().Create(t.Context(), c); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("Checkpoints.Create(for sandbox %q) = %v, want ErrNotFound", tt.sandboxID, err)
			}
			if _, err := s.Checkpoints().Get(t.Context(), tt.sandboxID, c.ID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Checkpoints.Get after refused create = %v, want ErrNotFound", err)
			}
		})
	}
	if got := mustListCheckpoints(t, s, sb.ID); len(got) != 0 {
		t.Errorf("Checkpoints.List(%q) after refused creates = %q, want none", sb.ID, checkpointIDs(got))
	}
}

func testCheckpointGetMissing(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	a := newSandbox("sb-a", "a", "acme", "alice", t0)
	b := newSandbox("sb-b", "b", "acme", "alice", t0)
	mustCreate(t, s, a)
	mustCreate(t, s, b)
	mustCreateCheckpoint(t, s, newCheckpoint("ck-1", a, "", t0))
	tests := []struct {
		name          string
		sandboxID, id string
	}{
		// Another sandbox's checkpoint is not found, so that a caller who may
		// see only b learns nothing of a's.
		{"wrong sandbox", b.ID, "ck-1"},
		{"unknown sandbox", "sb-missing", "ck-1"},
		{"sandbox name, not id", a.Name, "ck-1"},
		{"unknown id", a.ID, "ck-2"},
		{"empty id", a.ID, ""},
		{"case differs", a.ID, "CK-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Checkpoints().Get(t.Context(), tt.sandboxID, tt.id); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Checkpoints.Get(%q, %q) = %v, want ErrNotFound", tt.sandboxID, tt.id, err)
			}
		})
	}
}

func testCheckpointList(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	a := newSandbox("sb-a", "a", "acme", "alice", t0)
	b := newSandbox("sb-b", "b", "acme", "alice", t0)
	none := newSandbox("sb-none", "none", "acme", "alice", t0)
	for _, sb := range []sandbox.Sandbox{a, b, none} {
		mustCreate(t, s, sb)
	}
	if got := mustListCheckpoints(t, s, a.ID); len(got) != 0 {
		t.Fatalf("Checkpoints.List(no checkpoints yet) = %q, want none", checkpointIDs(got))
	}
	// Inserted out of time order, so that "oldest first" cannot be met by
	// returning insertion order. ck-a-10 ties ck-a-3 and is inserted after
	// it but sorts before it as text, so a tie broken by id shows; ck-a-0 is
	// one microsecond older than ck-a-1.
	fixtures := []sandbox.Checkpoint{
		newCheckpoint("ck-a-3", a, "ck-a-2", at(3*time.Minute)),
		newCheckpoint("ck-b-9", b, "", at(30*time.Second)),
		newCheckpoint("ck-a-1", a, "", at(time.Minute)),
		newCheckpoint("ck-a-2", a, "ck-a-1", at(2*time.Minute)),
		newCheckpoint("ck-a-10", a, "ck-a-2", at(3*time.Minute)),
		newCheckpoint("ck-a-0", a, "", at(time.Minute-time.Microsecond)),
		newCheckpoint("ck-b-8", b, "ck-b-9", at(4*time.Minute)),
	}
	for _, c := range fixtures {
		mustCreateCheckpoint(t, s, c)
	}
	tests := []struct {
		name      string
		sandboxID string
		want      []string
	}{
		{"a", a.ID, []string{"ck-a-0", "ck-a-1", "ck-a-2", "ck-a-3", "ck-a-10"}},
		{"b", b.ID, []string{"ck-b-9", "ck-b-8"}},
		{"sandbox without checkpoints", none.ID, []string{}},
		{"unknown sandbox", "sb-missing", []string{}},
		{"sandbox name, not id", a.Name, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustListCheckpoints(t, s, tt.sandboxID)
			if !reflect.DeepEqual(checkpointIDs(got), tt.want) {
				t.Errorf("Checkpoints.List(%q) = %q, want %q", tt.sandboxID, checkpointIDs(got), tt.want)
			}
		})
	}
	// Listed checkpoints carry every field, not just ids.
	got := mustListCheckpoints(t, s, b.ID)
	if len(got) != 2 {
		t.Fatalf("Checkpoints.List(%q) = %q, want 2", b.ID, checkpointIDs(got))
	}
	checkCheckpoint(t, "listed ck-b-8", got[1], fixtures[6])
}

func testCheckpointDelete(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	sb := newSandbox("sb-1", "owner", "acme", "alice", t0)
	mustCreate(t, s, sb)
	parent := newCheckpoint("ck-1", sb, "", t0)
	child := newCheckpoint("ck-2", sb, parent.ID, at(time.Second))
	mustCreateCheckpoint(t, s, parent)
	mustCreateCheckpoint(t, s, child)

	if err := s.Checkpoints().Delete(ctx, parent.ID); err != nil {
		t.Fatalf("Checkpoints.Delete(%q) = %v, want nil", parent.ID, err)
	}
	if _, err := s.Checkpoints().Get(ctx, sb.ID, parent.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.Get(deleted) = %v, want ErrNotFound", err)
	}
	if err := s.Checkpoints().Delete(ctx, parent.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.Delete(deleted) again = %v, want ErrNotFound", err)
	}
	if err := s.Checkpoints().Delete(ctx, "ck-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.Delete(missing) = %v, want ErrNotFound", err)
	}
	// The child stays, still naming its parent: the tree's history is the
	// caller's to interpret, not the store's to rewrite.
	checkCheckpoint(t, "child after its parent's delete", mustGetCheckpoint(t, s, sb.ID, child.ID), child)
	if got, want := checkpointIDs(mustListCheckpoints(t, s, sb.ID)), []string{child.ID}; !reflect.DeepEqual(got, want) {
		t.Errorf("Checkpoints.List after delete = %q, want %q", got, want)
	}
	checkSandbox(t, "sandbox after a checkpoint delete", mustGet(t, s, sb.Tenant, sb.Name), sb)
}

func testCheckpointSetMemory(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	sb := newSandbox("sb-1", "owner", "acme", "alice", t0)
	mustCreate(t, s, sb)
	c := newCheckpoint("ck-1", sb, "", t0)
	c.Memory = false
	mustCreateCheckpoint(t, s, c)
	for _, memory := range []bool{true, false, true} {
		if err := s.Checkpoints().SetMemory(ctx, c.ID, memory); err != nil {
			t.Fatalf("Checkpoints.SetMemory(%q, %v) = %v, want nil", c.ID, memory, err)
		}
		c.Memory = memory
		checkCheckpoint(t, "after Checkpoints.SetMemory", mustGetCheckpoint(t, s, sb.ID, c.ID), c)
	}
	if err := s.Checkpoints().SetMemory(ctx, "ck-missing", true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.SetMemory(missing) = %v, want ErrNotFound", err)
	}
}

func testCheckpointSandboxDeleted(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	victim := newSandbox("sb-1", "victim", "acme", "alice", t0)
	bystander := newSandbox("sb-2", "bystander", "acme", "alice", t0)
	mustCreate(t, s, victim)
	mustCreate(t, s, bystander)
	mustCreateCheckpoint(t, s, newCheckpoint("ck-v1", victim, "", t0))
	mustCreateCheckpoint(t, s, newCheckpoint("ck-v2", victim, "ck-v1", at(time.Second)))
	kept := newCheckpoint("ck-b1", bystander, "", t0)
	mustCreateCheckpoint(t, s, kept)

	if err := s.Sandboxes().Delete(ctx, victim.ID); err != nil {
		t.Fatalf("Sandboxes.Delete(%q) = %v, want nil", victim.ID, err)
	}
	if got := mustListCheckpoints(t, s, victim.ID); len(got) != 0 {
		t.Errorf("Checkpoints.List(deleted sandbox) = %q, want none", checkpointIDs(got))
	}
	for _, id := range []string{"ck-v1", "ck-v2"} {
		if _, err := s.Checkpoints().Get(ctx, victim.ID, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Checkpoints.Get(%q of deleted sandbox) = %v, want ErrNotFound", id, err)
		}
		if err := s.Checkpoints().Delete(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Checkpoints.Delete(%q of deleted sandbox) = %v, want ErrNotFound (gone with it)", id, err)
		}
	}
	checkCheckpoint(t, "bystander's checkpoint", mustGetCheckpoint(t, s, bystander.ID, kept.ID), kept)

	// A new sandbox under the old name is a new sandbox, with no history.
	again := newSandbox("sb-3", victim.Name, "acme", "alice", at(time.Minute))
	mustCreate(t, s, again)
	if got := mustListCheckpoints(t, s, again.ID); len(got) != 0 {
		t.Errorf("Checkpoints.List(recreated name) = %q, want none", checkpointIDs(got))
	}
}

func testSandboxHead(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	sb := newSandbox("sb-1", "headed", "acme", "alice", t0)
	sb.Head = "ck-1"
	mustCreate(t, s, sb)
	checkSandbox(t, "Sandboxes.Get after create", mustGet(t, s, sb.Tenant, sb.Name), sb)

	// The head is not a reference: it need not be a stored checkpoint.
	for _, head := range []string{"ck-2", ""} {
		sb.Head = head
		sb.UpdatedAt = sb.UpdatedAt.Add(time.Second)
		if err := s.Sandboxes().Update(ctx, sb); err != nil {
			t.Fatalf("Sandboxes.Update(head %q) = %v, want nil", head, err)
		}
		checkSandbox(t, "Sandboxes.Get after head "+head, mustGet(t, s, sb.Tenant, sb.Name), sb)
	}
	sb.Head = "ck-3"
	if err := s.Sandboxes().Update(ctx, sb); err != nil {
		t.Fatalf("Sandboxes.Update(head ck-3) = %v, want nil", err)
	}
	list, err := s.Sandboxes().List(ctx, store.Filter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("Sandboxes.List = %q, %v; want one", names(list), err)
	}
	checkSandbox(t, "listed", list[0], sb)
}

func testSandboxStatuses(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	sb := newSandbox("sb-1", "status", "acme", "alice", t0)
	sb.Status = sandbox.StatusCreating
	mustCreate(t, s, sb)
	for _, st := range []sandbox.Status{sandbox.StatusRunning, sandbox.StatusSleeping, sandbox.StatusStopped, sandbox.StatusSleeping} {
		sb.Status, sb.Reason = st, "to "+string(st)
		if err := s.Sandboxes().Update(t.Context(), sb); err != nil {
			t.Fatalf("Sandboxes.Update(status %s) = %v, want nil", st, err)
		}
		if got := mustGet(t, s, sb.Tenant, sb.Name); got.Status != st || got.Reason != sb.Reason {
			t.Errorf("Sandboxes.Get after Sandboxes.Update(status %s) = %s/%s, want %s/%s", st, got.Status, got.Reason, st, sb.Reason)
		}
	}
	asleep := newSandbox("sb-2", "born-asleep", "acme", "alice", t0)
	asleep.Status = sandbox.StatusSleeping
	mustCreate(t, s, asleep)
	checkSandbox(t, "Sandboxes.Get(sleeping)", mustGet(t, s, asleep.Tenant, asleep.Name), asleep)
}
