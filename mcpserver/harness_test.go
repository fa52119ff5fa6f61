package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/door"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/testutil/daemontest"
	"github.com/hearth/hearth/testutil/mcptest"
)

// env is the door over a daemon in miniature (testutil/daemontest), whose
// tenant t1 has an agent quota of quota sandboxes.
type env struct {
	svc    *lifecycle.Service
	db     store.Store
	driver *driverfake.Driver
	srv    *mcpserver.Server
	// url is the API with the door mounted at /mcp, audited into db.
	url      string
	recorder *audit.Recorder
	d        *daemontest.Env
}

// Principals of the env's tokens, with the ids the audit log names them by.
var (
	agentA1 = withTokenID(daemontest.AgentA1, "tok-a1")
	agentA2 = withTokenID(daemontest.AgentA2, "tok-a2")
)

func withTokenID(p sandbox.Principal, id string) sandbox.Principal {
	p.TokenID = id
	return p
}

const (
	tokenA1 = daemontest.TokenA1
	tokenA2 = daemontest.TokenA2
	quota   = 2
)

func newEnv(t *testing.T, opts mcpserver.Options) *env {
	t.Helper()
	d := daemontest.New(t, daemontest.Options{AgentQuota: quota})
	rec := audit.New(d.DB.Audit(), nil)
	t.Cleanup(func() { rec.Close(context.Background()) })
	opts.Audit = rec
	srv := mcpserver.New(d.Svc, opts)
	chain := door.New(d.Svc.Tenancy, d.Svc.Sandboxes, door.Options{Audit: rec})
	hs := httptest.NewServer(chain.Handler(httpapi.New(d.Svc, httpapi.Options{Audit: rec, AuditLog: d.DB.Audit()}), srv.Door()))
	t.Cleanup(hs.Close)
	return &env{svc: d.Svc, db: d.DB, driver: d.Driver, srv: srv, url: hs.URL, recorder: rec, d: d}
}

// alone returns the MCP door served alone on a door chain, without the
// native API.
func (e *env) alone() http.Handler {
	return door.New(e.svc.Tenancy, e.svc.Sandboxes, door.Options{}).Handler(e.srv.Door())
}

// connect opens an in-memory session with the door as p; progress, if
// set, receives the session's progress notifications.
func (e *env) connect(t *testing.T, p sandbox.Principal, progress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	return connectTo(t, e.srv.For(p), progress)
}

func connectTo(t *testing.T, srv *mcp.Server, progress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress(r.Params) }
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// home is the host directory that is the home of p's sandbox name.
func (e *env) home(t *testing.T, p sandbox.Principal, name string) string {
	return e.d.Home(t, p, name)
}

// call calls tool with args and decodes its structured content into out
// (when non-nil); it fails the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): protocol error %v", tool, args, err)
	}
	if out != nil {
		if err := mcptest.Decode(res, out); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	return res
}

// mustCall is call that fails the test on an error result.
func mustCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res := call(t, cs, tool, args, out)
	if res.IsError {
		t.Fatalf("%s(%v) = error %s", tool, args, text(res))
	}
	return res
}

// text is the text content of res.
func text(res *mcp.CallToolResult) string {
	var s string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s += tc.Text
		}
	}
	return s
}

// toolError is the structured content of an error result.
type toolError struct {
	Code    sandbox.Code   `json:"code"`
	Message string         `json:"message"`
	Hint    string         `json:"hint"`
	Details map[string]any `json:"details"`
}

// bearer is an http.Client that sends token.
func bearer(token string) *http.Client {
	return &http.Client{Transport: bearerTransport{token}}
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
