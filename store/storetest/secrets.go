package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hearth/hearth/store"
)

// testSecrets: put, get, replace (CreatedAt kept), list per tenant without
// values, delete, and the errors.
func testSecrets(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	t1 := t0.Add(time.Minute)
	sealed := []byte{0, 1, 2, 0xff, 'k'} // binary, with a NUL
	if err := s.Secrets().Put(ctx, "acme", "API_KEY", sealed, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Secrets().Put(ctx, "globex", "API_KEY", []byte("other"), t0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Secrets().Get(ctx, "acme", "API_KEY"); err != nil || !bytes.Equal(got, sealed) {
		t.Errorf("Secrets.Get(acme, API_KEY) = %q, %v; want %q", got, err, sealed)
	}
	if err := s.Secrets().Put(ctx, "acme", "API_KEY", []byte("v2"), t1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Secrets().Get(ctx, "acme", "API_KEY"); err != nil || string(got) != "v2" {
		t.Errorf("Secrets.Get after a replace = %q, %v", got, err)
	}
	if err := s.Secrets().Put(ctx, "acme", "DB_URL", []byte("x"), t1); err != nil {
		t.Fatal(err)
	}
	list, err := s.Secrets().List(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].Name != "API_KEY" || list[1].Name != "DB_URL" || list[0].Tenant != "acme" ||
		!list[0].CreatedAt.Equal(t0) || !list[0].UpdatedAt.Equal(t1) || !list[1].CreatedAt.Equal(t1) {
		t.Errorf("Secrets.List(acme) = %+v, %v; want API_KEY (created t0, updated t1) and DB_URL", list, err)
	}
	if list, err := s.Secrets().List(ctx, "initech"); err != nil || list == nil || len(list) != 0 {
		t.Errorf("Secrets.List(initech) = %#v, %v; want an empty list", list, err)
	}
	if err := s.Secrets().Delete(ctx, "acme", "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Secrets().Get(ctx, "acme", "API_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Secrets.Get after delete = %v, want ErrNotFound", err)
	}
	if got, err := s.Secrets().Get(ctx, "globex", "API_KEY"); err != nil || string(got) != "other" {
		t.Errorf("another tenant's secret of the same name = %q, %v; want it untouched", got, err)
	}
	if err := s.Secrets().Delete(ctx, "acme", "API_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Secrets.Delete twice = %v, want ErrNotFound", err)
	}
	for name, err := range map[string]error{
		"empty tenant": s.Secrets().Put(ctx, "", "K", []byte("v"), t0),
		"empty name":   s.Secrets().Put(ctx, "acme", "", []byte("v"), t0),
		"empty value":  s.Secrets().Put(ctx, "acme", "K", nil, t0),
	} {
		if err == nil {
			t.Errorf("Secrets.Put with an %s = nil error", name)
		}
	}
}
