package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// errorOf checks that a response is a well-formed error body with every
// key present and the status of its code, and returns the error.
func errorOf(t *testing.T, resp *http.Response, body []byte) sandbox.Error {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var raw struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || raw.Error == nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	for _, key := range []string{"code", "message", "hint", "details"} {
		if _, ok := raw.Error[key]; !ok {
			t.Errorf("error body %s has no %q", body, key)
		}
	}
	var e struct{ Error sandbox.Error }
	json.Unmarshal(body, &e)
	if e.Error.Message == "" {
		t.Errorf("error body %s has an empty message", body)
	}
	if want := e.Error.Code.HTTPStatus(); resp.StatusCode != want && resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("status = %d for code %s, want %d", resp.StatusCode, e.Error.Code, want)
	}
	return e.Error
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, tt := range []struct{ name, header string }{
		{"no header", ""},
		{"unknown token", "Bearer hearth_nosuchtoken"},
		{"not a hearth token", "Bearer garbage"},
		{"other scheme", "Basic " + tokenA1},
		{"scheme only", "Bearer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", e.url+"/v1/sandboxes", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != "Bearer" {
				t.Fatalf("status %d, WWW-Authenticate %q; want 401 and Bearer", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			if got := errorOf(t, resp, body); got.Code != sandbox.CodeUnauthenticated {
				t.Errorf("code = %s, want unauthenticated", got.Code)
			}
		})
	}
	t.Run("lowercase scheme", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", e.url+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "bearer "+tokenA1)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d, want 200", resp.StatusCode)
		}
	})
	t.Run("health needs none", func(t *testing.T) {
		resp, body := testenv.Do(t, "GET", e.url+"/v1/health", "", "")
		if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"status":"ok","runtime":"fake"}` {
			t.Fatalf("GET /v1/health = %d %s", resp.StatusCode, body)
		}
	})
}

func TestRoutingErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		method, path string
		status       int
		code         sandbox.Code
		allow        string
	}{
		{"GET", "/nope", 404, sandbox.CodeNotFound, ""},
		{"GET", "/v1/sandboxes/x/nope", 404, sandbox.CodeNotFound, ""},
		{"GET", "/v2/sandboxes", 404, sandbox.CodeNotFound, ""},
		{"DELETE", "/v1/health", 405, sandbox.CodeInvalidArgument, "GET, HEAD"},
		{"PUT", "/v1/sandboxes", 405, sandbox.CodeInvalidArgument, "GET, HEAD, POST"},
		{"POST", "/v1/sandboxes/x/fs/stat", 405, sandbox.CodeInvalidArgument, "GET, HEAD"},
		{"GET", "/v1/sandboxes/x/exec", 426, sandbox.CodeInvalidArgument, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body := testenv.Do(t, tt.method, e.url+tt.path, tokenA1, "")
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if got := errorOf(t, resp, body); got.Code != tt.code || got.Hint == "" {
				t.Errorf("error = %+v; want code %s with a hint", got, tt.code)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestSandboxes(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp, body := testenv.Do(t, "POST", e.url+"/v1/sandboxes", tokenA1, `{"name":"box-1","size":"small"}`)
	var sb sandbox.Sandbox
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &sb) != nil || sb.Name != "agent-a1-box-1" || sb.Owner != "a1" {
		t.Fatalf("create = %d %s; want 201 and the sandbox, named with its creator", resp.StatusCode, body)
	}
	if resp, body = testenv.Do(t, "POST", e.url+"/v1/sandboxes", tokenA1, `{"name":"box-1"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("create again = %d %s; want 200 (the existing sandbox)", resp.StatusCode, body)
	}
	if resp, body = testenv.Do(t, "POST", e.url+"/v1/sandboxes", tokenA1, ``); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create with an empty body = %d %s; want 201 with a generated name", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "GET", e.url+"/v1/sandboxes", tokenA1, "")
	var list struct{ Sandboxes []sandbox.Sandbox }
	if resp.StatusCode != 200 || json.Unmarshal(body, &list) != nil || len(list.Sandboxes) != 2 {
		t.Fatalf("list = %d %s; want both sandboxes", resp.StatusCode, body)
	}
	if resp, body = testenv.Do(t, "GET", e.url+"/v1/sandboxes", tokenA2, ""); resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"sandboxes":[]}` {
		t.Fatalf("list of another agent = %d %s; want an empty list", resp.StatusCode, body)
	}
	if resp, body = testenv.Do(t, "GET", e.url+"/v1/sandboxes/box-1", tokenA1, ""); resp.StatusCode != 200 {
		t.Fatalf("get = %d %s", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "PATCH", e.url+"/v1/sandboxes/box-1", tokenA1, `{"labels":["ci","x"]}`)
	if resp.StatusCode != 200 || json.Unmarshal(body, &sb) != nil || strings.Join(sb.Labels, ",") != "ci,x" {
		t.Fatalf("update labels = %d %s; want 200 and the labels", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "PATCH", e.url+"/v1/sandboxes/box-1", tokenA1, `{"labels":["x","x"]}`)
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeInvalidArgument {
		t.Fatalf("update with a repeated label = %d %s; want invalid_argument", resp.StatusCode, body)
	}
	// Another agent's sandbox does not exist for the caller.
	resp, body = testenv.Do(t, "GET", e.url+"/v1/sandboxes/box-1", tokenA2, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound {
		t.Fatalf("get by another agent = %d %s; want not_found", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "GET", e.url+"/v1/sandboxes/Bad_Name", tokenA1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeInvalidArgument || got.Hint == "" {
		t.Fatalf("get with a bad name = %d %s; want invalid_argument with a hint", resp.StatusCode, body)
	}
	if resp, body = testenv.Do(t, "DELETE", e.url+"/v1/sandboxes/box-1", tokenA1, ""); resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("destroy = %d %q; want 204 and no body", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "DELETE", e.url+"/v1/sandboxes/box-1", tokenA1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound {
		t.Fatalf("destroy again = %d %s; want not_found", resp.StatusCode, body)
	}
}

func TestStrictDecoding(t *testing.T) {
	e := newEnv(t, envOptions{api: httpapi.Options{MaxBodyBytes: 1024}})
	tests := []struct {
		name, body string
		code       sandbox.Code
		mention    string // the message names it
	}{
		{"unknown field", `{"nmae":"x"}`, sandbox.CodeInvalidArgument, `"nmae"`},
		{"wrong type", `{"name":42}`, sandbox.CodeInvalidArgument, `"name"`},
		{"bad duration", `{"ttl":"soon"}`, sandbox.CodeInvalidArgument, "soon"},
		{"malformed", `{"name":`, sandbox.CodeInvalidArgument, "malformed"},
		{"not an object", `["x"]`, sandbox.CodeInvalidArgument, "array"},
		{"trailing data", `{"name":"x"} {"name":"y"}`, sandbox.CodeInvalidArgument, "after"},
		{"too large", `{"name":"` + strings.Repeat("x", 2000) + `"}`, sandbox.CodeTooLarge, "1024"},
		{"bad name", `{"name":"UPPER"}`, sandbox.CodeInvalidArgument, "UPPER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, "POST", e.url+"/v1/sandboxes", tokenA1, tt.body)
			got := errorOf(t, resp, body)
			if got.Code != tt.code || !strings.Contains(got.Message, tt.mention) {
				t.Fatalf("create with %s = %d %s; want %s naming %s", tt.body, resp.StatusCode, body, tt.code, tt.mention)
			}
		})
	}
	t.Run("hint lists the fields", func(t *testing.T) {
		resp, body := testenv.Do(t, "POST", e.url+"/v1/sandboxes", tokenA1, `{"nmae":"x"}`)
		if got := errorOf(t, resp, body); got.Hint != "the fields are: egress, image, labels, name, network, size, ttl" {
			t.Fatalf("hint = %q", got.Hint)
		}
	})
}
