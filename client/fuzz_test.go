package client_test

import (
	"testing"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/client"
)

// FuzzParseMessage: whatever a daemon (or something posing as one) sends
// on an exec stream, the client reads it as output, an end (a result, or
// an error whose code is one of the closed set), a message to skip, or a
// malformed message, and never panics.
func FuzzParseMessage(f *testing.F) {
	for _, seed := range []string{
		`{"type":"exit","result":{"exit_code":3,"timed_out":false,"oom_killed":false,"duration_ms":12}}`,
		`{"type":"error","error":{"code":"not_found","message":"sandbox \"x\" not found","hint":"","details":{}}}`,
		`{"type":"error","error":{"code":"brand_new","message":"x"}}`, `{"type":"error","error":null}`,
		`{"type":"exit"}`, `{"type":"keepalive"}`, `{"type":"exit","result":{"exit_code":1e400}}`, `null`, `[]`, `{`, ``,
	} {
		f.Add(true, []byte(seed))
	}
	f.Add(false, []byte{1, 'o', 'k'})
	f.Add(false, []byte{2})
	f.Add(false, []byte{9, 'x'})
	f.Add(false, []byte{})
	f.Fuzz(func(t *testing.T, text bool, msg []byte) {
		typ := websocket.MessageBinary
		if text {
			typ = websocket.MessageText
		}
		stream, data, res, end, err := client.ParseMessage(typ, msg)
		switch {
		case !text && (err != nil || res != nil || end != nil):
			t.Fatalf("binary %q read as %v, %+v, %v; want output or nothing", msg, err, res, end)
		case !text && stream != 0 && (len(msg) == 0 || stream != msg[0] || string(data) != string(msg[1:])):
			t.Fatalf("binary %q read as stream %d data %q", msg, stream, data)
		case text && stream != 0:
			t.Fatalf("text %q read as output", msg)
		case res != nil && end != nil:
			t.Fatalf("%q read as both a result and an error", msg)
		case end != nil && !end.Code.Valid():
			t.Fatalf("%q read as an error of code %q, outside the closed set", msg, end.Code)
		}
	})
}
