// Package mcptest holds what the tests of the MCP door, the end-to-end
// MCP tests and the attack suite share: a session with a daemon's /mcp
// over Streamable HTTP with a bearer token, and what they read from tool
// results.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer sends a token with every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// Connect opens an MCP session, as the official Go SDK's client, with the
// Streamable HTTP endpoint (a daemon's URL + "/mcp") and token; opts may
// be nil. A failure fails t; the session closes with the test.
func Connect(t testing.TB, ctx context.Context, endpoint, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "hearth-test"}, opts).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Decode decodes res's structured content into out: a result's output, or,
// for an error result ({"error": the API's error object}), the error
// object.
func Decode(res *mcp.CallToolResult, out any) error {
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	if res.IsError {
		var c struct{ Error json.RawMessage }
		if err := json.Unmarshal(b, &c); err != nil {
			return fmt.Errorf("error result %s: %w", b, err)
		}
		b = c.Error
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("structured content %s: %w", b, err)
	}
	return nil
}
