package lifecycle

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// tokenPrefix marks hearth secrets so that secret scanners can find leaks.
const tokenPrefix = "hearth_"

// operatorPrincipal is the Principal of the bootstrap operator token, which
// is also who the platform acts as when it reaps.
func operatorPrincipal() sandbox.Principal {
	return sandbox.Principal{Tenant: systemTenant, Agent: "operator", Role: sandbox.RoleOperator}
}

func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// Authenticate maps a bearer token to its Principal. A missing, unknown,
// revoked or expired token is unauthenticated, with one message for all of
// them so that a guesser learns nothing.
func (s *Tenancy) Authenticate(ctx context.Context, secret string) (sandbox.Principal, error) {
	unauth := sandbox.Errorf(sandbox.CodeUnauthenticated, "missing or invalid token").
		WithHint("send a valid token as `Authorization: Bearer <token>` (the CLI reads HEARTH_TOKEN or --token)")
	if !strings.HasPrefix(secret, tokenPrefix) {
		return sandbox.Principal{}, unauth
	}
	hash := hashToken(secret)
	t, err := s.opts.Store.Tokens().ByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Principal{}, unauth
	}
	if err != nil {
		return sandbox.Principal{}, s.internal("token lookup", err)
	}
	now := s.now()
	if subtle.ConstantTimeCompare([]byte(t.Hash), []byte(hash)) != 1 ||
		!t.RevokedAt.IsZero() || !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) {
		return sandbox.Principal{}, unauth
	}
	p := t.Principal
	p.TokenID = t.ID
	return p, nil
}

// EnsureOperatorToken returns a working operator token: current when it is
// still valid, else a new one (created true), whose hash alone is stored.
// The caller shows or saves the secret; it cannot be recovered later.
func (s *Tenancy) EnsureOperatorToken(ctx context.Context, current string) (secret string, created bool, err error) {
	if current != "" {
		if p, err := s.Authenticate(ctx, current); err == nil && p.Role == sandbox.RoleOperator {
			return current, false, nil
		}
	}
	secret, _, err = s.createToken(ctx, operatorPrincipal(), 0)
	return secret, err == nil, err
}

// createToken stores a new token for p and returns its secret and row.
func (s *Tenancy) createToken(ctx context.Context, p sandbox.Principal, ttl time.Duration) (string, store.Token, error) {
	secret := tokenPrefix + randomString(32)
	t := store.Token{
		ID:        "tok-" + randomString(5),
		Hash:      hashToken(secret),
		Principal: p,
		CreatedAt: s.now().UTC(),
	}
	if ttl > 0 {
		t.ExpiresAt = t.CreatedAt.Add(ttl)
	}
	if err := s.opts.Store.Tokens().Create(ctx, t); err != nil {
		return "", store.Token{}, s.internal("create token", err)
	}
	return secret, t, nil
}
