package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// newBinding returns tenant's binding name of secret, at created.
func newBinding(tenant, name, secret string, created time.Time) sandbox.Binding {
	return sandbox.Binding{
		Tenant: tenant, Name: name, Secret: secret,
		Upstream: "https://api.example.com/v1", Header: "Authorization", Format: "Bearer {secret}",
		CreatedAt: created, UpdatedAt: created,
	}
}

// checkBinding reports every way got differs from want, times compared as
// instants in UTC.
func checkBinding(t *testing.T, what string, got, want sandbox.Binding) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	checkTime(t, what+".UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Errorf("%s (times aside) = %+v, want %+v", what, got, want)
	}
}

// testBindings: put, get, replace (every field but CreatedAt replaced),
// list per tenant by name, delete, and the errors.
func testBindings(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	openai := newBinding("acme", "openai", "OPENAI_KEY", t0)
	theirs := newBinding("globex", "openai", "THEIR_KEY", t0)
	github := newBinding("acme", "github", "GH_TOKEN", at(time.Second))
	github.CreatedAt = time.Time{} // created at UpdatedAt
	for _, b := range []sandbox.Binding{openai, theirs, github} {
		if err := s.Bindings().Put(ctx, b); err != nil {
			t.Fatalf("Bindings.Put(%s/%s) = %v", b.Tenant, b.Name, err)
		}
	}
	github.CreatedAt = github.UpdatedAt
	got, err := s.Bindings().Get(ctx, "acme", "openai")
	if err != nil {
		t.Fatalf("Bindings.Get(acme, openai) = %v", err)
	}
	checkBinding(t, "Bindings.Get(acme, openai)", got, openai)
	got, err = s.Bindings().Get(ctx, "acme", "github")
	if err != nil {
		t.Fatalf("Bindings.Get(acme, github) = %v", err)
	}
	checkBinding(t, "Bindings.Get(acme, github) created with a zero CreatedAt", got, github)

	// A replacement takes every field and UpdatedAt, and keeps CreatedAt.
	replaced := sandbox.Binding{Tenant: "acme", Name: "openai", Secret: "OTHER_KEY", Upstream: "http://203.0.113.7:8080",
		Header: "X-Api-Key", Format: "{secret}", CreatedAt: at(time.Hour), UpdatedAt: at(time.Minute)}
	if err := s.Bindings().Put(ctx, replaced); err != nil {
		t.Fatalf("Bindings.Put(replace) = %v", err)
	}
	want := replaced
	want.CreatedAt = openai.CreatedAt
	got, err = s.Bindings().Get(ctx, "acme", "openai")
	if err != nil {
		t.Fatalf("Bindings.Get after a replace = %v", err)
	}
	checkBinding(t, "Bindings.Get after a replace", got, want)

	list, err := s.Bindings().List(ctx, "acme")
	if err != nil || len(list) != 2 {
		t.Fatalf("Bindings.List(acme) = %+v, %v; want github and openai", list, err)
	}
	checkBinding(t, "Bindings.List(acme)[0]", list[0], github)
	checkBinding(t, "Bindings.List(acme)[1]", list[1], want)
	if list, err := s.Bindings().List(ctx, "initech"); err != nil || list == nil || len(list) != 0 {
		t.Errorf("Bindings.List(initech) = %#v, %v; want an empty list", list, err)
	}

	if err := s.Bindings().Delete(ctx, "acme", "openai"); err != nil {
		t.Fatalf("Bindings.Delete = %v", err)
	}
	if _, err := s.Bindings().Get(ctx, "acme", "openai"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Bindings.Get after delete = %v, want ErrNotFound", err)
	}
	if got, err := s.Bindings().Get(ctx, "globex", "openai"); err != nil || got.Secret != "THEIR_KEY" {
		t.Errorf("another tenant's binding of the same name = %+v, %v; want it untouched", got, err)
	}
	if err := s.Bindings().Delete(ctx, "acme", "openai"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Bindings.Delete twice = %v, want ErrNotFound", err)
	}
	if _, err := s.Bindings().Get(ctx, "acme", "nosuch"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Bindings.Get(nosuch) = %v, want ErrNotFound", err)
	}

	for name, edit := range map[string]func(*sandbox.Binding){
		"tenant":   func(b *sandbox.Binding) { b.Tenant = "" },
		"name":     func(b *sandbox.Binding) { b.Name = "" },
		"secret":   func(b *sandbox.Binding) { b.Secret = "" },
		"upstream": func(b *sandbox.Binding) { b.Upstream = "" },
		"header":   func(b *sandbox.Binding) { b.Header = "" },
		"format":   func(b *sandbox.Binding) { b.Format = "" },
	} {
		b := newBinding("acme", "empty-"+name, "K", t0)
		edit(&b)
		if err := s.Bindings().Put(ctx, b); err == nil {
			t.Errorf("Bindings.Put with an empty %s = nil error", name)
		}
	}
	if list, err := s.Bindings().List(ctx, "acme"); err != nil || len(list) != 1 {
		t.Errorf("Bindings.List(acme) after refused puts = %+v, %v; want github alone", list, err)
	}
}
