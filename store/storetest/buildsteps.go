package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hearth/hearth/store"
)

// putStep puts step, or fails the test.
func putStep(t *testing.T, s store.Store, step store.BuildStep) {
	t.Helper()
	if err := s.BuildSteps().Put(t.Context(), step); err != nil {
		t.Fatalf("BuildSteps.Put(%s, %s) = %v", step.Tenant, step.Key, err)
	}
}

// listSteps lists tenant's steps ("" for every tenant's), or fails the test.
func listSteps(t *testing.T, s store.Store, tenant string) []store.BuildStep {
	t.Helper()
	var list []store.BuildStep
	var err error
	if tenant == "" {
		list, err = s.BuildSteps().All(t.Context())
	} else {
		list, err = s.BuildSteps().List(t.Context(), tenant)
	}
	if err != nil {
		t.Fatalf("BuildSteps list of %q = %v", tenant, err)
	}
	return list
}

// checkSteps reports every way got differs from want, times compared as
// instants.
func checkSteps(t *testing.T, what string, got, want []store.BuildStep) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %d steps %+v, want %d %+v", what, len(got), got, len(want), want)
		return
	}
	for i := range got {
		checkTime(t, what+".CreatedAt", got[i].CreatedAt, want[i].CreatedAt)
		checkTime(t, what+".UsedAt", got[i].UsedAt, want[i].UsedAt)
		g, w := got[i], want[i]
		g.CreatedAt, g.UsedAt, w.CreatedAt, w.UsedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s[%d] (times aside) = %+v, want %+v", what, i, g, w)
		}
	}
}

// testBuildSteps: put, the order of List and All (least recently used
// first), a reuse moving UsedAt and Size but not CreatedAt, tenants apart,
// Delete and the errors.
func testBuildSteps(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	a := store.BuildStep{Tenant: "acme", Key: "step-a", Size: 10, CreatedAt: t0, UsedAt: t0}
	b := store.BuildStep{Tenant: "acme", Key: "step-b", Size: 20, UsedAt: at(time.Second)} // created at UsedAt
	c := store.BuildStep{Tenant: "beta", Key: "step-a", Size: 30, CreatedAt: at(2 * time.Second), UsedAt: at(2 * time.Second)}
	for _, st := range []store.BuildStep{a, b, c} {
		putStep(t, s, st)
	}
	b.CreatedAt = b.UsedAt
	checkSteps(t, "List(acme)", listSteps(t, s, "acme"), []store.BuildStep{a, b})
	checkSteps(t, "List(beta)", listSteps(t, s, "beta"), []store.BuildStep{c})
	checkSteps(t, "List(nobody)", listSteps(t, s, "nobody"), nil)

	// Reusing a moves it last; its CreatedAt stays, its Size is the new one.
	reused := a
	reused.UsedAt, reused.Size, reused.CreatedAt = at(time.Minute), 11, at(time.Hour)
	putStep(t, s, reused)
	reused.CreatedAt = a.CreatedAt
	checkSteps(t, "List(acme) after a reuse", listSteps(t, s, "acme"), []store.BuildStep{b, reused})
	checkSteps(t, "All", listSteps(t, s, ""), []store.BuildStep{b, reused, c})

	if err := s.BuildSteps().Delete(ctx, "acme", "step-b"); err != nil {
		t.Fatalf("BuildSteps.Delete = %v", err)
	}
	if err := s.BuildSteps().Delete(ctx, "acme", "step-b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BuildSteps.Delete again = %v, want ErrNotFound", err)
	}
	if err := s.BuildSteps().Delete(ctx, "acme", "step-c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BuildSteps.Delete(another tenant's key) = %v, want ErrNotFound", err)
	}
	checkSteps(t, "All after Delete", listSteps(t, s, ""), []store.BuildStep{reused, c})
	for _, bad := range []store.BuildStep{{Key: "k", UsedAt: t0}, {Tenant: "acme", UsedAt: t0}} {
		if err := s.BuildSteps().Put(ctx, bad); err == nil {
			t.Errorf("BuildSteps.Put(%+v) = nil, want an error", bad)
		}
	}
}
