package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestBindings drives /v1/bindings raw and through the client: set (the
// stored binding back, defaults filled in), list, delete, the role rules,
// the body's errors, and the audit verbs.
func TestBindings(t *testing.T) {
	e := auditEnv(t, nil)
	ctx := t.Context()
	// The secrets the bindings name, as a daemon with a key stored them:
	// a binding needs its secret to exist, never its value.
	for _, tenant := range []string{"t1", "t2"} {
		if err := e.db.Secrets().Put(ctx, tenant, "API_KEY", []byte("sealed"), time.Now()); err != nil {
			t.Fatal(err)
		}
	}

	resp, body := testenv.Do(t, "PUT", e.url+"/v1/bindings/openai", tokenAdminT1, `{"secret":"API_KEY","upstream":"https://API.openai.com/v1"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/bindings/openai = %d %s, want 200", resp.StatusCode, body)
	}
	var keys map[string]any
	if err := json.Unmarshal(body, &keys); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"tenant": "t1", "name": "openai", "secret": "API_KEY",
		"upstream": "https://api.openai.com/v1", "header": "Authorization", "format": "Bearer {secret}"} {
		if keys[k] != want {
			t.Errorf("PUT answered %s = %v, want %v (body %s)", k, keys[k], want, body)
		}
	}
	if _, ok := keys["created_at"]; !ok {
		t.Errorf("PUT answered %s, without created_at", body)
	}

	for _, tt := range []struct {
		name, path, token, body string
		code                    sandbox.Code
	}{
		{"as an agent", "/v1/bindings/openai", tokenA1, `{"secret":"API_KEY","upstream":"https://x"}`, sandbox.CodePermissionDenied},
		{"in another tenant", "/v1/bindings/openai?tenant=t2", tokenAdminT1, `{"secret":"API_KEY","upstream":"https://x"}`, sandbox.CodeNotFound},
		{"missing secret field", "/v1/bindings/x", tokenAdminT1, `{"upstream":"https://x"}`, sandbox.CodeInvalidArgument},
		{"missing upstream field", "/v1/bindings/x", tokenAdminT1, `{"secret":"API_KEY"}`, sandbox.CodeInvalidArgument},
		{"unknown field", "/v1/bindings/x", tokenAdminT1, `{"secret":"API_KEY","upstream":"https://x","value":"sk"}`, sandbox.CodeInvalidArgument},
		{"bad name", "/v1/bindings/Bad_Name", tokenAdminT1, `{"secret":"API_KEY","upstream":"https://x"}`, sandbox.CodeInvalidArgument},
		{"bad header", "/v1/bindings/x", tokenAdminT1, `{"secret":"API_KEY","upstream":"https://x","header":"Host"}`, sandbox.CodeInvalidArgument},
		{"no such secret", "/v1/bindings/x", tokenAdminT1, `{"secret":"NOPE","upstream":"https://x"}`, sandbox.CodeNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, "PUT", e.url+tt.path, tt.token, tt.body)
			if got := errorOf(t, resp, body); got.Code != tt.code {
				t.Errorf("PUT %s %s = %s %q, want %s", tt.path, tt.body, got.Code, got.Message, tt.code)
			}
		})
	}
	if resp, body := testenv.Do(t, "PUT", e.url+"/v1/bindings/x", tokenAdminT1, `{"upstream":"https://x"}`); !strings.Contains(errorOf(t, resp, body).Message, `missing field "secret"`) {
		t.Errorf("PUT without secret = %s, want it named missing", body)
	}

	// An agent lists its tenant's; another tenant's does not exist for it.
	agent := e.client()
	list, err := agent.Admin().ListBindings(ctx, "")
	if err != nil || len(list) != 1 || list[0].Name != "openai" || list[0].Upstream != "https://api.openai.com/v1" {
		t.Errorf("ListBindings as a1 = %+v, %v; want openai", list, err)
	}
	if _, err := agent.Admin().ListBindings(ctx, "t2"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("ListBindings(t2) as a1 = %v, want not_found", err)
	}
	if err := agent.Admin().DeleteBinding(ctx, "", "openai"); !sandbox.IsCode(err, sandbox.CodePermissionDenied) {
		t.Errorf("DeleteBinding as a1 = %v, want permission_denied", err)
	}

	// An operator manages any tenant's with ?tenant=.
	ops := client.New(e.url, tokenOperator, nil)
	b, err := ops.Admin().SetBinding(ctx, "t2", sandbox.Binding{Name: "gh", Secret: "API_KEY", Upstream: "https://api.github.com", Header: "x-api-key", Format: "token {secret}"})
	if err != nil || b.Tenant != "t2" || b.Header != "X-Api-Key" || b.Format != "token {secret}" {
		t.Errorf("SetBinding(t2) as the operator = %+v, %v", b, err)
	}
	if list, err := ops.Admin().ListBindings(ctx, "t2"); err != nil || len(list) != 1 || list[0].Name != "gh" {
		t.Errorf("ListBindings(t2) as the operator = %+v, %v; want gh", list, err)
	}

	if resp, body := testenv.Do(t, "DELETE", e.url+"/v1/bindings/openai", tokenAdminT1, ""); resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Errorf("DELETE /v1/bindings/openai = %d %s, want 204 and no body", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "DELETE", e.url+"/v1/bindings/openai", tokenAdminT1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound || !strings.Contains(got.Hint, "hearth binding list") {
		t.Errorf("DELETE twice = %+v, want not_found with a hint", got)
	}
	if list, err := agent.Admin().ListBindings(ctx, ""); err != nil || list == nil || len(list) != 0 {
		t.Errorf("ListBindings after the delete = %#v, %v; want an empty list", list, err)
	}

	var verbs []string
	eventually(t, "the binding calls audited", func() bool {
		verbs = verbs[:0]
		for _, ev := range stored(t, e) {
			if strings.HasPrefix(ev.Verb, "binding.") && !slices.Contains(verbs, ev.Verb) {
				verbs = append(verbs, ev.Verb)
			}
		}
		return len(verbs) == 3
	})
	slices.Sort(verbs)
	if want := []string{"binding.delete", "binding.list", "binding.set"}; !slices.Equal(verbs, want) {
		t.Errorf("audited verbs %q, want %q", verbs, want)
	}
}
