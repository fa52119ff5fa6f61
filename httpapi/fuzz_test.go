package httpapi_test

import (
	"bytes"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/sandbox"
)

// FuzzDecodeExecMessage: whatever a client sends as the first exec message,
// the decoder returns either a request that passes Validate or an
// invalid_argument error (too_large for a shell_size over the limit), and
// never panics.
func FuzzDecodeExecMessage(f *testing.F) {
	for _, seed := range []string{
		`{"argv":["ls","-l"]}`,
		`{"shell":"echo hi","env":{"A":"b"},"cwd":"/tmp","timeout":"5s","grace":3,"stdin":true}`,
		`{"argv":[]}`, `{"argv":["a"],"shell":"b"}`, `{"argv":["a\u0000"]}`, `{"env":{"A=B":"c"},"shell":"x"}`,
		`{"timeout":-1,"argv":["x"]}`, `{"timeout":1e300,"argv":["x"]}`, `{"timeout":"9999999999h","argv":["x"]}`,
		`{"shell_size":100}`, `{"shell_size":-1}`, `{"shell_size":1e30}`, `{"shell_size":67108865}`, `{"shell_size":3,"shell":"x"}`,
		`{"nope":1}`, `[]`, `null`, `"x"`, `{`, ``, ` `, `{"argv":["x"]}{}`, `{"argv":["x"]} x`,
	} {
		f.Add(true, []byte(seed))
	}
	f.Add(false, []byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, text bool, msg []byte) {
		typ := websocket.MessageBinary
		if text {
			typ = websocket.MessageText
		}
		req, err := httpapi.DecodeExecMessage(typ, msg)
		if err != nil {
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) && !sandbox.IsCode(err, sandbox.CodeTooLarge) {
				t.Fatalf("DecodeExecMessage(%v, %q) = %v; want invalid_argument", typ, msg, err)
			}
			return
		}
		if !text {
			t.Fatalf("DecodeExecMessage accepted a binary message %q", msg)
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("DecodeExecMessage(%q) = %+v, which fails Validate: %v", msg, req, err)
		}
		if req.Script != nil {
			t.Fatalf("DecodeExecMessage(%q) set a script stream", msg)
		}
	})
}

// FuzzDecodeBody: whatever a client sends as a JSON request body, each
// of the API's body types decodes it into a value or refuses it with an
// invalid_argument error, never anything else and never a panic; a value
// comes only from a JSON object (or an empty body, the zero request).
func FuzzDecodeBody(f *testing.F) {
	for _, seed := range []string{
		`{"name":"web","size":"small","ttl":"1h","labels":["a"]}`, `{"ttl":1e30}`, `{"ttl":"9999999999h"}`, `{"ttl":-1}`,
		`{"checkpoint":"ck-1","name":"b"}`, `{"value":"s3cr3t"}`, `{"secret":"K","upstream":"https://x"}`,
		`{"allocation":{"memory_bytes":1e30}}`, `{"labels":null}`, `{"public_ports":[80,99999]}`,
		`null`, `[]`, `1`, `"x"`, `true`, ``, ` `, `{`, `{}{}`, `{} x`, `{"nope":1}`, `{"name":1}`,
	} {
		f.Add(seed)
	}
	targets := map[string]func() any{
		"create":        func() any { return new(sandbox.CreateRequest) },
		"update":        func() any { return new(sandbox.SandboxUpdate) },
		"checkpoint":    func() any { return new(sandbox.CheckpointRequest) },
		"tenant":        func() any { return new(sandbox.Tenant) },
		"tenant update": func() any { return new(sandbox.TenantUpdate) },
		"agent":         func() any { return new(sandbox.Agent) },
		"token":         func() any { return new(sandbox.TokenRequest) },
	}
	for name, v := range httpapi.Bodies() {
		targets[name] = v
	}
	names := make([]string, 0, len(targets))
	for name := range targets {
		names = append(names, name)
	}
	sort.Strings(names)
	f.Fuzz(func(t *testing.T, body string) {
		for _, name := range names {
			err := httpapi.DecodeJSON(strings.NewReader(body), targets[name](), true)
			var se *sandbox.Error
			switch {
			case err == nil:
				if trimmed := bytes.TrimSpace([]byte(body)); len(trimmed) > 0 && trimmed[0] != '{' {
					t.Fatalf("%s: decoded %q, which is no JSON object", name, body)
				}
			case !errors.As(err, &se) || se.Code != sandbox.CodeInvalidArgument:
				t.Fatalf("%s: DecodeJSON(%q) = %v; want invalid_argument", name, body, err)
			}
		}
	})
}
