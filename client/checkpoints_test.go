package client_test

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// TestCheckpointRequests checks what each checkpoint, sleep and wake call
// sends, body included, and how it reads the answer.
func TestCheckpointRequests(t *testing.T) {
	cp := sandbox.Checkpoint{ID: "c1", SandboxID: "x1", Sandbox: "s1", Label: "before", Parent: "c0",
		CreatedAt: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), SizeBytes: 4096}
	sb := sandbox.Sandbox{ID: "x1", Name: "s1", Status: sandbox.StatusRunning, Head: "c1"}
	var (
		status int
		answer any
		body   string
	)
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		if answer == nil {
			w.WriteHeader(status)
			return
		}
		writeJSON(w, status, answer)
	})
	c := client.New(d.URL, "tok", nil)
	ctx := ctxT(t)
	tests := []struct {
		name     string
		status   int
		answer   any
		call     func() (any, error)
		want     recorded
		wantBody string
		result   any
	}{
		{"checkpoint", 201, cp,
			func() (any, error) { return c.Checkpoint(ctx, "s1", sandbox.CheckpointRequest{Label: "before"}) },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/checkpoints"}, `{"label":"before"}`, cp},
		{"checkpoint without a label", 201, cp,
			func() (any, error) { return c.Checkpoint(ctx, "s1", sandbox.CheckpointRequest{Label: ""}) },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/checkpoints"}, `{}`, cp},
		{"list checkpoints", 200, map[string]any{"checkpoints": []sandbox.Checkpoint{cp, cp}},
			func() (any, error) { return c.ListCheckpoints(ctx, "s1") },
			recorded{Method: "GET", RawPath: "/v1/sandboxes/s1/checkpoints"}, ``, []sandbox.Checkpoint{cp, cp}},
		{"delete checkpoint escapes the id", 204, nil,
			func() (any, error) { return nil, c.DeleteCheckpoint(ctx, "s1", "c 1/x") },
			recorded{Method: "DELETE", RawPath: "/v1/sandboxes/s1/checkpoints/c%201%2Fx"}, ``, nil},
		{"restore", 200, sb,
			func() (any, error) { return c.Restore(ctx, "s1", "c1") },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/restore"}, `{"checkpoint":"c1"}`, sb},
		{"fork", 201, sb,
			func() (any, error) { return c.Fork(ctx, "s1", "c1", "s2") },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/fork"}, `{"checkpoint":"c1","name":"s2"}`, sb},
		{"sleep", 200, sb,
			func() (any, error) { return c.Sleep(ctx, "s1") },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/sleep"}, ``, sb},
		{"wake", 200, sb,
			func() (any, error) { return c.Wake(ctx, "s1") },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/wake"}, ``, sb},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, answer = tt.status, tt.answer
			got, err := tt.call()
			if err != nil {
				t.Fatalf("call = %v", err)
			}
			if tt.result != nil && !jsonEqual(got, tt.result) {
				t.Errorf("result = %+v, want %+v", got, tt.result)
			}
			seen := d.last(t)
			tt.want.Auth, tt.want.UA = "Bearer tok", "hearth-go-client"
			if seen != tt.want {
				t.Errorf("request = %+v\nwant      %+v", seen, tt.want)
			}
			if body != tt.wantBody {
				t.Errorf("body = %s, want %s", body, tt.wantBody)
			}
		})
	}
}

func TestCheckpointErrors(t *testing.T) {
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, map[string]any{"error": map[string]any{
			"code": "not_found", "message": `sandbox "s1" has no checkpoint "c9"`,
			"hint": "`hearth checkpoints s1` lists its checkpoints", "details": map[string]any{}}})
	})
	c := client.New(d.URL, "tok", nil)
	ctx := ctxT(t)
	calls := map[string]func() error{
		"Restore":          func() error { _, err := c.Restore(ctx, "s1", "c9"); return err },
		"Fork":             func() error { _, err := c.Fork(ctx, "s1", "c9", "s2"); return err },
		"DeleteCheckpoint": func() error { return c.DeleteCheckpoint(ctx, "s1", "c9") },
	}
	for name, call := range calls {
		var e *sandbox.Error
		if err := call(); !errors.As(err, &e) || e.Code != sandbox.CodeNotFound || e.Hint == "" {
			t.Errorf("%s of a missing checkpoint = %v; want not_found with its hint", name, err)
		}
	}
}

func TestCheckpointIDsThatCannotBeASegment(t *testing.T) {
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("request sent: %s", r.URL) })
	c := client.New(d.URL, "tok", nil)
	for _, id := range []string{"", ".", ".."} {
		if err := c.DeleteCheckpoint(ctxT(t), "s1", id); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("DeleteCheckpoint(s1, %q) = %v; want invalid_argument", id, err)
		}
	}
	for _, name := range []string{"", ".."} {
		if _, err := c.Sleep(ctxT(t), name); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("Sleep(%q) = %v; want invalid_argument", name, err)
		}
	}
}
