package sandbox_test

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"build-42", true},
		{"0abc", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"-lead", false},
		{"trail-", false},
		{"Upper", false},
		{"under_score", false},
		{"dot.ted", false},
		{"sp ace", false},
		{"ünï", false},
		{"../etc", false},
		{"a/b", false},
	}
	for _, tt := range tests {
		err := sandbox.ValidateName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && (!sandbox.IsCode(err, sandbox.CodeInvalidArgument) || sandbox.AsError(err).Hint == "") {
			t.Errorf("ValidateName(%q) = %#v, want invalid_argument with a hint", tt.name, err)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "build-42", "-x", "A", "é", strings.Repeat("z", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if sandbox.ValidateName(name) != nil {
			return
		}
		if len(name) == 0 || len(name) > 63 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || name[0] == '-' || name[len(name)-1] == '-' {
			t.Fatalf("ValidateName(%q) accepted a name that is not a DNS label", name)
		}
	})
}

// TestCodeTable checks that every code has a distinct exit code, an error
// status, and maps back from its HTTP status where that is unambiguous.
func TestCodeTable(t *testing.T) {
	seen := map[int]sandbox.Code{}
	for _, c := range sandbox.Codes() {
		if !c.Valid() {
			t.Errorf("%s not valid", c)
		}
		if c.HTTPStatus() < 400 {
			t.Errorf("%s.HTTPStatus() = %d, want an error status", c, c.HTTPStatus())
		}
		if other, dup := seen[c.ExitCode()]; dup {
			t.Errorf("%s and %s share exit code %d", c, other, c.ExitCode())
		}
		seen[c.ExitCode()] = c
		if c.ExitCode() < 10 || c.ExitCode() > 125 {
			t.Errorf("%s.ExitCode() = %d, want 10..125 (clear of commands' and shells' codes)", c, c.ExitCode())
		}
	}
	for status, want := range map[int]sandbox.Code{
		http.StatusNotFound: sandbox.CodeNotFound, http.StatusUnauthorized: sandbox.CodeUnauthenticated,
		http.StatusRequestEntityTooLarge: sandbox.CodeTooLarge, http.StatusTeapot: sandbox.CodeInternal,
	} {
		if got := sandbox.CodeForHTTPStatus(status); got != want {
			t.Errorf("CodeForHTTPStatus(%d) = %s, want %s", status, got, want)
		}
	}
	if sandbox.Code("bogus").Valid() || sandbox.Code("bogus").HTTPStatus() != 500 {
		t.Error("an unknown code must be invalid and render as 500")
	}
}

func TestAsErrorHidesCauses(t *testing.T) {
	err := sandbox.AsError(errString("open /var/lib/hearth/secret: permission denied"))
	if err.Code != sandbox.CodeInternal || strings.Contains(err.Message, "/var/lib") {
		t.Fatalf("AsError(plain) = %+v, want internal without the cause", err)
	}
	e := sandbox.Errorf(sandbox.CodeQuotaExceeded, "quota exceeded: %d of %d", 5, 5).WithHint("destroy one or wait").With("limit", 5)
	if got := sandbox.AsError(e); got != e || got.Details["limit"] != 5 || got.Error() != "quota exceeded: 5 of 5; destroy one or wait" {
		t.Fatalf("AsError(*Error) = %+v, %q", got, got.Error())
	}
	if sandbox.AsError(nil) != nil || sandbox.ErrorCode(nil) != "" {
		t.Fatal("nil must stay nil")
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{`"90s"`: 90 * time.Second, `"1h30m"`: 90 * time.Minute, `5`: 5 * time.Second, `0.5`: 500 * time.Millisecond} {
		var d sandbox.Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, in := range []string{`"soon"`, `true`, `{}`} {
		var d sandbox.Duration
		if err := json.Unmarshal([]byte(in), &d); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("Unmarshal(%s) = %v; want invalid_argument", in, err)
		}
	}
	b, _ := json.Marshal(sandbox.Duration(90 * time.Second))
	if string(b) != `"1m30s"` {
		t.Errorf("Marshal(90s) = %s", b)
	}
}

// TestDurationTooLong: a duration beyond what a time.Duration holds is
// refused as too long, with the limit, rather than wrapping around into a
// negative or short one; the longest that fits is taken.
func TestDurationTooLong(t *testing.T) {
	for _, in := range []string{`1e30`, `-1e30`, `1e300`, `1e400`, `9223372037`, `"9999999999h"`, `"-9999999999h"`, `"2562048h"`} {
		var d sandbox.Duration
		err := json.Unmarshal([]byte(in), &d)
		se := sandbox.AsError(err)
		if err == nil || se.Code != sandbox.CodeInvalidArgument || !strings.Contains(se.Message, "too long") || se.Details["max_seconds"] != int64(9223372036) {
			t.Errorf("Unmarshal(%s) = %v (%v), %v; want invalid_argument: too long, max_seconds 9223372036", in, time.Duration(d), d, err)
		}
	}
	for in, want := range map[string]time.Duration{`9223372036`: 9223372036 * time.Second, `"2562047h"`: 2562047 * time.Hour, `-5`: -5 * time.Second} {
		var d sandbox.Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, in := range []string{`"1.5.5h"`, `"1e3h"`, `"h"`} {
		var d sandbox.Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil || strings.Contains(err.Error(), "too long") {
			t.Errorf("Unmarshal(%s) = %v; want invalid, not too long", in, err)
		}
	}
}

// TestExecValidateShellSize: a script that follows its request takes the
// place of argv and shell, and has its limit.
func TestExecValidateShellSize(t *testing.T) {
	for _, tt := range []struct {
		req  sandbox.ExecRequest
		code sandbox.Code
	}{
		{sandbox.ExecRequest{ShellSize: 1}, ""},
		{sandbox.ExecRequest{ShellSize: sandbox.MaxScriptBytes}, ""},
		{sandbox.ExecRequest{ShellSize: sandbox.MaxScriptBytes + 1}, sandbox.CodeTooLarge},
		{sandbox.ExecRequest{ShellSize: -1}, sandbox.CodeInvalidArgument},
		{sandbox.ExecRequest{ShellSize: 5, Shell: "x"}, sandbox.CodeInvalidArgument},
		{sandbox.ExecRequest{ShellSize: 5, Argv: []string{"x"}}, sandbox.CodeInvalidArgument},
	} {
		err := tt.req.Validate()
		if tt.code == "" && err != nil || tt.code != "" && !sandbox.IsCode(err, tt.code) {
			t.Errorf("Validate(%+v) = %v; want %q", tt.req, err, tt.code)
		}
	}
}

func TestExecValidate(t *testing.T) {
	tests := []struct {
		name string
		req  sandbox.ExecRequest
		ok   bool
	}{
		{"argv", sandbox.ExecRequest{Argv: []string{"true"}}, true},
		{"shell", sandbox.ExecRequest{Shell: "true"}, true},
		{"neither", sandbox.ExecRequest{}, false},
		{"both", sandbox.ExecRequest{Argv: []string{"true"}, Shell: "true"}, false},
		{"empty argv0", sandbox.ExecRequest{Argv: []string{""}}, false},
		{"nul in argv", sandbox.ExecRequest{Argv: []string{"echo", "a\x00b"}}, false},
		{"negative timeout", sandbox.ExecRequest{Argv: []string{"true"}, Timeout: -1}, false},
		{"env with =", sandbox.ExecRequest{Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}, false},
		{"empty env name", sandbox.ExecRequest{Argv: []string{"true"}, Env: map[string]string{"": "c"}}, false},
		{"nul in cwd", sandbox.ExecRequest{Argv: []string{"true"}, Cwd: "/a\x00"}, false},
	}
	for _, tt := range tests {
		err := tt.req.Validate()
		if (err == nil) != tt.ok || err != nil && !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestOwns(t *testing.T) {
	op := sandbox.Principal{Tenant: "system", Agent: "op", Role: sandbox.RoleOperator}
	admin := sandbox.Principal{Tenant: "acme", Agent: "boss", Role: sandbox.RoleTenantAdmin}
	agent := sandbox.Principal{Tenant: "acme", Agent: "a1", Role: sandbox.RoleAgent}
	tests := []struct {
		p             sandbox.Principal
		tenant, owner string
		want          bool
	}{
		{op, "other", "x", true},
		{admin, "acme", "a2", true},
		{admin, "other", "a1", false},
		{agent, "acme", "a1", true},
		{agent, "acme", "a2", false},
		{agent, "other", "a1", false},
	}
	for _, tt := range tests {
		if got := tt.p.Owns(tt.tenant, tt.owner); got != tt.want {
			t.Errorf("%+v.Owns(%s, %s) = %v, want %v", tt.p, tt.tenant, tt.owner, got, tt.want)
		}
	}
}

func TestLookupSize(t *testing.T) {
	r, err := sandbox.LookupSize(sandbox.DefaultSize)
	if err != nil || r.MemoryBytes <= 0 || r.MilliCPU <= 0 || r.Pids <= 0 {
		t.Fatalf("LookupSize(default) = %+v, %v", r, err)
	}
	_, err = sandbox.LookupSize("huge")
	if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) || !strings.Contains(sandbox.AsError(err).Hint, "small") {
		t.Fatalf("LookupSize(huge) = %v; want invalid_argument listing the sizes", err)
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in   string
		want fs.FileMode
		ok   bool
	}{
		{"755", 0o755, true},
		{"0644", 0o644, true},
		{"0o750", 0o750, true},
		{"4755", fs.ModeSetuid | 0o755, true},
		{"2775", fs.ModeSetgid | 0o775, true},
		{"1777", fs.ModeSticky | 0o777, true},
		{"", 0, false},
		{"0o", 0, false},
		{"888", 0, false},
		{"17777", 0, false},
		{"-1", 0, false},
		{"rwx", 0, false},
	}
	for _, tt := range tests {
		got, err := sandbox.ParseMode(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseMode(%q) = %v, %v, want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("ParseMode(%q) = %v, want invalid_argument", tt.in, err)
		}
	}
}

func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"755", "4755", "0o1777", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := sandbox.ParseMode(s)
		if err != nil {
			return
		}
		back, err := sandbox.ParseMode(sandbox.FormatMode(m))
		if err != nil || back != m {
			t.Fatalf("ParseMode(FormatMode(%v)) = %v, %v, want %v", m, back, err, m)
		}
	})
}
