package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

func TestReportEveryCode(t *testing.T) {
	for _, code := range sandbox.Codes() {
		t.Run(string(code), func(t *testing.T) {
			e := sandbox.Errorf(code, "it went %s", code).WithHint("do the thing").With("limit", 5)
			wrapped := fmt.Errorf("create: %w", e)

			var human bytes.Buffer
			c := &cli{stderr: &human, getenv: noEnv, tokenSource: "HEARTH_TOKEN"}
			if got, want := c.report(context.Background(), wrapped), code.ExitCode(); got != want {
				t.Errorf("report(%s) = %d, want %d", code, got, want)
			}
			if got, want := human.String(), fmt.Sprintf("error: it went %s\nhint: do the thing\n", code); got != want {
				t.Errorf("report(%s) wrote %q, want %q", code, got, want)
			}

			var js bytes.Buffer
			c = &cli{stderr: &js, getenv: noEnv, json: true, tokenSource: "HEARTH_TOKEN"}
			if got, want := c.report(context.Background(), wrapped), code.ExitCode(); got != want {
				t.Errorf("report(%s, json) = %d, want %d", code, got, want)
			}
			var body struct {
				Error struct {
					Code    sandbox.Code   `json:"code"`
					Message string         `json:"message"`
					Hint    string         `json:"hint"`
					Details map[string]any `json:"details"`
				} `json:"error"`
			}
			if err := json.Unmarshal(js.Bytes(), &body); err != nil {
				t.Fatalf("report(%s, json) wrote %q: %v", code, js.String(), err)
			}
			if body.Error.Code != code || body.Error.Message != e.Message || body.Error.Hint != "do the thing" || body.Error.Details["limit"] != 5.0 {
				t.Errorf("report(%s, json) = %+v", code, body.Error)
			}
		})
	}
}

func TestReportShapes(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		json     bool
		wantCode int
		wantOut  string
	}{
		{name: "nil", err: nil, wantCode: 0},
		{name: "help", err: errHelpShown, wantCode: 0},
		{name: "exit status", err: exitStatus(3), wantCode: 3},
		{
			name: "usage", err: &usageError{verb: "get", msg: "missing NAME"}, wantCode: 2,
			wantOut: "error: missing NAME\nhint: run 'hearth get -h' for usage\n",
		},
		{
			name: "usage json", err: &usageError{verb: "get", msg: "missing NAME"}, json: true, wantCode: 2,
			wantOut: `{"error":{"code":"invalid_argument","message":"missing NAME","hint":"run 'hearth get -h' for usage","details":{}}}` + "\n",
		},
		{
			name: "no hint", err: sandbox.Errorf(sandbox.CodeNotFound, "no sandbox x"), wantCode: 13,
			wantOut: "error: no sandbox x\n",
		},
		{
			name: "no hint json", err: sandbox.Errorf(sandbox.CodeNotFound, "no sandbox x"), json: true, wantCode: 13,
			wantOut: `{"error":{"code":"not_found","message":"no sandbox x","hint":"","details":{}}}` + "\n",
		},
		{
			name: "local error keeps its text", err: errors.New("hearth: exec: reading stdin: input/output error"), wantCode: 22,
			wantOut: "error: hearth: exec: reading stdin: input/output error\nhint: this failed in the local hearth process (its stdin, stdout or files), not in the daemon\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			c := &cli{stderr: &out, getenv: noEnv, json: tt.json}
			if got := c.report(context.Background(), tt.err); got != tt.wantCode {
				t.Errorf("report(%v) = %d, want %d", tt.err, got, tt.wantCode)
			}
			if out.String() != tt.wantOut {
				t.Errorf("report(%v) wrote %q, want %q", tt.err, out.String(), tt.wantOut)
			}
		})
	}
}

func TestReportInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	c := &cli{stderr: &out, getenv: noEnv}
	if got := c.report(ctx, fmt.Errorf("exec: %w", context.Canceled)); got != exitInterrupted {
		t.Errorf("report(canceled) = %d, want %d", got, exitInterrupted)
	}
}

func TestReportUnauthenticatedWithoutToken(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stderr: &out, getenv: func(k string) string {
		if k == "HEARTH_DATA_DIR" {
			return "/d"
		}
		return ""
	}}
	err := sandbox.Errorf(sandbox.CodeUnauthenticated, "missing or invalid token").WithHint("server hint")
	if got, want := c.report(context.Background(), err), sandbox.CodeUnauthenticated.ExitCode(); got != want {
		t.Errorf("report = %d, want %d", got, want)
	}
	want := "error: missing or invalid token\nhint: no token was sent: set HEARTH_TOKEN or --token (the local daemon's operator token is in its data dir, /d/operator.token)\n"
	if out.String() != want {
		t.Errorf("report wrote %q, want %q", out.String(), want)
	}
}
