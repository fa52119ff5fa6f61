package client_test

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// TestBindings: what SetBinding, ListBindings and DeleteBinding send, and
// what they make of the answers.
func TestBindings(t *testing.T) {
	var (
		mu   sync.Mutex
		body map[string]any
	)
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			body = nil
			json.Unmarshal(b, &body)
			mu.Unlock()
			writeJSON(w, http.StatusOK, sandbox.Binding{Tenant: "acme", Name: "openai", Secret: "K", Upstream: "https://x", Header: "Authorization", Format: "Bearer {secret}"})
		case http.MethodGet:
			writeJSON(w, http.StatusOK, map[string]any{"bindings": []sandbox.Binding{{Tenant: "acme", Name: "openai"}, {Tenant: "acme", Name: "zed"}}})
		case http.MethodDelete:
			writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": "not_found", "message": `no binding "gone" in tenant "acme"`}})
		}
	})
	c := client.New(d.URL, "hearth_x", nil)
	ctx := ctxT(t)

	b, err := c.Admin().SetBinding(ctx, "acme", sandbox.Binding{Tenant: "ignored", Name: "openai", Secret: "K", Upstream: "https://x"})
	if err != nil || b.Header != "Authorization" || b.Tenant != "acme" {
		t.Errorf("SetBinding = %+v, %v; want the daemon's answer", b, err)
	}
	req := d.last(t)
	if req.Method != "PUT" || req.RawPath != "/v1/bindings/openai" || req.Query != "tenant=acme" {
		t.Errorf("SetBinding sent %+v, want PUT /v1/bindings/openai?tenant=acme", req)
	}
	mu.Lock()
	if len(body) != 2 || body["secret"] != "K" || body["upstream"] != "https://x" {
		t.Errorf("SetBinding sent the body %v, want secret and upstream alone (no tenant, no empty header or format)", body)
	}
	mu.Unlock()
	if _, err := c.Admin().SetBinding(ctx, "", sandbox.Binding{Name: "openai", Secret: "K", Upstream: "https://x", Header: "X-Key", Format: "{secret}"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if req := d.last(t); req.Query != "" || body["header"] != "X-Key" || body["format"] != "{secret}" {
		t.Errorf("SetBinding(own tenant, header, format) sent %+v with %v", req, body)
	}
	mu.Unlock()

	list, err := c.Admin().ListBindings(ctx, "")
	if err != nil || len(list) != 2 || list[1].Name != "zed" {
		t.Errorf("ListBindings = %+v, %v", list, err)
	}
	if req := d.last(t); req.Method != "GET" || req.RawPath != "/v1/bindings" || req.Query != "" {
		t.Errorf("ListBindings sent %+v, want GET /v1/bindings", req)
	}

	err = c.Admin().DeleteBinding(ctx, "acme", "gone")
	if !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("DeleteBinding(gone) = %v, want not_found", err)
	}
	if req := d.last(t); req.Method != "DELETE" || req.RawPath != "/v1/bindings/gone" || req.Query != "tenant=acme" {
		t.Errorf("DeleteBinding sent %+v, want DELETE /v1/bindings/gone?tenant=acme", req)
	}
}
