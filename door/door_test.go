package door_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// tenancy knows one token, and counts the authentications.
type tenancy struct{ calls atomic.Int64 }

func (t *tenancy) Authenticate(_ context.Context, secret string) (sandbox.Principal, error) {
	t.calls.Add(1)
	if secret != "good" {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.CodeUnauthenticated, "missing or invalid token")
	}
	return sandbox.Principal{Tenant: "t1", Agent: "a1", Role: sandbox.RoleAgent, TokenID: "tok"}, nil
}

// sandboxes sees only "mine".
type sandboxes struct{}

func (sandboxes) Get(_ context.Context, _ sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	if ref != "mine" {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeNotFound, "sandbox %q not found", ref)
	}
	return sandbox.Sandbox{Name: ref}, nil
}

// recorder keeps the audit events.
type recorder struct {
	mu     sync.Mutex
	events []sandbox.AuditEvent
}

func (r *recorder) Record(e sandbox.AuditEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func do(t *testing.T, h http.Handler, method, path, token string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestChain: each call is authenticated once, the principal reaches the
// handler and its context, a sandbox the caller cannot see is refused
// before the handler runs, errors take the door's dialect, and every call
// is audited under its door.
func TestChain(t *testing.T) {
	ten, rec := &tenancy{}, &recorder{}
	chain := door.New(ten, sandboxes{}, door.Options{Audit: rec})
	var ran atomic.Int64
	ok := func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
		ran.Add(1)
		if q, found := door.PrincipalOf(r.Context()); !found || q != p {
			t.Errorf("PrincipalOf = %+v, %v; want %+v", q, found, p)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	native := &door.Door{Routes: []door.Route{{Pattern: "GET /v1/x/{name}", Verb: "x.get", Visible: true, Handle: ok}}}
	other := &door.Door{Name: "other", Prefix: "/other", Header: http.Header{"Dialect": {"other"}},
		Routes: []door.Route{{Pattern: "GET /other/{name}", Verb: "x.get", Handle: ok}},
		WriteError: func(w http.ResponseWriter, _ *http.Request, status int, e *sandbox.Error) {
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(map[string]string{"other": string(e.Code)})
		}}
	h := chain.Handler(native, other)

	for _, tc := range []struct {
		name, path, token string
		status            int
		dialect           string
		ran               int64
	}{
		{"native ok", "/v1/x/mine", "good", http.StatusNoContent, "", 1},
		{"native no token", "/v1/x/mine", "", http.StatusUnauthorized, "", 0},
		{"native not visible", "/v1/x/yours", "good", http.StatusNotFound, "", 0},
		{"other bad token", "/other/mine", "bad", http.StatusUnauthorized, "other", 0},
		{"other no route", "/other/a/b", "good", http.StatusNotFound, "other", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ten.calls.Store(0)
			ran.Store(0)
			w := do(t, h, "GET", tc.path, tc.token)
			if w.Code != tc.status || ran.Load() != tc.ran {
				t.Errorf("GET %s = %d (handler ran %d times), want %d (%d)", tc.path, w.Code, ran.Load(), tc.status, tc.ran)
			}
			if got := w.Header().Get("Dialect"); got != tc.dialect {
				t.Errorf("GET %s: Dialect = %q, want %q", tc.path, got, tc.dialect)
			}
			if n := ten.calls.Load(); tc.token != "" && tc.status != http.StatusNotFound && n != 1 {
				t.Errorf("GET %s: %d authentications, want 1", tc.path, n)
			}
			if tc.status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("GET %s: no WWW-Authenticate: Bearer on a 401", tc.path)
			}
		})
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 4 { // no-route calls are not audited
		t.Fatalf("audit = %+v, want 4 events", rec.events)
	}
	if e := rec.events[0]; e.Door != sandbox.DoorAPI || e.Verb != "x.get" || e.Sandbox == "" || e.TokenID != "tok" || e.Code != "" || e.Status != http.StatusNoContent {
		t.Errorf("first event = %+v", e)
	}
	if e := rec.events[3]; e.Door != "other" || e.Code != sandbox.CodeUnauthenticated || e.Status != http.StatusUnauthorized {
		t.Errorf("last event = %+v", e)
	}
}

// TestHold: a caller holding MaxConnections streams is refused another
// with rate_limited and the numbers; another caller is not.
func TestHold(t *testing.T) {
	chain := door.New(&tenancy{}, sandboxes{}, door.Options{MaxConnections: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	h := chain.Handler(&door.Door{Routes: []door.Route{{Pattern: "GET /s", Verb: "s", Auth: door.AuthOptional, Stream: true,
		Handle: func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
			if p.TokenID != "" {
				entered <- struct{}{}
				<-release
			}
			return nil
		}}}})
	go do(t, h, "GET", "/s", "good")
	<-entered
	w := do(t, h, "GET", "/s", "good")
	var body sandbox.ErrorBody
	json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != http.StatusTooManyRequests || body.Error.Code != sandbox.CodeRateLimited || body.Error.Details["limit"] != float64(1) {
		t.Errorf("second stream = %d %s, want 429 rate_limited with limit 1", w.Code, w.Body)
	}
	if w := do(t, h, "GET", "/s", ""); w.Code != http.StatusOK {
		t.Errorf("an anonymous caller's stream = %d, want 200", w.Code)
	}
	close(release)
}

// TestWriteJSONErrorRetryAfter: an error whose details say when to retry
// answers with Retry-After too (set as an int, or read back from JSON as a
// float64); one without has none.
func TestWriteJSONErrorRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		err  *sandbox.Error
		want string
	}{
		{sandbox.Errorf(sandbox.CodeUnavailable, "queued").With("retry_after_seconds", 7), "7"},
		{sandbox.Errorf(sandbox.CodeCircuitOpen, "open").With("retry_after_seconds", float64(3)), "3"},
		{sandbox.Errorf(sandbox.CodeUnavailable, "down"), ""},
	} {
		rec := httptest.NewRecorder()
		door.WriteJSONError(rec, httptest.NewRequest(http.MethodGet, "/", nil), http.StatusServiceUnavailable, tc.err)
		if got := rec.Header().Get("Retry-After"); got != tc.want {
			t.Errorf("%v: Retry-After = %q, want %q", tc.err, got, tc.want)
		}
		if !strings.Contains(rec.Body.String(), `"code":"`+string(tc.err.Code)+`"`) {
			t.Errorf("%v: body = %s", tc.err, rec.Body.String())
		}
	}
}
