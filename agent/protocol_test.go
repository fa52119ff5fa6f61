package agent_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		kind    agent.FrameKind
		payload []byte
	}{
		{"empty", agent.FrameEOF, nil},
		{"small", agent.FrameStdout, []byte("hello\x00\xff")},
		{"max", agent.FrameData, bytes.Repeat([]byte{7}, agent.MaxFrame)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := agent.WriteFrame(&buf, tc.kind, tc.payload); err != nil {
				t.Fatal(err)
			}
			kind, payload, err := agent.ReadFrame(&buf, nil)
			if err != nil || kind != tc.kind || !bytes.Equal(payload, tc.payload) {
				t.Errorf("ReadFrame = %q, %d bytes, %v; want %q, %d bytes", kind, len(payload), err, tc.kind, len(tc.payload))
			}
			if _, _, err := agent.ReadFrame(&buf, nil); err != io.EOF {
				t.Errorf("ReadFrame at the end = %v, want io.EOF", err)
			}
		})
	}
	if err := agent.WriteFrame(io.Discard, agent.FrameData, make([]byte, agent.MaxFrame+1)); err == nil {
		t.Errorf("WriteFrame(MaxFrame+1 bytes) = nil, want an error")
	}
}

func TestReadFrameErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"truncated header", "O\x00\x00"},
		{"truncated payload", "O\x00\x00\x00\x05abc"},
		{"too large", "D\x00\x10\x00\x01"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := agent.ReadFrame(strings.NewReader(tc.in), nil)
			if err == nil || errors.Is(err, io.EOF) {
				t.Errorf("ReadFrame(%q) = %v, want an error other than io.EOF", tc.in, err)
			}
		})
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("O\x00\x00\x00\x03abc"))
	f.Add([]byte("Z\x00\x00\x00\x00"))
	f.Add([]byte("D\xff\xff\xff\xff"))
	f.Add([]byte("Q\x00\x00\x00\x02{}R\x00\x00\x00\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Arbitrary input never panics, and frames read are within bounds.
		r := bytes.NewReader(data)
		var buf []byte
		for {
			_, payload, err := agent.ReadFrame(r, buf)
			if err != nil {
				break
			}
			if len(payload) > agent.MaxFrame {
				t.Fatalf("ReadFrame returned %d bytes, over MaxFrame", len(payload))
			}
			buf = payload
		}
		// Any payload round-trips.
		kind := agent.FrameData
		if len(data) > 0 {
			kind = agent.FrameKind(data[0])
		}
		var w bytes.Buffer
		if err := agent.WriteFrame(&w, kind, data); err != nil {
			t.Fatal(err)
		}
		k, p, err := agent.ReadFrame(&w, make([]byte, 3))
		if err != nil || k != kind || !bytes.Equal(p, data) {
			t.Fatalf("round trip = %q, %q, %v; want %q, %q", k, p, err, kind, data)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"op":"ping"}`,
		`{"op":"exec","exec":{"argv":["ls","-l"],"env":{"A":"1"},"cwd":"sub","timeout":"1.5s","grace":3,"stdin":true}}`,
		`{"op":"exec","exec":{"shell":"echo hi"}}`,
		`{"op":"exec","exec":{"shell":"vi","tty":{"rows":50,"cols":132},"stdin":true}}`,
		`{"op":"exec","exec":{"shell":"vi","tty":{"rows":1001,"cols":0}}}`,
		`{"op":"exec","exec":{"env":{}},"shell_size":100000}`,
		`{"op":"exec","exec":{"shell":"env","env":{"K":"v"}},"secret_env":2}`,
		`{"op":"exec","exec":{"shell":"env"},"secret_env":257}`,
		`{"op":"exec","exec":{"shell":"env"},"secret_env":-1}`,
		`{"op":"exec","exec":{"shell":"env","secrets":["K"]}}`,
		`{"op":"read","path":"x","secret_env":1}`,
		`{"op":"write","write":{"path":"a/b","mode":420,"set_mode":true,"parents":true,"max_bytes":10}}`,
		`{"op":"read","path":"/etc/passwd"}`,
		`{"op":"remove","path":"x","recursive":true}`,
		`{"op":"rename","path":"a","to":"b"}`,
		`{"op":"chmod","path":"a","mode":8389101}`,
		`{"op":"list","path":"."}`,
		`{"op":"connect","port":8080}`,
		`{"op":"connect","port":65536}`,
		`{"op":"connect"}`,
		`{"op":"ports"}`,
		`{"op":"ping","port":80}`,
		`{"op":"nope"}`,
		`{"op":"exec"}`,
		`{"op":"ping"} {}`,
		`{"op":"ping","extra":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		req, err := agent.DecodeRequest(payload)
		if err != nil {
			var e *sandbox.Error
			if !errors.As(err, &e) || !e.Code.Valid() {
				t.Fatalf("DecodeRequest error %v is not a *sandbox.Error with a valid code", err)
			}
			return
		}
		// A decoded request re-encodes to one that decodes the same.
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("Marshal(%+v) = %v", req, err)
		}
		again, err := agent.DecodeRequest(b)
		if err != nil {
			t.Fatalf("DecodeRequest(%s) = %v after it decoded from %q", b, err, payload)
		}
		if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed the request:\n%s\n%s", b, b2)
		}
	})
}

func FuzzDecodeControl(f *testing.F) {
	for _, seed := range []string{
		`{"signal":"TERM"}`,
		`{"signal":"15"}`,
		`{"resize":{"rows":24,"cols":80}}`,
		`{"resize":{"rows":0,"cols":0}}`,
		`{"resize":{"rows":1001,"cols":1}}`,
		`{"signal":"TERM","resize":{"rows":1,"cols":1}}`,
		`{}`,
		`{"signal":"KILL"} {}`,
		`{"signal":"KILL","pid":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		c, err := agent.DecodeControl(payload)
		if err != nil {
			var e *sandbox.Error
			if !errors.As(err, &e) || e.Code != sandbox.CodeInvalidArgument {
				t.Fatalf("DecodeControl error %v is not an invalid_argument *sandbox.Error", err)
			}
			return
		}
		// A decoded control is valid and re-encodes to itself.
		if err := c.Validate(); err != nil {
			t.Fatalf("DecodeControl(%q) = %+v, which Validate refuses: %v", payload, c, err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := agent.DecodeControl(b)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("DecodeControl(%s) = %+v, %v; want %+v", b, again, err, c)
		}
	})
}
