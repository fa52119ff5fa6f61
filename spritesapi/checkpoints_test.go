package spritesapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemontest"
)

// events decodes an NDJSON stream and wants every line to carry a time.
func events(t *testing.T, body []byte) []map[string]string {
	t.Helper()
	var out []map[string]string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev map[string]string
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev["time"] == "" {
			t.Fatalf("event line %q: %v; want JSON with a time", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

// Checkpoint streams its progress and names the new id in its complete
// event; list, get and restore find it; restore brings the old file back
// and can be repeated; the gate's automatic checkpoints show only with
// includeAuto.
func TestCheckpoints(t *testing.T) {
	e := newEnv(t, daemontest.Options{})
	e.create(t, tok, "box")
	home := e.d.Home(t, daemontest.AgentA1, "box")
	file := filepath.Join(home, "state.txt")
	if err := os.WriteFile(file, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body := e.do(t, "POST", "/v1/sprites/box/checkpoint", tok, `{"comment":"before"}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("checkpoint = %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	evs := events(t, body)
	last := evs[len(evs)-1]
	id, ok := strings.CutSuffix(strings.TrimPrefix(last["data"], "Checkpoint "), " created successfully")
	if last["type"] != "complete" || !ok || id == "" {
		t.Fatalf("checkpoint events %v; want a complete event naming the id", evs)
	}

	var list []struct {
		ID         string `json:"id"`
		CreateTime string `json:"create_time"`
		Comment    string `json:"comment"`
		IsAuto     bool   `json:"is_auto"`
	}
	e.want(t, http.StatusOK, "GET", "/v1/sprites/box/checkpoints", tok, "", &list)
	if len(list) != 1 || list[0].ID != id || list[0].Comment != "before" || list[0].CreateTime == "" {
		t.Fatalf("list = %+v", list)
	}
	var one struct{ ID string }
	e.want(t, http.StatusOK, "GET", "/v1/sprites/box/checkpoints/"+id, tok, "", &one)
	if one.ID != id {
		t.Errorf("get = %+v", one)
	}
	e.wantError(t, http.StatusNotFound, "not_found", "GET", "/v1/sprites/box/checkpoints/nope", tok, "")
	e.wantError(t, http.StatusNotFound, "not_found", "POST", "/v1/sprites/box/checkpoints/nope/restore", tok, "")

	for i := range 2 {
		if err := os.WriteFile(file, []byte("v2"), 0o644); err != nil {
			t.Fatal(err)
		}
		resp, body = e.do(t, "POST", "/v1/sprites/box/checkpoints/"+id+"/restore", tok, "")
		evs = events(t, body)
		if resp.StatusCode != http.StatusOK || evs[len(evs)-1]["type"] != "complete" {
			t.Fatalf("restore %d = %d %v", i, resp.StatusCode, evs)
		}
		home = e.d.Home(t, daemontest.AgentA1, "box")
		if b, err := os.ReadFile(filepath.Join(home, "state.txt")); err != nil || string(b) != "v1" {
			t.Errorf("after restore %d: %q %v; want v1", i, b, err)
		}
	}

	if _, err := e.d.Svc.Checkpoints.Checkpoint(t.Context(), daemontest.AgentA1, "box", sandbox.CheckpointRequest{Label: sandbox.AutoLabel}); err != nil {
		t.Fatal(err)
	}
	e.want(t, http.StatusOK, "GET", "/v1/sprites/box/checkpoints", tok, "", &list)
	if len(list) != 1 {
		t.Errorf("list without includeAuto has %d checkpoints, want 1", len(list))
	}
	e.want(t, http.StatusOK, "GET", "/v1/sprites/box/checkpoints?includeAuto=true", tok, "", &list)
	if len(list) != 2 || !list[1].IsAuto {
		t.Errorf("list with includeAuto = %+v; want the automatic one too", list)
	}
	e.wantError(t, http.StatusBadRequest, "invalid_argument", "POST", "/v1/sprites/box/checkpoint", tok, `{"comment":"`+strings.Repeat("x", 300)+`"}`)
	e.wantError(t, http.StatusNotFound, "not_found", "POST", "/v1/sprites/nope/checkpoint", tok, `{}`)
}
