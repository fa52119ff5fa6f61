package spritesapi_test

import (
	"net/url"
	"testing"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/spritesapi"
)

// FuzzBodies: whatever a client sends as a JSON body, each of the door's
// bodies decodes and checks it into a value or a hearth error of the
// closed set (never internal), and never panics.
func FuzzBodies(f *testing.F) {
	for _, seed := range []string{
		`{"name":"box","config":{"ram_mb":1024,"cpus":2,"storage_gb":10},"url_settings":{"auth":"public"},"labels":["a"]}`,
		`{"config":{"cpus":9300000000000000}}`, `{"config":{"ram_mb":-1}}`, `{"config":{"cpus":1e30}}`,
		`{"url_settings":{"auth":"nobody"}}`, `{"labels":null,"clear_labels":true}`,
		`{"path":"a","workingDir":"/w","source":"../x","dest":"/y","mode":"0755","recursive":true}`, `{"mode":"99999"}`,
		`{"rules":[{"domain":"*.example.com","action":"allow"},{"include":"defaults"},{"domain":"*","action":"deny"}]}`,
		`{"rules":[{"domain":"","action":"maybe"}]}`, `{"comment":"before"}`,
		`null`, `[]`, `7`, `"x"`, ``, `  `, `{`, `{} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i, err := range spritesapi.DecodeBodies(b) {
			if err != nil && !sandbox.AsError(err).Code.Valid() || sandbox.IsCode(err, sandbox.CodeInternal) {
				t.Fatalf("body %q, decoder %d: %v; want a value or a hearth error", b, i, err)
			}
		}
	})
}

// FuzzParseExec: whatever query a client puts on an exec, it becomes a
// request that passes Validate or an invalid_argument error.
func FuzzParseExec(f *testing.F) {
	for _, seed := range []string{
		"cmd=ls&cmd=-l", "path=/bin/sh&cmd=sh&cmd=-c&cmd=echo+hi&stdin=true", "tty=true&rows=50&cols=200",
		"tty=true&rows=70000", "env=A=b&env=bad", "max_run_after_disconnect=1e30", "max_run_after_disconnect=-5s",
		"max_run_after_disconnect=9999999999h", "dir=/tmp&cmd=pwd", "stdin=maybe", "cmd=%00", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, _, err := spritesapi.ParseExec(q)
		if err != nil {
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
				t.Fatalf("ParseExec(%q) = %v; want invalid_argument", raw, err)
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("ParseExec(%q) = %+v, which fails Validate: %v", raw, req, err)
		}
	})
}

// FuzzControl: whatever text message a client sends on an exec stream,
// the door passes on a control that Validate takes, or drops it.
func FuzzControl(f *testing.F) {
	for _, seed := range []string{
		`{"type":"resize","rows":40,"cols":120}`, `{"type":"resize","rows":0,"cols":1}`, `{"type":"resize","rows":65535,"cols":65535}`,
		`{"type":"signal","signal":"TERM"}`, `{"type":"signal","signal":15}`, `{"type":"signal","signal":-1}`,
		`{"type":"signal","signal":{}}`, `{"type":"keepalive"}`, `null`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, ok := spritesapi.Control(msg)
		if !ok {
			return
		}
		if (c.Resize == nil) == (c.Signal == "") {
			t.Fatalf("control %q became %+v; want exactly one of resize and signal", msg, c)
		}
	})
}
