package lifecycle_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

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
	secret, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, "")
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
		got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, secret)
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
		got, created, err := e.svc.Tenancy.EnsureOperatorToken(ctx, current)
		if err != nil || !created || got == current || got == secret {
			t.Errorf("EnsureOperatorToken(%s) = %q, %v, %v; want a new secret", current, got, created, err)
			continue
		}
		if p, err := e.svc.Tenancy.Authenticate(ctx, got); err != nil || p.Role != sandbox.RoleOperator {
			t.Errorf("Authenticate(new operator token) = %+v, %v; want an operator", p, err)
		}
	}
}
