package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestBinding runs `hearth binding` against a daemon that keeps one
// binding: what each op sends, its table, its JSON, and its errors.
func TestBinding(t *testing.T) {
	at := time.Date(2026, time.January, 2, 15, 4, 5, 0, time.UTC)
	stored := sandbox.Binding{Tenant: "acme", Name: "openai", Secret: "OPENAI_API_KEY", Upstream: "https://api.openai.com/v1",
		Header: "Authorization", Format: "Bearer {secret}", CreatedAt: at, UpdatedAt: at}
	type request struct {
		method, path, query string
		body                map[string]any
	}
	var (
		mu   sync.Mutex
		last request
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer hearth_test" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		req := request{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			json.Unmarshal(b, &req.body)
		}
		mu.Lock()
		last = req
		mu.Unlock()
		switch {
		case r.Method == "PUT" && r.URL.Path == "/v1/bindings/openai":
			writeFakeJSON(w, http.StatusOK, stored)
		case r.Method == "GET" && r.URL.Path == "/v1/bindings":
			writeFakeJSON(w, http.StatusOK, map[string]any{"bindings": []sandbox.Binding{stored}})
		case r.Method == "DELETE" && r.URL.Path == "/v1/bindings/openai":
			w.WriteHeader(http.StatusNoContent)
		default:
			writeFakeError(w, sandbox.Errorf(sandbox.CodeNotFound, "no binding %q in tenant %q", strings.TrimPrefix(r.URL.Path, "/v1/bindings/"), "acme").
				WithHint("`hearth binding list` shows the tenant's bindings"))
		}
	}))
	defer srv.Close()
	env := map[string]string{"HEARTH_URL": srv.URL, "HEARTH_TOKEN": "hearth_test"}
	hearth := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"binding"}, args...), func(k string) string { return env[k] }, nil, &out, &errb)
		return out.String(), errb.String(), code
	}
	sent := func() request {
		mu.Lock()
		defer mu.Unlock()
		return last
	}

	out, errOut, code := hearth("set", "openai", "--secret", "OPENAI_API_KEY", "--upstream", "https://api.openai.com/v1", "--tenant", "acme")
	if code != 0 || !strings.Contains(out, "http://openai.hearth.internal/") || !strings.Contains(out, "https://api.openai.com/v1") {
		t.Errorf("hearth binding set = %d %q %q; want the URL in the sandbox and the upstream", code, out, errOut)
	}
	req := sent()
	if req.method != "PUT" || req.path != "/v1/bindings/openai" || req.query != "tenant=acme" ||
		len(req.body) != 2 || req.body["secret"] != "OPENAI_API_KEY" || req.body["upstream"] != "https://api.openai.com/v1" {
		t.Errorf("hearth binding set sent %+v, want PUT /v1/bindings/openai?tenant=acme with secret and upstream", req)
	}
	if _, errOut, code := hearth("set", "openai", "--secret", "K", "--upstream", "https://x", "--header", "X-Api-Key", "--format", "{secret}"); code != 0 {
		t.Fatalf("hearth binding set --header --format = %d %s", code, errOut)
	}
	if req := sent(); req.query != "" || req.body["header"] != "X-Api-Key" || req.body["format"] != "{secret}" {
		t.Errorf("hearth binding set --header --format sent %+v", req)
	}
	out, _, code = hearth("set", "openai", "--secret", "K", "--upstream", "https://x", "--json")
	var b sandbox.Binding
	if err := json.Unmarshal([]byte(out), &b); code != 0 || err != nil || b != stored {
		t.Errorf("hearth binding set --json = %d %q (%v); want the binding", code, out, err)
	}

	out, errOut, code = hearth("list")
	if code != 0 {
		t.Fatalf("hearth binding list = %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"NAME", "SECRET", "UPSTREAM", "HEADER", "URL", "IN", "SANDBOX"},
		{"openai", "OPENAI_API_KEY", "https://api.openai.com/v1", "Authorization", "http://openai.hearth.internal"},
	}
	if len(lines) != len(want) {
		t.Fatalf("hearth binding list printed\n%s\nwant %d lines", out, len(want))
	}
	for i, line := range lines {
		if got := strings.Fields(line); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d = %q, want the columns %q", i, line, want[i])
		}
	}
	if req := sent(); req.method != "GET" || req.path != "/v1/bindings" || req.query != "" {
		t.Errorf("hearth binding list sent %+v", req)
	}
	out, _, code = hearth("list", "--json", "--tenant", "acme")
	var list struct{ Bindings []sandbox.Binding }
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Bindings) != 1 || list.Bindings[0] != stored {
		t.Errorf("hearth binding list --json = %d %q (%v)", code, out, err)
	}
	if req := sent(); req.query != "tenant=acme" {
		t.Errorf("hearth binding list --tenant acme sent the query %q", req.query)
	}

	out, _, code = hearth("rm", "openai", "--tenant", "acme")
	if code != 0 || out != "binding openai deleted\n" {
		t.Errorf("hearth binding rm = %d %q", code, out)
	}
	if req := sent(); req.method != "DELETE" || req.path != "/v1/bindings/openai" || req.query != "tenant=acme" {
		t.Errorf("hearth binding rm sent %+v", req)
	}
	_, errOut, code = hearth("rm", "nosuch")
	if code != sandbox.CodeNotFound.ExitCode() || !strings.Contains(errOut, `error: no binding "nosuch"`) || !strings.Contains(errOut, "hint: ") {
		t.Errorf("hearth binding rm nosuch = %d %q; want not_found's exit code, the error and its hint", code, errOut)
	}

	for _, args := range [][]string{
		{}, {"frob"}, {"set"}, {"set", "openai"}, {"set", "openai", "--upstream", "https://x"},
		{"set", "openai", "--secret", "K"}, {"set", "a", "b", "--secret", "K", "--upstream", "https://x"},
		{"list", "extra"}, {"rm"}, {"rm", "a", "b"},
	} {
		if _, errOut, code := hearth(args...); code != exitUsage || !strings.Contains(errOut, "error: ") {
			t.Errorf("hearth binding %q = %d %q, want a usage error", args, code, errOut)
		}
	}
	out, _, code = hearth("-h")
	for _, want := range []string{"Usage: hearth binding", "http://NAME.hearth.internal/", "egress", "set", "list", "rm"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("hearth binding -h = %d %q, want it to say %q", code, out, want)
		}
	}
}
