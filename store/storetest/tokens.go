package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// newToken returns a live agent token that never expires.
func newToken(id, hash string, created time.Time) store.Token {
	return store.Token{
		ID:        id,
		Hash:      hash,
		Principal: sandbox.Principal{Tenant: "acme", Agent: "alice", Role: sandbox.RoleAgent},
		CreatedAt: created,
	}
}

// checkToken reports every way got differs from want, as stored.
func checkToken(t *testing.T, what string, got, want store.Token) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	checkTime(t, what+".ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	checkTime(t, what+".RevokedAt", got.RevokedAt, want.RevokedAt)
	got.CreatedAt, got.ExpiresAt, got.RevokedAt = time.Time{}, time.Time{}, time.Time{}
	want.CreatedAt, want.ExpiresAt, want.RevokedAt = time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Errorf("%s (times aside) = %+v, want %+v", what, got, want)
	}
}

func testTokenRoundTrip(t *testing.T, open OpenFunc) {
	live := newToken("tok-live", "aa01", t0)
	full := store.Token{
		ID:        "tok-full",
		Hash:      "bb02",
		Principal: sandbox.Principal{Tenant: "globex", Agent: "ops-bot", Role: sandbox.RoleTenantAdmin, NamePrefix: "hermes-"},
		CreatedAt: at(time.Second),
		ExpiresAt: at(90 * 24 * time.Hour),
		RevokedAt: at(time.Hour + time.Microsecond),
	}
	operator := store.Token{
		ID:        "tok-op",
		Hash:      "cc03",
		Principal: sandbox.Principal{Role: sandbox.RoleOperator},
		CreatedAt: at(2 * time.Second),
	}
	s := openStore(t, open)
	for _, tok := range []store.Token{live, full, operator} {
		t.Run(tok.ID, func(t *testing.T) {
			if err := s.Tokens().Create(t.Context(), tok); err != nil {
				t.Fatalf("Tokens.Create(%q) = %v, want nil", tok.ID, err)
			}
			got, err := s.Tokens().ByHash(t.Context(), tok.Hash)
			if err != nil {
				t.Fatalf("Tokens.ByHash(%q) = %v, want nil", tok.Hash, err)
			}
			checkToken(t, "Tokens.ByHash("+tok.Hash+")", got, tok)
		})
	}
	for _, hash := range []string{"dd04", "", "AA01", "tok-live"} {
		if _, err := s.Tokens().ByHash(t.Context(), hash); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Tokens.ByHash(%q) = %v, want ErrNotFound", hash, err)
		}
	}
}

func testTokenConflict(t *testing.T, open OpenFunc) {
	tests := []struct {
		name string
		tok  store.Token
	}{
		{"same hash", newToken("tok-2", "aa01", at(time.Second))},
		{"same id", newToken("tok-1", "bb02", at(time.Second))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, open)
			orig := newToken("tok-1", "aa01", t0)
			if err := s.Tokens().Create(t.Context(), orig); err != nil {
				t.Fatalf("Tokens.Create = %v, want nil", err)
			}
			if err := s.Tokens().Create(t.Context(), tt.tok); !errors.Is(err, store.ErrExists) {
				t.Fatalf("Tokens.Create(id %q, hash %q) = %v, want ErrExists", tt.tok.ID, tt.tok.Hash, err)
			}
			list, err := s.Tokens().List(t.Context())
			if err != nil || len(list) != 1 {
				t.Fatalf("Tokens.List after conflict = %d tokens, %v; want 1, nil", len(list), err)
			}
			checkToken(t, "original after conflict", list[0], orig)
		})
	}
}

func testTokenEmptyKey(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	for _, tok := range []store.Token{newToken("", "aa01", t0), newToken("tok-1", "", t0)} {
		if err := s.Tokens().Create(t.Context(), tok); err == nil {
			t.Errorf("Tokens.Create(id %q, hash %q) = nil, want an error", tok.ID, tok.Hash)
		}
	}
}

func testTokenList(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	list, err := s.Tokens().List(t.Context())
	if err != nil || len(list) != 0 {
		t.Fatalf("Tokens.List(empty store) = %d tokens, %v; want 0, nil", len(list), err)
	}
	fixtures := []store.Token{
		newToken("tok-c", "cc", at(3*time.Second)),
		newToken("tok-a", "aa", at(1*time.Second)),
		newToken("tok-b", "bb", at(2*time.Second)),
		newToken("tok-tie", "dd", at(3*time.Second)), // ties tok-c: inserted after it
	}
	for _, tok := range fixtures {
		if err := s.Tokens().Create(t.Context(), tok); err != nil {
			t.Fatalf("Tokens.Create(%q) = %v", tok.ID, err)
		}
	}
	list, err = s.Tokens().List(t.Context())
	if err != nil {
		t.Fatalf("Tokens.List = %v", err)
	}
	var ids []string
	for _, tok := range list {
		ids = append(ids, tok.ID)
	}
	if want := []string{"tok-a", "tok-b", "tok-c", "tok-tie"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("Tokens.List = %q, want %q", ids, want)
	}
	if len(list) == len(fixtures) {
		checkToken(t, "listed tok-a", list[0], fixtures[1])
	}
}

func testTokenRevoke(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	tok := newToken("tok-1", "aa01", t0)
	other := newToken("tok-2", "bb02", t0)
	for _, tk := range []store.Token{tok, other} {
		if err := s.Tokens().Create(ctx, tk); err != nil {
			t.Fatalf("Tokens.Create(%q) = %v", tk.ID, err)
		}
	}

	if err := s.Tokens().Revoke(ctx, tok.ID, time.Time{}); err == nil {
		t.Errorf("Tokens.Revoke(zero time) = nil, want an error")
	}
	first := at(time.Hour + 3*time.Microsecond)
	if err := s.Tokens().Revoke(ctx, tok.ID, first); err != nil {
		t.Fatalf("Tokens.Revoke(%q) = %v, want nil", tok.ID, err)
	}
	if err := s.Tokens().Revoke(ctx, tok.ID, at(2*time.Hour)); err != nil {
		t.Errorf("Tokens.Revoke(%q) again = %v, want nil", tok.ID, err)
	}
	tok.RevokedAt = first
	got, err := s.Tokens().ByHash(ctx, tok.Hash)
	if err != nil {
		t.Fatalf("Tokens.ByHash(revoked) = %v, want the token", err)
	}
	checkToken(t, "revoked token", got, tok)

	got, err = s.Tokens().ByHash(ctx, other.Hash)
	if err != nil {
		t.Fatalf("Tokens.ByHash(other) = %v", err)
	}
	checkToken(t, "other token", got, other)

	if err := s.Tokens().Revoke(ctx, "tok-missing", first); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tokens.Revoke(missing) = %v, want ErrNotFound", err)
	}
	if err := s.Tokens().Revoke(ctx, tok.Hash, first); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tokens.Revoke(by hash, not id) = %v, want ErrNotFound", err)
	}
}
