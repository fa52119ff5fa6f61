package spritesapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemontest"
)

const tok = daemontest.TokenA1

// The lifecycle of a sprite with the status codes each SDK insists on: 201
// create, 409 on a taken name, 200 get and 404 once gone, 200 update with
// the object, 204 delete; names as the client chose them; timestamps with
// six fractional digits.
func TestSpriteLifecycle(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	var s sprite
	e.want(t, http.StatusCreated, "POST", "/v1/sprites", tok, `{"name":"hermes-default-t1","labels":["hermes"],"config":{"ram_mb":256},"wait_for_capacity":true}`, &s)
	if s.Name != "hermes-default-t1" || s.Status != "running" || s.ID == "" || s.Organization != "t1" || !slices.Equal(s.Labels, []string{"hermes"}) || s.URLSettings.Auth != "sprite" {
		t.Errorf("created %+v; want the name as given, running, labelled", s)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`).MatchString(s.CreatedAt) {
		t.Errorf("created_at %q; want RFC 3339 with six fractional digits", s.CreatedAt)
	}
	// The sandbox behind it carries the creator's attribution.
	if _, err := e.d.Svc.Sandboxes.Get(t.Context(), daemontest.AgentA1, "hermes-default-t1"); err != nil {
		t.Errorf("native Get = %v", err)
	}
	e.wantError(t, http.StatusConflict, "already_exists", "POST", "/v1/sprites", tok, `{"name":"hermes-default-t1"}`)

	var got sprite
	e.want(t, http.StatusOK, "GET", "/v1/sprites/hermes-default-t1", tok, "", &got)
	if got.ID != s.ID || got.Name != s.Name {
		t.Errorf("get = %+v, want %+v", got, s)
	}
	e.want(t, http.StatusOK, "PUT", "/v1/sprites/hermes-default-t1", tok, `{"labels":["hermes","profile-a"]}`, &got)
	if !slices.Equal(got.Labels, []string{"hermes", "profile-a"}) {
		t.Errorf("update labels = %q", got.Labels)
	}
	e.want(t, http.StatusOK, "PUT", "/v1/sprites/hermes-default-t1", tok, `{"url_settings":{"auth":"sprite"}}`, &got)
	if !slices.Equal(got.Labels, []string{"hermes", "profile-a"}) {
		t.Errorf("update of url_settings changed the labels to %q", got.Labels)
	}
	e.want(t, http.StatusOK, "PUT", "/v1/sprites/hermes-default-t1", tok, `{"clear_labels":true}`, &got)
	if got.Labels == nil || len(got.Labels) != 0 {
		t.Errorf("clear_labels left %#v", got.Labels)
	}

	if b := e.want(t, http.StatusNoContent, "DELETE", "/v1/sprites/hermes-default-t1", tok, "", nil); len(b) != 0 {
		t.Errorf("delete body %q, want none", b)
	}
	ae := e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/hermes-default-t1", tok, "")
	if !strings.Contains(ae.Message, "gone") && !strings.Contains(ae.Message, "not found") {
		t.Errorf("not-found message %q", ae.Message)
	}
	e.wantError(t, http.StatusNotFound, "not_found", "DELETE", "/v1/sprites/hermes-default-t1", tok, "")
}

// Bad input gets a clear error in the Sprites shape and leaves nothing.
func TestSpriteBadInput(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	for _, tt := range []struct{ name, body, code string }{
		{"no name", `{}`, "invalid_argument"},
		{"bad name", `{"name":"Bad_Name"}`, "invalid_argument"},
		{"bad JSON", `{"name":`, "invalid_argument"},
		{"environment", `{"name":"x","environment":{"A":"1"}}`, "invalid_argument"},
		{"too big a config", `{"name":"x","config":{"ram_mb":100000000}}`, "invalid_argument"},
		{"unknown URL auth", `{"name":"x","url_settings":{"auth":"anyone"}}`, "invalid_argument"},
		{"repeated label", `{"name":"x","labels":["a","a"]}`, "invalid_argument"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e.wantError(t, http.StatusBadRequest, tt.code, "POST", "/v1/sprites", tok, tt.body)
		})
	}
	e.wantError(t, http.StatusRequestEntityTooLarge, "too_large", "POST", "/v1/sprites", tok, `{"name":"x","labels":["`+strings.Repeat("a", 2<<20)+`"]}`)
	var list struct{ Sprites []sprite }
	e.want(t, http.StatusOK, "GET", "/v1/sprites", tok, "", &list)
	if len(list.Sprites) != 0 {
		t.Errorf("bad creates left %+v", list.Sprites)
	}
}

// Authentication failures, unknown routes and the control endpoint answer
// in the Sprites shape, with Sprite-Version.
func TestSpriteAuthAndRoutes(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.wantError(t, http.StatusUnauthorized, "unauthenticated", "GET", "/v1/sprites", "", "")
	e.wantError(t, http.StatusUnauthorized, "unauthenticated", "GET", "/v1/sprites/x", "hearth_wrong", "")
	e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/x/nothing-here", tok, "")
	e.create(t, tok, "box")
	e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/box/control", tok, "")
	// Another agent does not see it.
	e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/box", daemontest.TokenA2, "")
	// HEAD /exec answers the version header.
	e.want(t, http.StatusOK, "HEAD", "/v1/sprites/box/exec", tok, "", nil)
}

// A token restricted to a prefix may only touch names inside it: a create
// outside is 403, any other call 404 (as a sprite that does not exist),
// and list shows only its names.
func TestSpriteNamePrefix(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	restricted := daemontest.AgentA1
	restricted.NamePrefix = "hermes-"
	e.d.AddToken(t, "tok-hermes", "hearth_hermesonly", restricted)
	e.create(t, tok, "other")
	e.create(t, "hearth_hermesonly", "hermes-1")
	ae := e.wantError(t, http.StatusForbidden, "permission_denied", "POST", "/v1/sprites", "hearth_hermesonly", `{"name":"task-1"}`)
	if !strings.Contains(ae.Message, `"hermes-"`) {
		t.Errorf("403 message %q does not name the prefix", ae.Message)
	}
	for _, name := range []string{"other", "nothing"} {
		e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/"+name, "hearth_hermesonly", "")
		e.wantError(t, http.StatusNotFound, "not_found", "DELETE", "/v1/sprites/"+name, "hearth_hermesonly", "")
	}
	if _, err := e.d.Svc.Sandboxes.Get(t.Context(), daemontest.AgentA1, "other"); err != nil {
		t.Errorf("other after the restricted token's delete = %v, want it kept", err)
	}
	var list struct{ Sprites []sprite }
	e.want(t, http.StatusOK, "GET", "/v1/sprites", "hearth_hermesonly", "", &list)
	if len(list.Sprites) != 1 || list.Sprites[0].Name != "hermes-1" {
		t.Errorf("restricted list = %+v, want only hermes-1", list.Sprites)
	}
}

// An operator's token sees a tenant's sprite as TENANT/NAME and reaches it
// so (names are unique per tenant); a bare name is an operators' own.
func TestSpriteOperatorNames(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.d.AddToken(t, "tok-op", "hearth_operatortoken", sandbox.Principal{Tenant: sandbox.SystemTenant, Agent: "operator", Role: sandbox.RoleOperator})
	e.create(t, tok, "box")
	var list struct{ Sprites []sprite }
	e.want(t, http.StatusOK, "GET", "/v1/sprites", "hearth_operatortoken", "", &list)
	if len(list.Sprites) != 1 || list.Sprites[0].Name != "t1/agent-a1-box" {
		t.Fatalf("list as operator = %+v, want t1/agent-a1-box", list.Sprites)
	}
	var got sprite
	e.want(t, http.StatusOK, "GET", "/v1/sprites/t1%2Fagent-a1-box", "hearth_operatortoken", "", &got)
	if got.Name != "t1/agent-a1-box" || got.Organization != "t1" {
		t.Errorf("GET /v1/sprites/t1%%2Fagent-a1-box as operator = %+v", got)
	}
	e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/agent-a1-box", "hearth_operatortoken", "")
	// The tenant's own token may write its tenant too, and no other.
	e.want(t, http.StatusOK, "GET", "/v1/sprites/t1%2Fbox", tok, "", &got)
	e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/t2%2Fagent-a1-box", tok, "")
}

// List filters by prefix, pages by continuation token in name order,
// clamps max_results, and carries the counts where each SDK reads them.
func TestSpriteList(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	for _, n := range []string{"b-2", "a-1", "b-1", "b-3"} {
		e.create(t, tok, n)
	}
	type page struct {
		Sprites []sprite `json:"sprites"`
		HasMore bool     `json:"has_more"`
		Next    *string  `json:"next_continuation_token"`
		Running int      `json:"running"`
		Org     struct {
			Running      int `json:"running"`
			RunningLimit int `json:"running_limit"`
		} `json:"org"`
	}
	var names []string
	token := ""
	for i := 0; ; i++ {
		var p page
		e.want(t, http.StatusOK, "GET", "/v1/sprites?prefix=b-&max_results=2&continuation_token="+token, tok, "", &p)
		for _, s := range p.Sprites {
			names = append(names, s.Name)
		}
		if p.Running != 4 || p.Org.Running != 4 || p.Org.RunningLimit == 0 {
			t.Errorf("page %d counts: running %d, org %+v; want 4 running and the quota", i, p.Running, p.Org)
		}
		if !p.HasMore {
			if p.Next != nil {
				t.Errorf("last page has next token %q", *p.Next)
			}
			break
		}
		if p.Next == nil || i > 3 {
			t.Fatalf("page %d: has_more without a token, or no end", i)
		}
		token = *p.Next
	}
	if !slices.Equal(names, []string{"b-1", "b-2", "b-3"}) {
		t.Errorf("paged names = %q, want b-1 b-2 b-3", names)
	}
	var p page
	e.want(t, http.StatusOK, "GET", "/v1/sprites?max_results=1000", tok, "", &p)
	if len(p.Sprites) != 4 {
		t.Errorf("max_results=1000 gave %d sprites; want all 4 (clamped, not refused)", len(p.Sprites))
	}
	e.wantError(t, http.StatusBadRequest, "invalid_argument", "GET", "/v1/sprites?max_results=zero", tok, "")
}

// Policy answers with the fields the SDKs read: the quota as
// concurrent_sprite_limit_exceeded with limit and current_count.
func TestSpriteQuota(t *testing.T) {
	e := newEnv(t, daemontest.Options{AgentQuota: 1})
	e.create(t, tok, "one")
	ae := e.wantError(t, http.StatusTooManyRequests, "concurrent_sprite_limit_exceeded", "POST", "/v1/sprites", tok, `{"name":"two"}`)
	if ae.Limit == nil || *ae.Limit != 1 || ae.CurrentCount == nil || *ae.CurrentCount != 1 || ae.Code != string(sandbox.CodeQuotaExceeded) {
		t.Errorf("quota error %+v; want limit 1, current_count 1, code quota_exceeded", ae)
	}
	if want := "quota exceeded: 1 of 1 sandboxes in use for agent-a1; destroy one or wait"; ae.Message != want {
		t.Errorf("message %q; want hearth's words and next step, %q", ae.Message, want)
	}
}

// A runaway create loop trips the breaker: 429
// sprite_creation_rate_limited with the window, the retry time and
// Retry-After.
func TestSpriteBreaker(t *testing.T) {
	e := newEnv(t, daemontest.Options{AgentQuota: 1})
	for i := 0; ; i++ {
		resp, body := e.do(t, "POST", "/v1/sprites", tok, `{"name":"loop-`+strconv.Itoa(i)+`"}`)
		if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "concurrent_sprite_limit_exceeded") {
			if i > 100 {
				t.Fatalf("no breaker after %d creates", i)
			}
			continue
		}
		var ae apiError
		if err := json.Unmarshal(body, &ae); err != nil || resp.StatusCode != http.StatusTooManyRequests || ae.Error != "sprite_creation_rate_limited" {
			t.Fatalf("create %d = %d %s; want 429 sprite_creation_rate_limited", i, resp.StatusCode, body)
		}
		if ae.RetryAfterSeconds == nil || *ae.RetryAfterSeconds <= 0 || resp.Header.Get("Retry-After") != strconv.FormatInt(*ae.RetryAfterSeconds, 10) || ae.Limit == nil || ae.Code != string(sandbox.CodeCircuitOpen) {
			t.Errorf("breaker error %+v, Retry-After %q; want the retry time in both, the limit and code circuit_open", ae, resp.Header.Get("Retry-After"))
		}
		if !strings.Contains(string(body), `"window_seconds":60`) {
			t.Errorf("breaker body %s; want window_seconds 60", body)
		}
		return
	}
}

// Calls through the door are audited as door "sprites" under the native
// verbs, with the sandbox's stored name and the outcome's code.
func TestSpriteAudit(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/nope", tok, "")
	e.wantError(t, http.StatusUnauthorized, "unauthenticated", "GET", "/v1/sprites", "", "")
	if err := e.audit.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	events, err := e.d.DB.Audit().List(t.Context(), sandbox.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range events {
		got = append(got, fmt.Sprintf("%s %s %s %s %d", ev.Door, ev.Verb, ev.Sandbox, ev.Code, ev.Status))
	}
	want := []string{
		"sprites sandbox.create agent-a1-box  201",
		"sprites sandbox.get agent-a1-nope not_found 404",
		"sprites sandbox.list  unauthenticated 401",
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit log =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
