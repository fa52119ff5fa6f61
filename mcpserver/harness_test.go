package mcpserver_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/audit"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/httpapi"
	layersfake "github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

// env is the door over a real lifecycle.Service with a SQLite store in
// t.TempDir(), layers/fake holding the image "default", and driver/fake,
// whose sandboxes are real hearth-agents in this process (commands run as
// the test's user in the sandbox's home). Tenant t1 has an agent quota of
// quota sandboxes.
type env struct {
	svc    *lifecycle.Service
	db     store.Store
	driver *driverfake.Driver
	srv    *mcpserver.Server
	// url is the API with the door mounted at /mcp, audited into db.
	url      string
	recorder *audit.Recorder
}

var (
	agentA1 = sandbox.Principal{Tenant: "t1", Agent: "a1", Role: sandbox.RoleAgent, TokenID: "tok-a1"}
	agentA2 = sandbox.Principal{Tenant: "t1", Agent: "a2", Role: sandbox.RoleAgent, TokenID: "tok-a2"}
)

const (
	tokenA1 = "hearth_testtokenforagenta1"
	tokenA2 = "hearth_testtokenforagenta2"
	quota   = 2
)

func newEnv(t *testing.T, opts mcpserver.Options) *env {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hearth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for secret, p := range map[string]sandbox.Principal{tokenA1: agentA1, tokenA2: agentA2} {
		sum := sha256.Sum256([]byte(secret))
		if err := db.CreateToken(ctx, store.Token{ID: p.TokenID, Hash: hex.EncodeToString(sum[:]), Principal: p, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	lay := layersfake.New(t)
	if err := lay.Import(ctx, "default", fstest.MapFS{"home/sandbox": {Mode: fs.ModeDir | 0o755}}); err != nil {
		t.Fatal(err)
	}
	drv := driverfake.New(driverfake.Options{})
	t.Cleanup(func() { drv.Close() })
	svc, err := lifecycle.New(lifecycle.Options{Store: db, Driver: drv, Layers: lay, AgentPath: "/nonexistent/hearth-agent"})
	if err != nil {
		t.Fatal(err)
	}
	operator := sandbox.Principal{Tenant: "system", Agent: "operator", Role: sandbox.RoleOperator}
	q := quota
	if _, err := svc.CreateTenant(ctx, operator, sandbox.Tenant{Name: "t1",
		Allocation: sandbox.Resources{MilliCPU: 1 << 20, MemoryBytes: 1 << 45, DiskBytes: 1 << 48},
		Policy:     sandbox.PolicyOverrides{AgentQuota: &q}}); err != nil {
		t.Fatal(err)
	}
	rec := audit.New(db, nil)
	t.Cleanup(func() { rec.Close(context.Background()) })
	opts.Audit = rec
	srv := mcpserver.New(svc, opts)
	hs := httptest.NewServer(httpapi.New(svc, httpapi.Options{MCP: srv.Handler(), Audit: rec, AuditLog: db}))
	t.Cleanup(hs.Close)
	return &env{svc: svc, db: db, driver: drv, srv: srv, url: hs.URL, recorder: rec}
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
	t.Helper()
	sb, err := e.db.GetSandbox(t.Context(), p.Resolve(name))
	if err != nil {
		t.Fatalf("GetSandbox(%s) = %v", name, err)
	}
	return e.driver.Home(sb.ID)
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
		b, _ := json.Marshal(res.StructuredContent)
		if res.IsError { // {"error": the API's error object}
			var c struct{ Error json.RawMessage }
			json.Unmarshal(b, &c)
			b = c.Error
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", tool, b, err)
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
