package spritesapi_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/hearth/hearth/testutil/daemontest"
)

type rule struct {
	Domain string `json:"domain"`
	Action string `json:"action"`
}

// TestNetworkPolicy: POST (and PUT) /policy/network set the sprite's own
// egress policy from Sprites rules and answer 204; GET gives the rules
// back normalized; no rules is no policy; bad rules are 400.
func TestNetworkPolicy(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.want(t, http.StatusCreated, "POST", "/v1/sprites", tok, `{"name":"web"}`, nil)
	get := func() []rule {
		t.Helper()
		var p struct {
			Rules []rule `json:"rules"`
		}
		body := e.want(t, http.StatusOK, "GET", "/v1/sprites/web/policy/network", tok, "", &p)
		if p.Rules == nil {
			t.Errorf("GET policy = %s, want a rules array", body)
		}
		return p.Rules
	}
	if got := get(); len(got) != 0 {
		t.Errorf("a new sprite's rules = %+v, want none", got)
	}

	e.want(t, http.StatusNoContent, "POST", "/v1/sprites/web/policy/network", tok,
		`{"rules":[{"domain":"*","action":"deny"},{"domain":"GitHub.com","action":"allow"},{"domain":"*.npmjs.org"},{"domain":"bad.npmjs.org","action":"deny"}]}`, nil)
	want := []rule{{"github.com", "allow"}, {"*.npmjs.org", "allow"}, {"bad.npmjs.org", "deny"}}
	if got := get(); !slices.Equal(got, want) {
		t.Errorf("rules = %+v, want %+v", got, want)
	}
	sb, err := e.d.Svc.Sandboxes.Get(t.Context(), daemontest.AgentA1, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sb.Egress.Allow, []string{"github.com", "*.npmjs.org"}) || !slices.Equal(sb.Egress.Deny, []string{"bad.npmjs.org"}) {
		t.Errorf("the sandbox's egress policy = %+v", sb.Egress)
	}

	// Deny rules only: no name is allowed, so nothing is.
	e.want(t, http.StatusNoContent, "PUT", "/v1/sprites/web/policy/network", tok, `{"rules":[{"domain":"evil.example","action":"deny"}]}`, nil)
	if got, want := get(), []rule{{"evil.example", "deny"}, {"*", "deny"}}; !slices.Equal(got, want) {
		t.Errorf("deny-only rules = %+v, want %+v", got, want)
	}
	// "*" allowed: names unrestricted but for the denied.
	e.want(t, http.StatusNoContent, "POST", "/v1/sprites/web/policy/network", tok, `{"rules":[{"domain":"*"},{"domain":"evil.example","action":"deny"}]}`, nil)
	if got, want := get(), []rule{{"*", "allow"}, {"evil.example", "deny"}}; !slices.Equal(got, want) {
		t.Errorf("allow-all rules = %+v, want %+v", got, want)
	}
	e.want(t, http.StatusNoContent, "POST", "/v1/sprites/web/policy/network", tok, `{"rules":[{"include":"defaults"}]}`, nil)
	if got := get(); !slices.Contains(got, rule{"github.com", "allow"}) || !slices.Contains(got, rule{"pypi.org", "allow"}) {
		t.Errorf("the defaults preset gave %+v, want github.com and pypi.org allowed", got)
	}
	e.want(t, http.StatusNoContent, "POST", "/v1/sprites/web/policy/network", tok, `{"rules":[]}`, nil)
	if got := get(); len(got) != 0 {
		t.Errorf("after no rules: %+v, want none", got)
	}

	for _, body := range []string{
		`{"rules":[{"domain":"x.example","action":"block"}]}`,
		`{"rules":[{"include":"everything"}]}`,
		`{"rules":[{"action":"allow"}]}`,
		`{"rules":[{"domain":"not a name"}]}`,
		`{"rules":[{"domain":"203.0.113.0/24"}]}`,
	} {
		e.wantError(t, http.StatusBadRequest, "invalid_argument", "POST", "/v1/sprites/web/policy/network", tok, body)
	}
	e.wantError(t, http.StatusNotFound, "not_found", "POST", "/v1/sprites/nope/policy/network", tok, `{"rules":[]}`)
}
