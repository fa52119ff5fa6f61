package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/sandbox"
)

// mcpDaemon is a daemon's /v1/limits and /mcp with one tool, echo, which
// reports its text as progress and fails on "fail", for the bridge.
func mcpDaemon(t *testing.T, token string) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "daemon"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, struct{}, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: in.Text, Progress: 1})
		}
		if in.Text == "fail" {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "error: it failed\n"}}}, struct{}{}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, struct{}{}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux := http.NewServeMux()
	authed := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.Header().Set("WWW-Authenticate", "Bearer")
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"error":{"code":"unauthenticated","message":"missing or invalid token","hint":"send a valid token"}}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux.Handle("/mcp", authed(h))
	mux.Handle("GET /v1/limits", authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestMCPBridge runs `hearth mcp` on pipes and calls the daemon's tool
// through it: arguments, results, error results and progress pass as
// they are.
func TestMCPBridge(t *testing.T) {
	url := mcpDaemon(t, "hearth_good")
	env := map[string]string{"HEARTH_URL": url, "HEARTH_TOKEN": "hearth_good"}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(t.Context(), []string{"mcp"}, func(k string) string { return env[k] }, inR, outW, &stderr)
		outW.Close()
	}()
	var (
		mu       sync.Mutex
		progress []string
	)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, r.Params.Message)
		},
	}).Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect to hearth mcp: %v (stderr %q)", err, stderr.String())
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "echo" {
		t.Fatalf("tools/list through the bridge = %+v, %v", tools, err)
	}
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "hello" {
		t.Fatalf("echo(hello) through the bridge = %+v, %v", res, err)
	}
	// Notifications are handled concurrently with results: the progress
	// may arrive just after the result.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := slices.Clone(progress)
		mu.Unlock()
		if len(got) == 1 && got[0] == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("progress through the bridge = %q; want [hello]", got)
			break
		}
	}
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "fail"}})
	if err != nil || !res.IsError || res.Content[0].(*mcp.TextContent).Text != "error: it failed\n" {
		t.Fatalf("echo(fail) through the bridge = %+v, %v; want the daemon's error result", res, err)
	}
	cs.Close()
	inW.Close()
	if c := <-code; c != 0 {
		t.Errorf("hearth mcp exited %d after stdin closed; stderr %q", c, stderr.String())
	}

	// A bad token is refused before any MCP, in the CLI's words.
	env["HEARTH_TOKEN"] = "hearth_bad"
	stderr.Reset()
	if c := run(t.Context(), []string{"mcp"}, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, &stderr); c != sandbox.CodeUnauthenticated.ExitCode() ||
		stderr.String() != "error: missing or invalid token\nhint: send a valid token\n" {
		t.Errorf("hearth mcp with a bad token = %d %q", c, stderr.String())
	}
}
