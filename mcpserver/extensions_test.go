package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/mcpserver"
)

// TestExtensions checks that an extension's server options and tools reach
// every server the door builds, beside hearth's own, and that the door's
// middleware wraps its tools too: a panic is an internal error result.
func TestExtensions(t *testing.T) {
	configured := 0
	e := newEnv(t, mcpserver.Options{Extensions: []mcpserver.Extension{{
		Configure: func(o *mcp.ServerOptions) {
			configured++
			o.CompletionHandler = func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
				return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{"x"}}}, nil
			}
		},
		Register: func(srv *mcp.Server) {
			srv.AddTool(&mcp.Tool{Name: "ext_echo", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo"}}}, nil
				})
			srv.AddTool(&mcp.Tool{Name: "ext_panic", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { panic("boom") })
		},
	}}})
	cs := e.connect(t, agentA1, nil)
	if configured != 1 {
		t.Errorf("Configure ran %d times for one server, want 1", configured)
	}
	if cs.InitializeResult().Capabilities.Completions == nil {
		t.Error("the server does not offer completions, which Configure turned on")
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "sandbox_exec") || !strings.Contains(got, "ext_echo") {
		t.Errorf("tools/list = %s, want hearth's tools and ext_echo", got)
	}
	if res := mustCall(t, cs, "ext_echo", nil, nil); text(res) != "echo" {
		t.Errorf("ext_echo = %q, want echo", text(res))
	}
	if res := call(t, cs, "ext_panic", nil, nil); !res.IsError || !strings.Contains(text(res), "internal") {
		t.Errorf("ext_panic = %q (error %v), want an internal error result", text(res), res.IsError)
	}
}
