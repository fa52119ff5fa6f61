package main

import (
	"encoding/json"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

func TestExecExitCode(t *testing.T) {
	tests := []struct {
		name string
		res  sandbox.ExecResult
		want int
	}{
		{"success", sandbox.ExecResult{ExitCode: 0}, 0},
		{"failure", sandbox.ExecResult{ExitCode: 1}, 1},
		{"passthrough", sandbox.ExecResult{ExitCode: 42}, 42},
		{"hearth-like code is still the command's", sandbox.ExecResult{ExitCode: 13}, 13},
		{"shell not found", sandbox.ExecResult{ExitCode: 127}, 127},
		{"SIGKILL", sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL"}, 137},
		{"SIGTERM", sandbox.ExecResult{ExitCode: -1, Signal: "SIGTERM"}, 143},
		{"SIGINT short name", sandbox.ExecResult{ExitCode: -1, Signal: "INT"}, 130},
		{"SIGSEGV", sandbox.ExecResult{ExitCode: -1, Signal: "SIGSEGV"}, 139},
		{"SIGSYS", sandbox.ExecResult{ExitCode: -1, Signal: "SIGSYS"}, 159},
		{"unnamed signal", sandbox.ExecResult{ExitCode: -1, Signal: "signal 34"}, 162},
		{"unknown signal", sandbox.ExecResult{ExitCode: -1, Signal: "SIGWAT"}, 128},
		{"timed out", sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}, 124},
		{"timed out without signal", sandbox.ExecResult{ExitCode: -1, TimedOut: true}, 124},
		{"OOM with signal", sandbox.ExecResult{ExitCode: -1, Signal: "SIGKILL", OOMKilled: true}, 137},
		{"OOM without signal", sandbox.ExecResult{ExitCode: -1, OOMKilled: true}, 137},
		{"OOM but the command exited", sandbox.ExecResult{ExitCode: 3, OOMKilled: true}, 3},
		{"negative without signal", sandbox.ExecResult{ExitCode: -1}, 255},
		{"out of range", sandbox.ExecResult{ExitCode: 300}, 255},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := execExitCode(tt.res); got != tt.want {
				t.Errorf("execExitCode(%+v) = %d, want %d", tt.res, got, tt.want)
			}
		})
	}
}

func TestExecJSON(t *testing.T) {
	res := sandbox.ExecResult{ExitCode: 2, DurationMs: 15}
	out, err := execJSON(res, []byte("héllo\n"), []byte{0xff, 0x00, 'x'})
	if err != nil {
		t.Fatal(err)
	}
	got := mustJSON(t, out)
	want := `{"duration_ms":15,"exit_code":2,"oom_killed":false,"stderr_base64":"/wB4","stdout":"héllo\n","timed_out":false}`
	if got != want {
		t.Errorf("execJSON() = %s, want %s", got, want)
	}
}

func TestEnvFlag(t *testing.T) {
	e := envFlag{}
	for _, s := range []string{"B=2", "A=1", "C=", "D=x=y"} {
		if err := e.Set(s); err != nil {
			t.Fatalf("Set(%q) = %v", s, err)
		}
	}
	if got, want := e.String(), "A=1,B=2,C=,D=x=y"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, s := range []string{"A", "=1", ""} {
		if err := e.Set(s); err == nil {
			t.Errorf("Set(%q) = nil, want an error", s)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
