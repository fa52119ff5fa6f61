package spritesapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/spritesapi"
	"github.com/hearth/hearth/testutil/daemontest"
	"github.com/hearth/hearth/testutil/testenv"
)

// env is the Sprites door, mounted on the API, over a daemon in miniature
// (testutil/daemontest).
type env struct {
	url string
	d   *daemontest.Env
	// audit records every call into d's store.
	audit *audit.Recorder
}

// keepalive is the door's keepalive in the tests.
const keepalive = 200 * time.Millisecond

func newEnv(t *testing.T, o daemontest.Options) *env {
	t.Helper()
	return newEnvWith(t, o, door.Options{}, nil)
}

// newEnvWith is newEnv with the chain's options chain (Audit is set here)
// and its handler, the door beside the native API, wrapped in wrap, if
// not nil.
func newEnvWith(t *testing.T, o daemontest.Options, chain door.Options, wrap func(http.Handler) http.Handler) *env {
	t.Helper()
	d := daemontest.New(t, o)
	rec := audit.New(d.DB.Audit(), nil)
	t.Cleanup(func() { rec.Close(context.Background()) }) // before the store closes
	sprites := spritesapi.New(spritesapi.Service{Sandboxes: d.Svc.Sandboxes, Processes: d.Svc.Processes, Files: d.Svc.Files,
		Checkpoints: d.Svc.Checkpoints, Tenancy: d.Svc.Tenancy}, spritesapi.Options{Keepalive: keepalive})
	chain.Audit = rec
	h := door.New(d.Svc.Tenancy, d.Svc.Sandboxes, chain).Handler(httpapi.New(d.Svc, httpapi.Options{Audit: rec}), sprites)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, d: d, audit: rec}
}

// do sends method path with token (none when "") and body, and returns the
// response and its body.
func (e *env) do(t *testing.T, method, path, token, body string) (*http.Response, []byte) {
	t.Helper()
	return testenv.Do(t, method, e.url+path, token, body)
}

// want sends the request and wants status; it decodes a JSON body into out
// when out is not nil.
func (e *env) want(t *testing.T, status int, method, path, token, body string, out any) []byte {
	t.Helper()
	resp, b := e.do(t, method, path, token, body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s = %d %s; want %d", method, path, resp.StatusCode, b, status)
	}
	if got := resp.Header.Get("Sprite-Version"); got != spritesapi.Version {
		t.Errorf("%s %s: Sprite-Version = %q, want %q", method, path, got, spritesapi.Version)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: body %s: %v", method, path, b, err)
		}
	}
	return b
}

// apiError is the Sprites error body.
type apiError struct {
	Error             string `json:"error"`
	Message           string `json:"message"`
	Code              string `json:"code"`
	Path              string `json:"path"`
	Limit             *int64 `json:"limit"`
	CurrentCount      *int64 `json:"current_count"`
	RetryAfterSeconds *int64 `json:"retry_after_seconds"`
}

// wantError sends the request and wants status with a Sprites error body
// whose "error" is code.
func (e *env) wantError(t *testing.T, status int, code, method, path, token, body string) apiError {
	t.Helper()
	var ae apiError
	e.want(t, status, method, path, token, body, &ae)
	if ae.Error != code && ae.Code != code || ae.Error == "" {
		t.Fatalf("%s %s: error body %+v; want %q", method, path, ae, code)
	}
	return ae
}

// sprite is the part of the Sprites object the tests read.
type sprite struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Status       string   `json:"status"`
	Organization string   `json:"organization"`
	Labels       []string `json:"labels"`
	CreatedAt    string   `json:"created_at"`
	URLSettings  struct {
		Auth string `json:"auth"`
	} `json:"url_settings"`
}

// create makes sprite name as token's agent.
func (e *env) create(t *testing.T, token, name string) sprite {
	t.Helper()
	var s sprite
	e.want(t, http.StatusCreated, "POST", "/v1/sprites", token, `{"name":"`+name+`"}`, &s)
	return s
}
