package mcpserver_test

import (
	"testing"

	"github.com/hearth/hearth/mcpserver"
	"github.com/hearth/hearth/sandbox"
)

// FuzzToolArguments: whatever arguments a client gives sandbox_create and
// sandbox_exec, the tools take them or refuse them with invalid_argument
// or too_large (never internal, never a panic): durations that overflow
// above all.
func FuzzToolArguments(f *testing.F) {
	for _, seed := range []string{
		`{"name":"box","size":"small","ttl":"2h","network":"egress"}`, `{"ttl":1e30}`, `{"ttl":-1}`, `{"ttl":"9999999999h"}`,
		`{"ttl":{"a":1}}`, `{"ttl":[1]}`, `{"ttl":null}`, `{"ttl":true}`, `{"ttl":1e400}`,
		`{"sandbox":"box","command":"ls","timeout":1e300}`, `{"sandbox":"box","command":"ls","timeout":"5m","env":{"A=B":"c"}}`,
		`{"sandbox":"box","command":"a\u0000b"}`, `{"sandbox":"box","command":"","secrets":["not a name"]}`,
		`{"command":"ls","cwd":"/tmp","secrets":["K","K"]}`, `null`, `[]`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, errs := mcpserver.ToolArguments(raw)
		for _, err := range errs {
			if err != nil && !sandbox.IsCode(err, sandbox.CodeInvalidArgument) && !sandbox.IsCode(err, sandbox.CodeTooLarge) {
				t.Fatalf("arguments %q: %v; want invalid_argument or too_large", raw, err)
			}
		}
	})
}
