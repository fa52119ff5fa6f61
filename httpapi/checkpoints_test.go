package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestCheckpoints walks one sandbox through checkpoint, list, restore,
// fork, sleep, wake and delete over raw HTTP, checking each status and
// body, and the files each step leaves.
func TestCheckpoints(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "box")
	url := e.url + "/v1/sandboxes/box"
	e.write(t, "box", "notes.txt", "v1")

	resp, body := testenv.Do(t, "POST", url+"/checkpoints", tokenA1, `{"label":"before migration"}`)
	var c1 sandbox.Checkpoint
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &c1) != nil || c1.ID == "" ||
		c1.Sandbox != "agent-a1-box" || c1.Label != "before migration" || c1.Parent != "" || c1.CreatedAt.IsZero() {
		t.Fatalf("checkpoint = %d %s; want 201 and a labelled checkpoint without a parent", resp.StatusCode, body)
	}
	e.write(t, "box", "notes.txt", "v2")
	// An empty body is a checkpoint without a label; its parent is the head.
	resp, body = testenv.Do(t, "POST", url+"/checkpoints", tokenA1, ``)
	var c2 sandbox.Checkpoint
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &c2) != nil || c2.Label != "" || c2.Parent != c1.ID {
		t.Fatalf("checkpoint with an empty body = %d %s; want 201 and parent %s", resp.StatusCode, body, c1.ID)
	}
	if sb := e.get(t, "box"); sb.Head != c2.ID {
		t.Fatalf("head after two checkpoints = %q, want %q", sb.Head, c2.ID)
	}

	resp, body = testenv.Do(t, "GET", url+"/checkpoints", tokenA1, "")
	var list struct{ Checkpoints []sandbox.Checkpoint }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil ||
		len(list.Checkpoints) != 2 || list.Checkpoints[0].ID != c1.ID || list.Checkpoints[1].ID != c2.ID {
		t.Fatalf("list = %d %s; want 200 and both checkpoints, oldest first", resp.StatusCode, body)
	}

	e.write(t, "box", "notes.txt", "v3")
	resp, body = testenv.Do(t, "POST", url+"/restore", tokenA1, `{"checkpoint":"`+c1.ID+`"}`)
	var sb sandbox.Sandbox
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &sb) != nil || sb.Name != "agent-a1-box" ||
		sb.Status != sandbox.StatusRunning || sb.Head != c1.ID {
		t.Fatalf("restore = %d %s; want 200 and the running sandbox with head %s", resp.StatusCode, body, c1.ID)
	}
	if got := e.read(t, "box", "notes.txt"); got != "v1" {
		t.Fatalf("notes.txt after restore = %q, want v1", got)
	}

	resp, body = testenv.Do(t, "POST", url+"/fork", tokenA1, `{"checkpoint":"`+c2.ID+`","name":"box-2"}`)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &sb) != nil || sb.Name != "agent-a1-box-2" ||
		sb.Owner != "a1" || sb.Status != sandbox.StatusRunning {
		t.Fatalf("fork = %d %s; want 201 and the new running sandbox", resp.StatusCode, body)
	}
	if got := e.read(t, "box-2", "notes.txt"); got != "v2" {
		t.Fatalf("notes.txt in the fork = %q, want v2", got)
	}
	if got := e.read(t, "box", "notes.txt"); got != "v1" {
		t.Fatalf("notes.txt in the original after the fork = %q, want v1", got)
	}
	resp, body = testenv.Do(t, "POST", url+"/fork", tokenA1, `{"checkpoint":"`+c2.ID+`","name":"box-2"}`)
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeAlreadyExists || got.Hint == "" {
		t.Fatalf("fork into a taken name = %d %s; want already_exists with a hint", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "POST", url+"/fork", tokenA1, `{"checkpoint":"`+c2.ID+`","name":"Bad_Name"}`)
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeInvalidArgument || got.Hint == "" {
		t.Fatalf("fork into a bad name = %d %s; want invalid_argument with a hint", resp.StatusCode, body)
	}

	for _, step := range []struct {
		path string
		want sandbox.Status
	}{
		{"/sleep", sandbox.StatusSleeping},
		{"/sleep", sandbox.StatusSleeping}, // a no-op
		{"/wake", sandbox.StatusRunning},
		{"/wake", sandbox.StatusRunning}, // a no-op
	} {
		resp, body = testenv.Do(t, "POST", url+step.path, tokenA1, "")
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &sb) != nil || sb.Status != step.want {
			t.Fatalf("POST %s = %d %s; want 200 and status %s", step.path, resp.StatusCode, body, step.want)
		}
		if got := e.get(t, "box").Status; got != step.want {
			t.Fatalf("status after POST %s = %s, want %s", step.path, got, step.want)
		}
	}
	if got := e.read(t, "box", "notes.txt"); got != "v1" {
		t.Fatalf("notes.txt after sleep and wake = %q, want v1", got)
	}

	if resp, body = testenv.Do(t, "DELETE", url+"/checkpoints/"+c2.ID, tokenA1, ""); resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("delete = %d %q; want 204 and no body", resp.StatusCode, body)
	}
	resp, body = testenv.Do(t, "GET", url+"/checkpoints", tokenA1, "")
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Checkpoints) != 1 || list.Checkpoints[0].ID != c1.ID {
		t.Fatalf("list after delete = %d %s; want only %s", resp.StatusCode, body, c1.ID)
	}
	// The fork does not depend on the checkpoint it came from.
	if got := e.read(t, "box-2", "notes.txt"); got != "v2" {
		t.Fatalf("notes.txt in the fork after its checkpoint went = %q, want v2", got)
	}
	resp, body = testenv.Do(t, "DELETE", url+"/checkpoints/"+c2.ID, tokenA1, "")
	if got := errorOf(t, resp, body); got.Code != sandbox.CodeNotFound || got.Hint == "" {
		t.Fatalf("delete again = %d %s; want not_found with a hint", resp.StatusCode, body)
	}

	// A fresh sandbox's list is [], not null.
	e.create(t, "empty")
	resp, body = testenv.Do(t, "GET", e.url+"/v1/sandboxes/empty/checkpoints", tokenA1, "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"checkpoints":[]}` {
		t.Fatalf("list of a sandbox without checkpoints = %d %s", resp.StatusCode, body)
	}
}

// TestCheckpointNotFound checks that a checkpoint or sandbox that is not
// there, or not the caller's, is 404 not_found with a hint on every route.
func TestCheckpointNotFound(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "box")
	url := e.url + "/v1/sandboxes/box"
	resp, body := testenv.Do(t, "POST", url+"/checkpoints", tokenA1, "")
	var c sandbox.Checkpoint
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &c) != nil {
		t.Fatalf("checkpoint = %d %s", resp.StatusCode, body)
	}
	tests := []struct {
		name, token, method, path, body string
		mention                         string // the message names it (as resolved for the caller)
	}{
		{"restore a missing checkpoint", tokenA1, "POST", "/v1/sandboxes/box/restore", `{"checkpoint":"cnope"}`, `"cnope"`},
		{"fork a missing checkpoint", tokenA1, "POST", "/v1/sandboxes/box/fork", `{"checkpoint":"cnope","name":"box-2"}`, `"cnope"`},
		{"delete a missing checkpoint", tokenA1, "DELETE", "/v1/sandboxes/box/checkpoints/cnope", ``, `"cnope"`},
		{"checkpoint a missing sandbox", tokenA1, "POST", "/v1/sandboxes/nope/checkpoints", ``, `"agent-a1-nope"`},
		{"list a missing sandbox", tokenA1, "GET", "/v1/sandboxes/nope/checkpoints", ``, `"agent-a1-nope"`},
		{"sleep a missing sandbox", tokenA1, "POST", "/v1/sandboxes/nope/sleep", ``, `"agent-a1-nope"`},
		{"wake a missing sandbox", tokenA1, "POST", "/v1/sandboxes/nope/wake", ``, `"agent-a1-nope"`},
		{"another agent's checkpoint", tokenA2, "DELETE", "/v1/sandboxes/box/checkpoints/" + c.ID, ``, `"agent-a2-box"`},
		{"another agent's list", tokenA2, "GET", "/v1/sandboxes/box/checkpoints", ``, `"agent-a2-box"`},
		{"another agent's restore", tokenA2, "POST", "/v1/sandboxes/box/restore", `{"checkpoint":"` + c.ID + `"}`, `"agent-a2-box"`},
		{"another agent's fork", tokenA2, "POST", "/v1/sandboxes/box/fork", `{"checkpoint":"` + c.ID + `","name":"mine"}`, `"agent-a2-box"`},
		{"another agent's sleep", tokenA2, "POST", "/v1/sandboxes/box/sleep", ``, `"agent-a2-box"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, tt.method, e.url+tt.path, tt.token, tt.body)
			got := errorOf(t, resp, body)
			if resp.StatusCode != http.StatusNotFound || got.Code != sandbox.CodeNotFound || got.Hint == "" || !strings.Contains(got.Message, tt.mention) {
				t.Fatalf("%s %s = %d %s; want 404 not_found naming %s, with a hint", tt.method, tt.path, resp.StatusCode, body, tt.mention)
			}
		})
	}
	if sb := e.get(t, "box"); sb.Status != sandbox.StatusRunning {
		t.Errorf("status after another agent's sleep = %s, want running", sb.Status)
	}
}

func TestCheckpointBadRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.create(t, "box")
	tests := []struct {
		name, path, body string
		code             sandbox.Code
		mention          string // the message names it
		hint             string // the hint contains it
	}{
		{"checkpoint: unknown field", "checkpoints", `{"lable":"x"}`, sandbox.CodeInvalidArgument, `"lable"`, "the fields are: label"},
		{"checkpoint: wrong type", "checkpoints", `{"label":7}`, sandbox.CodeInvalidArgument, `"label"`, "string"},
		{"checkpoint: malformed", "checkpoints", `{"label":`, sandbox.CodeInvalidArgument, "malformed", "JSON object"},
		{"checkpoint: not an object", "checkpoints", `"x"`, sandbox.CodeInvalidArgument, "string", "JSON object"},
		{"checkpoint: trailing data", "checkpoints", `{} {}`, sandbox.CodeInvalidArgument, "after", "exactly one"},
		{"checkpoint: control character", "checkpoints", `{"label":"a\u0007b"}`, sandbox.CodeInvalidArgument, "control character", "printable"},
		{"checkpoint: label too long", "checkpoints", `{"label":"` + strings.Repeat("x", sandbox.MaxLabelLen+1) + `"}`, sandbox.CodeInvalidArgument, "longer than", ""},
		{"restore: empty body", "restore", ``, sandbox.CodeInvalidArgument, `"checkpoint"`, `{"checkpoint":"<id>"}`},
		{"restore: no checkpoint", "restore", `{}`, sandbox.CodeInvalidArgument, `"checkpoint"`, `{"checkpoint":"<id>"}`},
		{"restore: empty checkpoint", "restore", `{"checkpoint":""}`, sandbox.CodeInvalidArgument, `"checkpoint"`, `{"checkpoint":"<id>"}`},
		{"restore: wrong type", "restore", `{"checkpoint":1}`, sandbox.CodeInvalidArgument, `"checkpoint"`, "string"},
		{"restore: unknown field", "restore", `{"id":"c1"}`, sandbox.CodeInvalidArgument, `"id"`, "the fields are: checkpoint"},
		{"fork: empty body", "fork", ``, sandbox.CodeInvalidArgument, `"checkpoint"`, `"name":"<new sandbox name>"`},
		{"fork: no name", "fork", `{"checkpoint":"c1"}`, sandbox.CodeInvalidArgument, `"name"`, `"name":"<new sandbox name>"`},
		{"fork: no checkpoint", "fork", `{"name":"box-2"}`, sandbox.CodeInvalidArgument, `"checkpoint"`, `{"checkpoint":"<id>"`},
		{"fork: unknown field", "fork", `{"checkpoint":"c1","new_name":"x"}`, sandbox.CodeInvalidArgument, `"new_name"`, "the fields are: checkpoint, name"},
		{"fork: too large", "fork", `{"name":"` + strings.Repeat("x", 2<<20) + `"}`, sandbox.CodeTooLarge, "1048576", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := testenv.Do(t, "POST", e.url+"/v1/sandboxes/box/"+tt.path, tokenA1, tt.body)
			got := errorOf(t, resp, body)
			if got.Code != tt.code || !strings.Contains(got.Message, tt.mention) || !strings.Contains(got.Hint, tt.hint) {
				t.Fatalf("POST .../%s with %.80s = %d %s; want %s naming %s, hint with %s", tt.path, tt.body, resp.StatusCode, body, tt.code, tt.mention, tt.hint)
			}
			if tt.code == sandbox.CodeInvalidArgument && resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", resp.StatusCode)
			}
		})
	}
	// Nothing was taken, restored or forked.
	resp, body := testenv.Do(t, "GET", e.url+"/v1/sandboxes/box/checkpoints", tokenA1, "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"checkpoints":[]}` {
		t.Fatalf("list after bad requests = %d %s; want none", resp.StatusCode, body)
	}
}

func TestCheckpointRoutingErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		method, path, allow string
	}{
		{"GET", "/v1/sandboxes/x/restore", "POST"},
		{"GET", "/v1/sandboxes/x/fork", "POST"},
		{"GET", "/v1/sandboxes/x/sleep", "POST"},
		{"DELETE", "/v1/sandboxes/x/wake", "POST"},
		{"PUT", "/v1/sandboxes/x/checkpoints", "GET, HEAD, POST"},
		{"GET", "/v1/sandboxes/x/checkpoints/c1", "DELETE"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body := testenv.Do(t, tt.method, e.url+tt.path, tokenA1, "")
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tt.allow {
				t.Fatalf("status %d, Allow %q (%s); want 405 and %q", resp.StatusCode, resp.Header.Get("Allow"), body, tt.allow)
			}
			errorOf(t, resp, body)
		})
	}
}

// write writes content to path in sandbox name.
func (e *env) write(t *testing.T, name, path, content string) {
	t.Helper()
	if _, err := e.client().WriteFile(t.Context(), name, sandbox.WriteRequest{Path: path}, strings.NewReader(content)); err != nil {
		t.Fatalf("WriteFile(%s, %s) = %v", name, path, err)
	}
}

// read returns the content of path in sandbox name.
func (e *env) read(t *testing.T, name, path string) string {
	t.Helper()
	var b bytes.Buffer
	if err := e.client().ReadFile(t.Context(), name, path, &b); err != nil {
		t.Fatalf("ReadFile(%s, %s) = %v", name, path, err)
	}
	return b.String()
}

// get returns sandbox name as agent a1 sees it.
func (e *env) get(t *testing.T, name string) sandbox.Sandbox {
	t.Helper()
	sb, err := e.client().Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get(%s) = %v", name, err)
	}
	return sb
}
