// Package mcptest holds what the tests of the MCP door and the end-to-end
// MCP tests both read from tool results.
package mcptest

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
