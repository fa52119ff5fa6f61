package registry

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Names the registry's token configuration and the token server agree on.
const (
	tokenService = "hearth-test-registry"
	tokenIssuer  = "hearth-test-token-server"
)

// tokenFront stands in front of a registry configured for bearer tokens, as
// many registries' token services do: it answers /token itself (a JWT the
// registry verifies against the certificate in its rootcertbundle, granting
// what is asked to the one user whose basic credentials it checks) and
// passes every other request to the registry. Serving the token from the
// registry's own host:port keeps the realm on the host the client trusts.
type tokenFront struct {
	key            keyPair
	user, password string
	registry       *httputil.ReverseProxy
	issued         atomic.Int64
}

func newTokenFront(key keyPair, user, password string, backend *url.URL) *tokenFront {
	return &tokenFront{
		key: key, user: user, password: password,
		registry: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backend)
			r.Out.Host = r.In.Host
		}},
	}
}

func (f *tokenFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/token" {
		f.registry.ServeHTTP(w, r)
		return
	}
	user, password, ok := r.BasicAuth()
	if !ok || user != f.user || password != f.password {
		w.Header().Set("WWW-Authenticate", `Basic realm="hearth-test-token"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}`, http.StatusUnauthorized)
		return
	}
	tok, err := f.sign(user, r.URL.Query()["scope"])
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f.issued.Add(1)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"token": tok, "access_token": tok, "expires_in": 300,
		"issued_at": time.Now().UTC().Format(time.RFC3339),
	})
}

// access is one grant of a token ("repository", "app", ["pull", "push"]).
type access struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

// sign makes an ES256 JWT for user granting every scope asked
// ("repository:NAME:pull,push"), with the signing certificate in its x5c
// header for the registry to verify against its roots.
func (f *tokenFront) sign(user string, scopes []string) (string, error) {
	grants := []access{}
	for _, s := range scopes {
		for _, one := range strings.Fields(s) {
			parts := strings.Split(one, ":")
			if len(parts) < 3 {
				continue
			}
			grants = append(grants, access{
				Type:    parts[0],
				Name:    strings.Join(parts[1:len(parts)-1], ":"),
				Actions: strings.Split(parts[len(parts)-1], ","),
			})
		}
	}
	now := time.Now()
	header, err := json.Marshal(map[string]any{
		"typ": "JWT", "alg": "ES256",
		"x5c": []string{base64.StdEncoding.EncodeToString(f.key.parsed.Raw)},
	})
	if err != nil {
		return "", err
	}
	claims, err := json.Marshal(map[string]any{
		"iss": tokenIssuer, "sub": user, "aud": tokenService,
		"exp": now.Add(5 * time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(),
		"iat": now.Unix(), "jti": base64.RawURLEncoding.EncodeToString(randomBytes(12)),
		"access": grants,
	})
	if err != nil {
		return "", err
	}
	input := b64(header) + "." + b64(claims)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, f.key.signer, sum[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64) // JWS ES256: R and S, 32 bytes each, big-endian
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + b64(sig), nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}
