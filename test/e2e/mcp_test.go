package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/mcptest"
)

// mcpConnect opens an MCP session with d's /mcp over Streamable HTTP
// with token; progress, when set, receives every progress message. The
// session closes with the test.
func mcpConnect(t *testing.T, d *daemon, token string, progress func(string)) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress(r.Params.Message) }
	}
	return mcptest.Connect(t, ctxT(t), d.URL+"/mcp", token, opts)
}

// callTool calls tool with args (asking for progress) and decodes its
// structured content (an error result's error object) into out when out is
// not nil. A protocol error fails
// the test; a tool error is the result's.
func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	params.SetProgressToken(tool)
	res, err := cs.CallTool(ctxT(t), params)
	if err != nil {
		t.Fatalf("%s(%v): %v", tool, args, err)
	}
	if out != nil {
		if err := mcptest.Decode(res, out); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	return res
}

// mcpText is the text content of res.
func mcpText(res *mcp.CallToolResult) string {
	var s strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s.WriteString(tc.Text)
		}
	}
	return s.String()
}

// TestMCP drives the MCP door of a real daemon with the Go SDK's client
// over Streamable HTTP and an agent's bearer token: the six tools end to
// end, progress, a quota error in the CLI's words; then the stdio bridge,
// `hearth mcp`. TestMCPParity holds the two doors to the same words.
func TestMCP(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)
	tok := d.agentToken(t, "acme", "bot", 1)

	var (
		mu       sync.Mutex
		progress strings.Builder
	)
	cs := mcpConnect(t, d, tok, func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		progress.WriteString(msg)
	})
	call := func(tool string, args map[string]any, out any) *mcp.CallToolResult {
		t.Helper()
		return callTool(t, cs, tool, args, out)
	}
	must := func(tool string, args map[string]any, out any) {
		t.Helper()
		if res := call(tool, args, out); res.IsError {
			t.Fatalf("%s(%v) = %s", tool, args, mcpText(res))
		}
	}

	var sb struct {
		Name         string   `json:"name"`
		Status       string   `json:"status"`
		Capabilities []string `json:"capabilities"`
	}
	must("sandbox_create", map[string]any{"name": "box", "ttl": "1h"}, &sb)
	if sb.Name != "agent-bot-box" || sb.Status != "running" || len(sb.Capabilities) == 0 {
		t.Fatalf("sandbox_create = %+v", sb)
	}
	var ex struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	must("sandbox_exec", map[string]any{"sandbox": "box", "command": "echo one > f; cat f; sleep 0.3; echo two"}, &ex)
	mu.Lock()
	got := progress.String()
	mu.Unlock()
	if ex.ExitCode != 0 || ex.Stdout != "one\ntwo\n" || !strings.Contains(got, "one\n") {
		t.Fatalf("sandbox_exec = %+v, progress %q", ex, got)
	}
	var ck struct {
		ID string `json:"id"`
	}
	must("sandbox_checkpoint", map[string]any{"sandbox": "box", "label": "first"}, &ck)
	must("sandbox_exec", map[string]any{"sandbox": "box", "command": "echo changed > f"}, nil)
	must("sandbox_restore", map[string]any{"sandbox": "box", "checkpoint": ck.ID}, nil)
	must("sandbox_exec", map[string]any{"sandbox": "box", "command": "cat f"}, &ex)
	if ex.Stdout != "one\n" {
		t.Fatalf("f after restore = %q; want the checkpoint's", ex.Stdout)
	}
	var ls struct {
		Sandboxes []struct{ Name string }
		Usage     struct{ Summary string }
	}
	must("sandbox_list", nil, &ls)
	if len(ls.Sandboxes) != 1 || ls.Usage.Summary != "1 of 1 sandboxes" {
		t.Fatalf("sandbox_list = %+v", ls)
	}

	// The quota: its code and numbers, and the CLI's words.
	var te struct {
		Code    sandbox.Code   `json:"code"`
		Details map[string]any `json:"details"`
	}
	res := call("sandbox_create", map[string]any{"name": "box2"}, &te)
	if want := "error: quota exceeded: 1 of 1 sandboxes in use for agent-bot\nhint: destroy one or wait\n"; !res.IsError || te.Code != sandbox.CodeQuotaExceeded ||
		mcpText(res) != want || te.Details["limit"] != 1.0 || te.Details["used"] != 1.0 {
		t.Errorf("sandbox_create over the quota = %v %q %+v", res.IsError, mcpText(res), te)
	}

	// The stdio bridge reaches the same tools with the same token.
	cmd := exec.Command(bins.Hearth, "mcp")
	cmd.Env = append(os.Environ(), "HEARTH_URL="+d.URL, "HEARTH_TOKEN="+tok)
	bs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-stdio"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("hearth mcp: %v", err)
	}
	tools, err := bs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 8 {
		t.Fatalf("tools/list through hearth mcp = %+v, %v", tools, err)
	}
	bres, err := bs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"sandbox": "box", "command": "cat f"}})
	if err != nil || bres.IsError || !strings.Contains(mcpText(bres), `"stdout":"one\n"`) {
		t.Errorf("sandbox_exec through hearth mcp = %+v, %v", bres, err)
	}
	bres, err = bs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_destroy", Arguments: map[string]any{"sandbox": "nosuch"}})
	if _, stderr, _ := d.CLIAs(tok, "", "destroy", "nosuch"); err != nil || !bres.IsError || mcpText(bres) != stderr {
		t.Errorf("sandbox_destroy(nosuch) through hearth mcp = %+v, %v; want the CLI's %q", bres, err, stderr)
	}
	bs.Close()

	must("sandbox_destroy", map[string]any{"sandbox": "box"}, nil)
	must("sandbox_list", nil, &ls)
	if len(ls.Sandboxes) != 0 || ls.Usage.Summary != "0 of 1 sandboxes" {
		t.Errorf("sandbox_list after destroy = %+v", ls)
	}
}
