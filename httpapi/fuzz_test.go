package httpapi_test

import (
	"testing"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/httpapi"
	"github.com/hearth/hearth/sandbox"
)

// FuzzDecodeExecMessage: whatever a client sends as the first exec message,
// the decoder returns either a request that passes Validate or an
// invalid_argument error, and never panics.
func FuzzDecodeExecMessage(f *testing.F) {
	for _, seed := range []string{
		`{"argv":["ls","-l"]}`,
		`{"shell":"echo hi","env":{"A":"b"},"cwd":"/tmp","timeout":"5s","grace":3,"stdin":true}`,
		`{"argv":[]}`, `{"argv":["a"],"shell":"b"}`, `{"argv":["a\u0000"]}`, `{"env":{"A=B":"c"},"shell":"x"}`,
		`{"timeout":-1,"argv":["x"]}`, `{"timeout":1e300,"argv":["x"]}`, `{"timeout":"9999999999h","argv":["x"]}`,
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
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
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
	})
}
