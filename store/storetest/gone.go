package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// testGone: record, replace by tenant and name, get, forget by tenant and
// name and by age; another tenant's record of the same name is its own.
func testGone(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	g := sandbox.Gone{Name: "web", ID: "x1", Tenant: "acme", Owner: "bot", Reason: "reaped: its ttl expired", Last: "oom: the memory limit killed a command", At: t0}
	if err := s.Gone().Record(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Gone().Get(ctx, "acme", "web"); err != nil || got.ID != g.ID || got.Reason != g.Reason || got.Last != g.Last ||
		got.Tenant != g.Tenant || got.Owner != g.Owner || !got.At.Equal(t0) {
		t.Errorf("Gone.Get(web) = %+v, %v; want %+v", got, err, g)
	}
	g2 := sandbox.Gone{Name: "web", ID: "x2", Tenant: "acme", Owner: "bot", Reason: "destroyed by bot", At: t0.Add(time.Hour)}
	if err := s.Gone().Record(ctx, g2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Gone().Get(ctx, "acme", "web"); err != nil || got.ID != "x2" || got.Last != "" {
		t.Errorf("Gone.Get(web) after a second record = %+v, %v; want the second", got, err)
	}
	other := sandbox.Gone{Name: "web", ID: "x9", Tenant: "globex", Owner: "bot", Reason: "destroyed by bot", At: t0.Add(2 * time.Hour)}
	if err := s.Gone().Record(ctx, other); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Gone().Get(ctx, "acme", "web"); err != nil || got.ID != "x2" {
		t.Errorf("Gone.Get(web of acme) after globex's record = %+v, %v; want acme's x2", got, err)
	}
	if got, err := s.Gone().Get(ctx, "globex", "web"); err != nil || got.ID != "x9" || got.Tenant != "globex" {
		t.Errorf("Gone.Get(web of globex) = %+v, %v; want x9", got, err)
	}
	if _, err := s.Gone().Get(ctx, "initech", "web"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Gone.Get(web of initech) = %v, want ErrNotFound", err)
	}
	if err := s.Gone().Record(ctx, sandbox.Gone{Name: "old", ID: "x3", Tenant: "acme", At: t0}); err != nil {
		t.Fatal(err)
	}
	ids := func(gs []sandbox.Gone) (out []string) {
		for _, g := range gs {
			out = append(out, g.ID)
		}
		return out
	}
	if all, err := s.Gone().List(ctx, ""); err != nil || !slices.Equal(ids(all), []string{"x9", "x2", "x3"}) || all[0].Tenant != "globex" || all[1].Reason != g2.Reason {
		t.Errorf("Gone.List(every tenant) = %+v, %v; want x9, x2, x3, the newest first", all, err)
	}
	if acme, err := s.Gone().List(ctx, "acme"); err != nil || !slices.Equal(ids(acme), []string{"x2", "x3"}) {
		t.Errorf("Gone.List(acme) = %+v, %v; want x2, x3", acme, err)
	}
	if none, err := s.Gone().List(ctx, "initech"); err != nil || none == nil || len(none) != 0 {
		t.Errorf("Gone.List(initech) = %#v, %v; want an empty list", none, err)
	}
	if err := s.Gone().Forget(ctx, "", "", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Gone().Get(ctx, "acme", "old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Gone.Get(old) after forgetting records before t0+1m = %v, want ErrNotFound", err)
	}
	if _, err := s.Gone().Get(ctx, "acme", "web"); err != nil {
		t.Errorf("Gone.Get(web), newer, after forgetting older ones = %v", err)
	}
	if err := s.Gone().Forget(ctx, "acme", "web", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Gone().Get(ctx, "acme", "web"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Gone.Get(web) after Gone.Forget(web) = %v, want ErrNotFound", err)
	}
	if _, err := s.Gone().Get(ctx, "globex", "web"); err != nil {
		t.Errorf("Gone.Get(web of globex) after Gone.Forget(web of acme) = %v, want it kept", err)
	}
	if err := s.Gone().Forget(ctx, "acme", "never", time.Time{}); err != nil {
		t.Errorf("Gone.Forget of a name with no record = %v, want nil", err)
	}
	if err := s.Gone().Record(ctx, sandbox.Gone{At: t0}); err == nil {
		t.Errorf("Gone.Record with no name = nil error")
	}
}
