package lifecycle

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"strconv"
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

// ErrOperatorTokenHeld is returned by EnsureOperatorToken for a shared
// store when the caller's operator token is missing or stale and the store
// already holds a live operator token: another daemon of the store made it
// (or an operator did), and this one mints none, so that a store gets one
// bootstrap operator token however many daemons start on it. An operator
// mints another with `hearth token create --operator`.
var ErrOperatorTokenHeld = errors.New("lifecycle: the store already holds a live operator token")

// EnsureOperatorToken returns a working operator token: current when it is
// still valid (created false), else a new one (created true), whose hash
// alone is stored. The caller shows or saves the secret; it cannot be
// recovered later.
//
// shared says the store is shared by several daemons (Postgres): then a
// new token is minted only if the store holds no live (neither revoked nor
// expired) operator token unrestricted by a name prefix, else the error is
// ErrOperatorTokenHeld. Daemons starting at once on an empty store mint
// one between them: see bootstrapOperatorToken.
func (s *Tenancy) EnsureOperatorToken(ctx context.Context, current string, shared bool) (secret string, created bool, err error) {
	if current != "" {
		if p, err := s.Authenticate(ctx, current); err == nil && p.Role == sandbox.RoleOperator {
			return current, false, nil
		}
	}
	if shared {
		return s.bootstrapOperatorToken(ctx)
	}
	secret, _, err = s.createToken(ctx, operatorPrincipal(), 0)
	return secret, err == nil, err
}

// bootstrapIDPrefix starts the ids of the operator tokens minted for a
// shared store, "tok-operator-1", "-2" and so on: a random id is "tok-" and
// 8 base32 characters, never with a second '-'.
const bootstrapIDPrefix = "tok-operator-"

// bootstrapOperatorToken mints the operator token of a shared store, or
// returns ErrOperatorTokenHeld if the store holds a live unrestricted one.
// Its id is the next of bootstrapIDPrefix's sequence (tokens are revoked,
// never deleted, so the count of those stored gives it): daemons that
// find no live operator token at the same moment compute the same id, the
// store takes the first (ids are unique) and refuses the others
// (store.ErrExists), which then get ErrOperatorTokenHeld too.
func (s *Tenancy) bootstrapOperatorToken(ctx context.Context) (string, bool, error) {
	toks, err := s.opts.Store.Tokens().List(ctx)
	if err != nil {
		return "", false, s.internal("list tokens", err)
	}
	now, minted := s.now(), 0
	for _, t := range toks {
		if strings.HasPrefix(t.ID, bootstrapIDPrefix) {
			minted++
		}
		if t.Principal.Role == sandbox.RoleOperator && t.Principal.NamePrefix == "" &&
			t.RevokedAt.IsZero() && (t.ExpiresAt.IsZero() || now.Before(t.ExpiresAt)) {
			return "", false, ErrOperatorTokenHeld
		}
	}
	secret, t := s.newToken(operatorPrincipal(), 0)
	t.ID = bootstrapIDPrefix + strconv.Itoa(minted+1)
	err = s.opts.Store.Tokens().Create(ctx, t)
	if errors.Is(err, store.ErrExists) {
		return "", false, ErrOperatorTokenHeld
	}
	if err != nil {
		return "", false, s.internal("create token", err)
	}
	return secret, true, nil
}

// createToken stores a new token for p and returns its secret and row.
func (s *Tenancy) createToken(ctx context.Context, p sandbox.Principal, ttl time.Duration) (string, store.Token, error) {
	secret, t := s.newToken(p, ttl)
	if err := s.opts.Store.Tokens().Create(ctx, t); err != nil {
		return "", store.Token{}, s.internal("create token", err)
	}
	return secret, t, nil
}

// newToken makes a token for p, a random secret and a random id, created
// now and expiring after ttl (never when 0), and returns its secret and the
// row to store.
func (s *Tenancy) newToken(p sandbox.Principal, ttl time.Duration) (string, store.Token) {
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
	return secret, t
}
