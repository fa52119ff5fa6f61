package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// newLogin returns tenant's login for host, every field set, at created.
func newLogin(tenant, host string, created time.Time) sandbox.RegistryLogin {
	return sandbox.RegistryLogin{
		Tenant: tenant, Host: host, Username: "robot$ci",
		Insecure: true, CA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
		CreatedAt: created, UpdatedAt: created,
	}
}

// checkLogin reports every way got differs from want, times compared as
// instants in UTC.
func checkLogin(t *testing.T, what string, got, want sandbox.RegistryLogin) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	checkTime(t, what+".UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Errorf("%s (times aside) = %+v, want %+v", what, got, want)
	}
}

// getLogin gets tenant's login for host, or fails the test.
func getLogin(t *testing.T, s store.Store, tenant, host string) (sandbox.RegistryLogin, []byte) {
	t.Helper()
	l, sealed, err := s.RegistryLogins().Get(t.Context(), tenant, host)
	if err != nil {
		t.Fatalf("RegistryLogins.Get(%s, %s) = %v", tenant, host, err)
	}
	return l, sealed
}

// testRegistryLoginPut: put, get with the sealed password, replace
// (every field and the password but CreatedAt replaced), no password, and
// the errors.
func testRegistryLoginPut(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	sealed := []byte{0, 1, 2, 0xff, 'p'} // binary, with a NUL
	local := newLogin("acme", "127.0.0.1:5000", t0)
	ghcr := newLogin("acme", "ghcr.io", at(time.Second))
	ghcr.Insecure, ghcr.CA = false, ""
	ghcr.CreatedAt = time.Time{} // created at UpdatedAt
	for _, l := range []sandbox.RegistryLogin{local, ghcr} {
		if err := s.RegistryLogins().Put(ctx, l, sealed); err != nil {
			t.Fatalf("RegistryLogins.Put(%s, %s) = %v", l.Tenant, l.Host, err)
		}
	}
	ghcr.CreatedAt = ghcr.UpdatedAt
	got, pw := getLogin(t, s, "acme", local.Host)
	checkLogin(t, "RegistryLogins.Get(acme, local)", got, local)
	if !bytes.Equal(pw, sealed) {
		t.Errorf("RegistryLogins.Get(acme, local) password = %q, want %q", pw, sealed)
	}
	got, _ = getLogin(t, s, "acme", "ghcr.io")
	checkLogin(t, "RegistryLogins.Get(acme, ghcr.io) created with a zero CreatedAt", got, ghcr)

	// A replacement takes every field, the password and UpdatedAt, and
	// keeps CreatedAt.
	replaced := sandbox.RegistryLogin{Tenant: "acme", Host: local.Host, Username: "other",
		CreatedAt: at(time.Hour), UpdatedAt: at(time.Minute)}
	if err := s.RegistryLogins().Put(ctx, replaced, []byte("sealed-2")); err != nil {
		t.Fatalf("RegistryLogins.Put(replace) = %v", err)
	}
	want := replaced
	want.CreatedAt = local.CreatedAt
	got, pw = getLogin(t, s, "acme", local.Host)
	checkLogin(t, "RegistryLogins.Get after a replace", got, want)
	if string(pw) != "sealed-2" {
		t.Errorf("RegistryLogins.Get after a replace: password = %q, want the new one", pw)
	}

	// No password: stored as none.
	anon := newLogin("acme", "registry.internal:443", at(2*time.Second))
	anon.Username = ""
	if err := s.RegistryLogins().Put(ctx, anon, nil); err != nil {
		t.Fatalf("RegistryLogins.Put(no password) = %v", err)
	}
	got, pw = getLogin(t, s, "acme", anon.Host)
	checkLogin(t, "RegistryLogins.Get(no password)", got, anon)
	if len(pw) != 0 {
		t.Errorf("RegistryLogins.Get(no password) password = %q, want none", pw)
	}

	for name, edit := range map[string]func(*sandbox.RegistryLogin){
		"tenant": func(l *sandbox.RegistryLogin) { l.Tenant = "" },
		"host":   func(l *sandbox.RegistryLogin) { l.Host = "" },
	} {
		l := newLogin("acme", "empty.example", t0)
		edit(&l)
		if err := s.RegistryLogins().Put(ctx, l, sealed); err == nil {
			t.Errorf("RegistryLogins.Put with an empty %s = nil error", name)
		}
	}
	if list, err := s.RegistryLogins().List(ctx, "acme"); err != nil || len(list) != 3 {
		t.Errorf("RegistryLogins.List(acme) after refused puts = %+v, %v; want the three put", list, err)
	}
}

// testRegistryLoginTenants: List has a tenant's logins by host, Get and
// Delete touch its own only, and a missing login is ErrNotFound.
func testRegistryLoginTenants(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	ours := newLogin("acme", "127.0.0.1:5000", t0)
	theirs := newLogin("globex", "127.0.0.1:5000", at(time.Second))
	ghcr := newLogin("acme", "ghcr.io", at(2*time.Second))
	for _, l := range []sandbox.RegistryLogin{ghcr, ours, theirs} {
		if err := s.RegistryLogins().Put(ctx, l, []byte("sealed-"+l.Tenant)); err != nil {
			t.Fatalf("RegistryLogins.Put(%s, %s) = %v", l.Tenant, l.Host, err)
		}
	}
	list, err := s.RegistryLogins().List(ctx, "acme")
	if err != nil || len(list) != 2 {
		t.Fatalf("RegistryLogins.List(acme) = %+v, %v; want two", list, err)
	}
	checkLogin(t, "RegistryLogins.List(acme)[0]", list[0], ours)
	checkLogin(t, "RegistryLogins.List(acme)[1]", list[1], ghcr)
	if list, err := s.RegistryLogins().List(ctx, "initech"); err != nil || list == nil || len(list) != 0 {
		t.Errorf("RegistryLogins.List(initech) = %#v, %v; want an empty list", list, err)
	}
	if _, pw := getLogin(t, s, "globex", ours.Host); string(pw) != "sealed-globex" {
		t.Errorf("globex's login for acme's host: password = %q, want its own", pw)
	}
	if _, _, err := s.RegistryLogins().Get(ctx, "globex", "ghcr.io"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RegistryLogins.Get(globex, acme's host) = %v, want ErrNotFound", err)
	}

	if err := s.RegistryLogins().Delete(ctx, "acme", ours.Host); err != nil {
		t.Fatalf("RegistryLogins.Delete = %v", err)
	}
	if _, _, err := s.RegistryLogins().Get(ctx, "acme", ours.Host); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RegistryLogins.Get after delete = %v, want ErrNotFound", err)
	}
	if err := s.RegistryLogins().Delete(ctx, "acme", ours.Host); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RegistryLogins.Delete twice = %v, want ErrNotFound", err)
	}
	if err := s.RegistryLogins().Delete(ctx, "initech", ghcr.Host); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RegistryLogins.Delete(initech, acme's host) = %v, want ErrNotFound", err)
	}
	got, _ := getLogin(t, s, "globex", theirs.Host)
	checkLogin(t, "globex's login after acme's delete", got, theirs)
	got, _ = getLogin(t, s, "acme", ghcr.Host)
	checkLogin(t, "acme's other login after a delete", got, ghcr)
}
