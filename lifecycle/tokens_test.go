package lifecycle_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// addToken stores a token for p with the given secret.
func (e *env) addToken(t *testing.T, id, secret string, p sandbox.Principal, expires, revoked time.Time) {
	t.Helper()
	sum := sha256.Sum256([]byte(secret))
	tok := store.Token{ID: id, Hash: hex.EncodeToString(sum[:]), Principal: p, CreatedAt: epoch, ExpiresAt: expires}
	if err := e.db.Tokens().Create(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	if !revoked.IsZero() {
		if err := e.db.Tokens().Revoke(t.Context(), id, revoked); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	e := newEnv(t, nil)
	e.clock.Advance(time.Hour)
	now := e.clock.Now()
	e.addToken(t, "tok-live", "hearth_live", a1, time.Time{}, time.Time{})
	e.addToken(t, "tok-later", "hearth_expireslater", a2, now.Add(time.Second), time.Time{})
	e.addToken(t, "tok-revoked", "hearth_revoked", a1, time.Time{}, epoch)
	e.addToken(t, "tok-expired", "hearth_expired", a1, now.Add(-time.Second), time.Time{})
	e.addToken(t, "tok-expiresnow", "hearth_expiresnow", a1, now, time.Time{})
	e.addToken(t, "tok-noprefix", "noprefix", a1, time.Time{}, time.Time{})

	withToken := func(p sandbox.Principal, id string) sandbox.Principal { p.TokenID = id; return p }
	for _, tt := range []struct {
		secret string
		want   sandbox.Principal
	}{
		{"hearth_live", withToken(a1, "tok-live")},
		{"hearth_expireslater", withToken(a2, "tok-later")},
	} {
		if got, err := e.svc.Tenancy.Authenticate(t.Context(), tt.secret); err != nil || got != tt.want {
			t.Errorf("Authenticate(%s) = %+v, %v, want %+v", tt.secret, got, err, tt.want)
		}
	}

	var first *sandbox.Error
	for _, tt := range []struct{ name, secret string }{
		{"missing", ""},
		{"garbage", "garbage"},
		{"unknown", "hearth_nosuchtoken"},
		{"revoked", "hearth_revoked"},
		{"expired", "hearth_expired"},
		{"expiring now", "hearth_expiresnow"},
		{"stored without the prefix", "noprefix"},
		{"a stored hash as the secret", e.hashOf(t, "tok-live")},
		{"live with a space", "hearth_live "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := e.svc.Tenancy.Authenticate(t.Context(), tt.secret)
			se := wantCode(t, "Authenticate("+tt.name+")", err, sandbox.CodeUnauthenticated)
			if p != (sandbox.Principal{}) {
				t.Errorf("Authenticate(%s) = %+v, want no principal", tt.name, p)
			}
			if first == nil {
				first = se
				if se.Hint == "" || strings.Contains(se.Message, "hearth_") {
					t.Errorf("Authenticate(%s) = %+v, want a hint and no word of the token", tt.name, se)
				}
				return
			}
			// One message for all, so that a guesser learns nothing.
			if se.Message != first.Message || se.Hint != first.Hint || len(se.Details) != 0 {
				t.Errorf("Authenticate(%s) = %+v, want the same error as every other failure, %+v", tt.name, se, first)
			}
		})
	}
}

// hashOf returns the stored hash of the token with id.
func (e *env) hashOf(t *testing.T, id string) string {
	t.Helper()
	toks, err := e.db.Tokens().List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks {
		if tok.ID == id {
			return tok.Hash
		}
	}
	t.Fatalf("no token %s", id)
	return ""
}

func TestEnsureOperatorToken(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	secret, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, "", false)
	if err != nil || !created || !strings.HasPrefix(secret, "hearth_") || len(secret) < 40 {
		t.Fatalf("EnsureOperatorToken(\"\") = %q, %v, %v; want a new hearth_ secret", secret, created, err)
	}
	p, err := e.svc.Tenancy.Authenticate(ctx, secret)
	if err != nil || p.Role != sandbox.RoleOperator {
		t.Fatalf("Authenticate(operator token) = %+v, %v; want an operator", p, err)
	}
	toks, err := e.db.Tokens().List(ctx)
	if err != nil || len(toks) != 1 {
		t.Fatalf("ListTokens() = %+v, %v; want the one operator token", toks, err)
	}
	sum := sha256.Sum256([]byte(secret))
	if tok := toks[0]; tok.Hash != hex.EncodeToString(sum[:]) || tok.ID == "" || strings.Contains(tok.ID, secret) ||
		!tok.CreatedAt.Equal(epoch) || !tok.ExpiresAt.IsZero() {
		t.Errorf("stored token = %+v; want only the secret's SHA-256, created now, never expiring", tok)
	}

	// A valid current token is kept, any number of times.
	for range 2 {
		got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, secret, false)
		if err != nil || created || got != secret {
			t.Fatalf("EnsureOperatorToken(current) = %q, %v, %v; want it back, created false", got, created, err)
		}
	}
	if toks, _ := e.db.Tokens().List(ctx); len(toks) != 1 {
		t.Errorf("after keeping the current token, %d tokens are stored, want 1", len(toks))
	}

	// A current token that is not a valid operator token is replaced.
	e.addToken(t, "tok-agent", "hearth_agenttoken", a1, time.Time{}, time.Time{})
	e.addToken(t, "tok-oldop", "hearth_oldoperator", op, time.Time{}, epoch)
	for _, current := range []string{"garbage", "hearth_nosuchtoken", "hearth_agenttoken", "hearth_oldoperator"} {
		got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, current, false)
		if err != nil || !created || got == current || got == secret {
			t.Errorf("EnsureOperatorToken(%s) = %q, %v, %v; want a new secret", current, got, created, err)
			continue
		}
		if p, err := e.svc.Tenancy.Authenticate(ctx, got); err != nil || p.Role != sandbox.RoleOperator {
			t.Errorf("Authenticate(new operator token) = %+v, %v; want an operator", p, err)
		}
	}
}

// TestEnsureOperatorTokenShared: on a shared store, a daemon whose token
// file is missing or stale mints an operator token only when the store
// holds no live unrestricted one; otherwise ErrOperatorTokenHeld, and
// nothing is stored. A valid current token is kept as on a store of one's
// own.
func TestEnsureOperatorTokenShared(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.clock.Advance(time.Hour)
	now := e.clock.Now()
	// None of these is a live unrestricted operator token.
	e.addToken(t, "tok-agent", "hearth_agenttoken", a1, time.Time{}, time.Time{})
	e.addToken(t, "tok-admin", "hearth_admintoken", admin, time.Time{}, time.Time{})
	e.addToken(t, "tok-revoked", "hearth_revokedop", op, time.Time{}, epoch)
	e.addToken(t, "tok-expired", "hearth_expiredop", op, now.Add(-time.Second), time.Time{})
	e.addToken(t, "tok-expiring", "hearth_expiringop", op, now, time.Time{})
	narrow := op
	narrow.NamePrefix = "ci-"
	e.addToken(t, "tok-narrow", "hearth_narrowop", narrow, time.Time{}, time.Time{})

	secret, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, "hearth_revokedop", true)
	if err != nil || !created || !strings.HasPrefix(secret, "hearth_") {
		t.Fatalf("EnsureOperatorToken(stale, shared) with no live operator token = %q, %v, %v; want a new secret", secret, created, err)
	}
	if p, err := e.svc.Tenancy.Authenticate(ctx, secret); err != nil || p.Role != sandbox.RoleOperator || p.NamePrefix != "" {
		t.Fatalf("Authenticate(minted token) = %+v, %v; want an unrestricted operator", p, err)
	}
	stored := e.tokenCount(t)

	// Kept while valid.
	if got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, secret, true); err != nil || created || got != secret {
		t.Errorf("EnsureOperatorToken(current, shared) = %q, %v, %v; want it back, created false", got, created, err)
	}
	// Any other daemon's missing or stale file: the store holds one.
	for _, current := range []string{"", "garbage", "hearth_agenttoken", "hearth_revokedop", "hearth_expiredop"} {
		got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, current, true)
		if !errors.Is(err, lifecycle.ErrOperatorTokenHeld) || created || got != "" {
			t.Errorf("EnsureOperatorToken(%q, shared) = %q, %v, %v; want ErrOperatorTokenHeld", current, got, created, err)
		}
	}
	if n := e.tokenCount(t); n != stored {
		t.Errorf("after held refusals %d tokens are stored, want %d (none minted)", n, stored)
	}

	// Once that token is revoked the next daemon mints again.
	p, _ := e.svc.Tenancy.Authenticate(ctx, secret)
	if err := e.db.Tokens().Revoke(ctx, p.TokenID, now); err != nil {
		t.Fatal(err)
	}
	if got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, "", true); err != nil || !created || got == secret {
		t.Errorf("EnsureOperatorToken(\"\", shared) after the revoke = %q, %v, %v; want a new secret", got, created, err)
	}
	// A store of one's own mints whatever the store holds, as before.
	if got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, "", false); err != nil || !created || got == "" {
		t.Errorf("EnsureOperatorToken(\"\", not shared) = %q, %v, %v; want a new secret", got, created, err)
	}
}

// TestEnsureOperatorTokenSharedRace: daemons starting at once on an empty
// shared store mint one operator token between them; the others are told
// it is held.
func TestEnsureOperatorTokenSharedRace(t *testing.T) {
	e := newEnv(t, nil)
	const daemons = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		secrets []string
		held    int
	)
	for range daemons {
		wg.Go(func() {
			secret, created, err := e.svc.Tenancy.EnsureOperatorToken(t.Context(), "", true)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && created:
				secrets = append(secrets, secret)
			case errors.Is(err, lifecycle.ErrOperatorTokenHeld):
				held++
			default:
				t.Errorf("EnsureOperatorToken(\"\", shared) = %q, %v, %v; want a secret or ErrOperatorTokenHeld", secret, created, err)
			}
		})
	}
	wg.Wait()
	if len(secrets) != 1 || held != daemons-1 {
		t.Fatalf("%d daemons at once: %d minted, %d held; want 1 and %d", daemons, len(secrets), held, daemons-1)
	}
	if n := e.tokenCount(t); n != 1 {
		t.Errorf("%d tokens stored, want 1", n)
	}
	if p, err := e.svc.Tenancy.Authenticate(t.Context(), secrets[0]); err != nil || p.Role != sandbox.RoleOperator {
		t.Errorf("Authenticate(the minted token) = %+v, %v; want an operator", p, err)
	}

	// A daemon that loses the race between its look and its write finds
	// the id it computed taken, and is told the token is held.
	var racing *racingStore
	lost := newEnv(t, func(o *envOptions) {
		racing = &racingStore{Store: o.Store, competitor: store.Token{ID: "tok-operator-1", Hash: "c0ffee",
			Principal: sandbox.Principal{Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator}, CreatedAt: epoch}}
		o.Store = racing
	})
	if secret, created, err := lost.svc.Tenancy.EnsureOperatorToken(t.Context(), "", true); !errors.Is(err, lifecycle.ErrOperatorTokenHeld) || created || secret != "" {
		t.Errorf("EnsureOperatorToken(\"\", shared) losing the race = %q, %v, %v; want ErrOperatorTokenHeld", secret, created, err)
	}
	if n := lost.tokenCount(t); n != 1 || racing.err != nil {
		t.Errorf("%d tokens stored (competitor: %v), want the competitor's alone", n, racing.err)
	}
}

// racingStore is a store whose first token list is stale by one write: it
// returns what is stored, then stores competitor, as another daemon of a
// shared store would between this one's look and its write.
type racingStore struct {
	store.Store
	competitor store.Token
	once       sync.Once
	err        error // the competitor's write's
}

func (s *racingStore) Tokens() store.Tokens { return racingTokens{s.Store.Tokens(), s} }

type racingTokens struct {
	store.Tokens
	s *racingStore
}

func (r racingTokens) List(ctx context.Context) ([]store.Token, error) {
	toks, err := r.Tokens.List(ctx)
	r.s.once.Do(func() { r.s.err = r.Tokens.Create(ctx, r.s.competitor) })
	return toks, err
}

// TestCreateOperatorToken: only an unrestricted operator creates an
// operator token (token create --operator); it authenticates as an
// unrestricted operator of the system tenant, and a shared store's
// daemons then mint none of their own.
func TestCreateOperatorToken(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	req := sandbox.TokenRequest{Role: sandbox.RoleOperator}
	narrowOp := op
	narrowOp.NamePrefix = "ci-"
	for _, who := range []sandbox.Principal{a1, admin, b1, narrowOp} {
		secret, _, err := e.svc.Tenancy.CreateToken(ctx, who, req)
		wantCode(t, "CreateToken(operator) as "+string(who.Role)+" "+who.Agent+" "+who.NamePrefix, err, sandbox.CodePermissionDenied)
		if secret != "" {
			t.Errorf("a refused CreateToken returned a secret")
		}
	}
	if n := e.tokenCount(t); n != 0 {
		t.Fatalf("after refusals %d tokens are stored, want 0", n)
	}
	secret, info, err := e.svc.Tenancy.CreateToken(ctx, op, req)
	if err != nil || info.Role != sandbox.RoleOperator || info.Tenant != sandbox.SystemTenant || info.NamePrefix != "" {
		t.Fatalf("CreateToken(operator) as an operator = %+v, %v; want an unrestricted operator token of the system tenant", info, err)
	}
	p, err := e.svc.Tenancy.Authenticate(ctx, secret)
	if want := (sandbox.Principal{Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator, TokenID: info.ID}); err != nil || p != want {
		t.Errorf("Authenticate(operator token) = %+v, %v; want %+v", p, err, want)
	}
	if _, _, err := e.svc.Tenancy.EnsureOperatorToken(ctx, "", true); !errors.Is(err, lifecycle.ErrOperatorTokenHeld) {
		t.Errorf("EnsureOperatorToken(\"\", shared) after token create --operator = %v; want ErrOperatorTokenHeld", err)
	}
}

// tokenCount is the number of tokens stored, revoked ones included.
func (e *env) tokenCount(t *testing.T) int {
	t.Helper()
	toks, err := e.db.Tokens().List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(toks)
}
