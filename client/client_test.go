package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// recorded is what the fake daemon saw of one request.
type recorded struct {
	Method, RawPath, Query, Auth, UA string
}

// fakeDaemon is an httptest server whose handler the test sets; it records
// every request.
type fakeDaemon struct {
	*httptest.Server
	mu   sync.Mutex
	seen []recorded
}

func newFakeDaemon(t *testing.T, h http.HandlerFunc) *fakeDaemon {
	t.Helper()
	d := &fakeDaemon{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.seen = append(d.seen, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("User-Agent")})
		d.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *fakeDaemon) last(t *testing.T) recorded {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.seen) == 0 {
		t.Fatal("the daemon saw no request")
	}
	return d.seen[len(d.seen)-1]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        sandbox.Error
	}{
		{
			name: "error body", status: 404, contentType: "application/json",
			body: `{"error":{"code":"not_found","message":"sandbox \"x\" not found","hint":"list them","details":{"limit":5}}}`,
			want: sandbox.Error{Code: sandbox.CodeNotFound, Message: `sandbox "x" not found`, Hint: "list them", Details: map[string]any{"limit": 5.0}},
		},
		{
			name: "quota with details", status: 429, contentType: "application/json",
			body: `{"error":{"code":"quota_exceeded","message":"5 of 5 sandboxes","hint":"destroy one","details":{"limit":5,"used":5}}}`,
			want: sandbox.Error{Code: sandbox.CodeQuotaExceeded, Message: "5 of 5 sandboxes", Hint: "destroy one", Details: map[string]any{"limit": 5.0, "used": 5.0}},
		},
		{
			name: "code this client does not know", status: 429, contentType: "application/json",
			body: `{"error":{"code":"brand_new","message":"slow down","hint":"","details":{}}}`,
			want: sandbox.Error{Code: sandbox.CodeRateLimited, Message: "slow down", Details: map[string]any{"server_code": "brand_new"}},
		},
		{
			name: "proxy page", status: 502, contentType: "text/html",
			body: `<html>bad gateway</html>`,
			want: sandbox.Error{Code: sandbox.CodeUnavailable},
		},
		{
			name: "empty 500", status: 500,
			want: sandbox.Error{Code: sandbox.CodeInternal},
		},
		{
			name: "empty 401", status: 401,
			want: sandbox.Error{Code: sandbox.CodeUnauthenticated},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			_, err := client.New(d.URL, "tok", nil).Get(ctxT(t), "x")
			var e *sandbox.Error
			if !errors.As(err, &e) {
				t.Fatalf("Get() = %v (%T); want a *sandbox.Error", err, err)
			}
			if e.Code != tt.want.Code {
				t.Errorf("code = %s, want %s", e.Code, tt.want.Code)
			}
			if tt.want.Message != "" && (e.Message != tt.want.Message || e.Hint != tt.want.Hint) {
				t.Errorf("message, hint = %q, %q; want %q, %q", e.Message, e.Hint, tt.want.Message, tt.want.Hint)
			}
			if tt.want.Message == "" && (e.Message == "" || e.Hint == "") {
				t.Errorf("body-less error = %+v; want a message and a hint", e)
			}
			for k, v := range tt.want.Details {
				if e.Details[k] != v {
					t.Errorf("details[%s] = %v, want %v", k, e.Details[k], v)
				}
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	c := client.New(url, "tok", nil)
	ctx := ctxT(t)
	calls := map[string]func() error{
		"List": func() error { _, err := c.List(ctx); return err },
		"Exec": func() error {
			_, err := c.Exec(ctx, "x", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
			return err
		},
		"WriteFile": func() error {
			_, err := c.WriteFile(ctx, "x", sandbox.WriteRequest{Path: "f"}, strings.NewReader("data"))
			return err
		},
	}
	for name, call := range calls {
		err := call()
		var e *sandbox.Error
		if !errors.As(err, &e) || e.Code != sandbox.CodeUnavailable {
			t.Fatalf("%s against a closed port = %v; want unavailable", name, err)
		}
		if !strings.Contains(e.Message, url) || !strings.Contains(e.Hint, "hearth serve") {
			t.Errorf("%s: message %q, hint %q; want the URL and `hearth serve` named", name, e.Message, e.Hint)
		}
	}
}

func TestBadBaseURL(t *testing.T) {
	for _, u := range []string{"", "ftp://host", "http://", "::"} {
		_, err := client.New(u, "tok", nil).List(ctxT(t))
		if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("List with base URL %q = %v; want invalid_argument", u, err)
		}
	}
}

func TestContextCanceled(t *testing.T) {
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := client.New(d.URL, "tok", nil).List(ctx)
	var e *sandbox.Error
	if !errors.Is(err, context.Canceled) || errors.As(err, &e) {
		t.Fatalf("List with a canceled context = %v; want context.Canceled and no *sandbox.Error", err)
	}
}

// TestRequests checks what each call sends and how it reads the answer.
func TestRequests(t *testing.T) {
	info := sandbox.FileInfo{Name: "f", Path: "/home/sandbox/f", Type: sandbox.FileRegular, Size: 3, Mode: 0o644}
	sb := sandbox.Sandbox{ID: "x1", Name: "a b", Status: sandbox.StatusRunning}
	var status int
	var body any
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		if body == nil {
			w.WriteHeader(status)
			return
		}
		writeJSON(w, status, body)
	})
	c := client.New(d.URL+"/", "tok", &client.Options{UserAgent: "test-agent/1"})
	ctx := ctxT(t)
	tests := []struct {
		name   string
		status int
		body   any
		call   func() (any, error)
		want   recorded
		result any
	}{
		{"health", 200, client.Health{Status: "ok", Runtime: "runc"},
			func() (any, error) { return c.Health(ctx) },
			recorded{Method: "GET", RawPath: "/v1/health"}, client.Health{Status: "ok", Runtime: "runc"}},
		{"create new", 201, sb,
			func() (any, error) {
				s, created, err := c.Create(ctx, sandbox.CreateRequest{Name: "a b"})
				return [2]any{s.ID, created}, err
			},
			recorded{Method: "POST", RawPath: "/v1/sandboxes"}, [2]any{"x1", true}},
		{"create existing", 200, sb,
			func() (any, error) {
				s, created, err := c.Create(ctx, sandbox.CreateRequest{})
				return [2]any{s.ID, created}, err
			},
			recorded{Method: "POST", RawPath: "/v1/sandboxes"}, [2]any{"x1", false}},
		{"get escapes the name", 200, sb,
			func() (any, error) { s, err := c.Get(ctx, "a b/c?d"); return s.Name, err },
			recorded{Method: "GET", RawPath: "/v1/sandboxes/a%20b%2Fc%3Fd"}, "a b"},
		{"list", 200, map[string]any{"sandboxes": []sandbox.Sandbox{sb}},
			func() (any, error) { l, err := c.List(ctx); return len(l), err },
			recorded{Method: "GET", RawPath: "/v1/sandboxes"}, 1},
		{"update", 200, sb,
			func() (any, error) {
				s, err := c.Update(ctx, "s1", sandbox.SandboxUpdate{Labels: &[]string{"ci"}})
				return s.ID, err
			},
			recorded{Method: "PATCH", RawPath: "/v1/sandboxes/s1"}, "x1"},
		{"destroy", 204, nil,
			func() (any, error) { return nil, c.Destroy(ctx, "s1") },
			recorded{Method: "DELETE", RawPath: "/v1/sandboxes/s1"}, nil},
		{"list dir", 200, map[string]any{"entries": []sandbox.FileInfo{info, info}},
			func() (any, error) { l, err := c.ListDir(ctx, "s1", "dir with space"); return len(l), err },
			recorded{Method: "GET", RawPath: "/v1/sandboxes/s1/fs/list", Query: "path=dir+with+space"}, 2},
		{"stat", 200, info,
			func() (any, error) { return c.Stat(ctx, "s1", "/a&b=c") },
			recorded{Method: "GET", RawPath: "/v1/sandboxes/s1/fs/stat", Query: "path=%2Fa%26b%3Dc"}, info},
		{"mkdir", 200, info,
			func() (any, error) { return c.Mkdir(ctx, "s1", "d/e") },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/fs/mkdir", Query: "path=d%2Fe"}, info},
		{"remove", 204, nil,
			func() (any, error) { return nil, c.Remove(ctx, "s1", "d", false) },
			recorded{Method: "DELETE", RawPath: "/v1/sandboxes/s1/fs/file", Query: "path=d"}, nil},
		{"remove recursive", 204, nil,
			func() (any, error) { return nil, c.Remove(ctx, "s1", "d", true) },
			recorded{Method: "DELETE", RawPath: "/v1/sandboxes/s1/fs/file", Query: "path=d&recursive=true"}, nil},
		{"rename", 200, info,
			func() (any, error) { return c.Rename(ctx, "s1", "a", "b") },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/fs/rename", Query: "from=a&to=b"}, info},
		{"chmod", 200, info,
			func() (any, error) { return c.Chmod(ctx, "s1", "run.sh", 0o755) },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/fs/chmod", Query: "mode=0755&path=run.sh"}, info},
		{"chmod setuid and sticky", 200, info,
			func() (any, error) { return c.Chmod(ctx, "s1", "x", 0o750|fs.ModeSetuid|fs.ModeSticky) },
			recorded{Method: "POST", RawPath: "/v1/sandboxes/s1/fs/chmod", Query: "mode=5750&path=x"}, info},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body = tt.status, tt.body
			got, err := tt.call()
			if err != nil {
				t.Fatalf("call = %v", err)
			}
			if tt.result != nil && !jsonEqual(got, tt.result) {
				t.Errorf("result = %+v, want %+v", got, tt.result)
			}
			seen := d.last(t)
			tt.want.Auth, tt.want.UA = "Bearer tok", "test-agent/1"
			if seen != tt.want {
				t.Errorf("request = %+v\nwant      %+v", seen, tt.want)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestNamesThatCannotBeASegment(t *testing.T) {
	d := newFakeDaemon(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("request sent: %s", r.URL) })
	c := client.New(d.URL, "tok", nil)
	for _, name := range []string{"", ".", ".."} {
		if _, err := c.Get(ctxT(t), name); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("Get(%q) = %v; want invalid_argument", name, err)
		}
	}
}
