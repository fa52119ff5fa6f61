package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// runMCP serves hearth's MCP tools on stdin and stdout for a local MCP
// client. It is a bridge, not a second implementation: it opens an MCP
// session with the daemon's /mcp (HEARTH_URL, with the caller's token, as
// every verb resolves them), offers the daemon's tools as they are listed,
// and forwards each call, its progress notifications and its cancellation,
// so that the tools, their errors and their audit are the daemon's.
func runMCP(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("mcp", "", "Serve hearth's MCP tools on stdin and stdout, for an MCP client, through the daemon's /mcp with your token.")
	_, err := fs.parseArgs(args, "mcp")
	if err != nil {
		return err
	}
	cl := c.client()
	// Check the daemon and the token first, for the CLI's words when
	// either is wrong: the MCP handshake would only say "401".
	if _, err := cl.Limits(ctx); err != nil {
		return err
	}
	cfg := resolveConfig(c.url, c.token, c.getenv, os.ReadFile)
	return bridgeMCP(ctx, strings.TrimSuffix(cfg.URL, "/")+"/mcp", cfg.Token, c.stdin, c.stdout)
}

// bridgeMCP serves on in and out the tools of the MCP server at endpoint,
// reached with token, until in ends or ctx does.
func bridgeMCP(ctx context.Context, endpoint, token string, in io.Reader, out io.Writer) error {
	var local atomic.Pointer[mcp.ServerSession]
	remote, err := mcp.NewClient(&mcp.Implementation{Name: "hearth-mcp", Version: version()}, &mcp.ClientOptions{
		// The bridge passes the caller's progress tokens through, so the
		// daemon's notifications go back as they came.
		ProgressNotificationHandler: func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
			if ss := local.Load(); ss != nil {
				ss.NotifyProgress(ctx, r.Params)
			}
		},
	}).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: http.DefaultTransport}},
	}, nil)
	if err != nil {
		return err
	}
	defer remote.Close()
	tools, err := remote.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "hearth", Version: version()}, nil)
	for _, tool := range tools.Tools {
		srv.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			params := &mcp.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments}
			if tok := req.Params.GetProgressToken(); tok != nil {
				params.SetProgressToken(tok)
			}
			return remote.CallTool(ctx, params)
		})
	}
	ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}, nil)
	if err != nil {
		return err
	}
	local.Store(ss)
	stop := context.AfterFunc(ctx, func() { ss.Close() })
	defer stop()
	ss.Wait()
	return nil
}

// bearerTransport sends the token with every request.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	r.Header.Set("User-Agent", "hearth-cli/"+version())
	return b.base.RoundTrip(r)
}

// nopWriteCloser is out, whose closing is the process's business.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
