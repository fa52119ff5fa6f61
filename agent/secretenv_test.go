package agent_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

// secretValue returns a random secret value of n bytes with no NUL and no
// newline.
func secretValue(t testing.TB, n int) []byte {
	t.Helper()
	v := randomBytes(t, n)
	for i := range v {
		v[i] = 'A' + v[i]%26
	}
	return v
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestExecSecrets: secrets reach the command's environment, over the
// sandbox's and the request's variables of the same name, with or without
// rlimits (tracing), a terminal, or a #! script (whose argv the kernel
// rewrites); other variables stay as they are.
func TestExecSecrets(t *testing.T) {
	k, l := secretValue(t, 48), secretValue(t, 70000%sandbox.MaxSecretLen)
	secrets := []agent.Secret{{Name: "K", Value: k}, {Name: "A", Value: l}} // A is in the sandbox's env too
	const script = `printf %s "$K" | sha256sum | cut -c1-64; printf %s "$A" | sha256sum | cut -c1-64; echo "$B $X"`
	want := sha256Hex(k) + "\n" + sha256Hex(l) + "\n2 y\n"
	for _, opts := range []struct {
		name string
		o    agent.Options
	}{{"untraced otherwise", agent.Options{}}, {"with rlimits", agent.Options{NProc: 1000}}} {
		t.Run(opts.name, func(t *testing.T) {
			c, home := startServer(t, opts.o)
			ctx := ctxT(t, 20*time.Second)
			run := func(t *testing.T, req sandbox.ExecRequest, wantOut string) {
				t.Helper()
				var out bytes.Buffer
				res, err := c.ExecSecrets(ctx, req, secrets, nil, &out, &out)
				if err != nil || res.ExitCode != 0 || strings.ReplaceAll(out.String(), "\r\n", "\n") != wantOut {
					t.Errorf("ExecSecrets(%+v) = %+v, %v, %q; want %q", req, res, err, out.String(), wantOut)
				}
			}
			t.Run("shell", func(t *testing.T) {
				run(t, sandbox.ExecRequest{Shell: script, Env: map[string]string{"K": "plain", "X": "y"}}, want)
			})
			t.Run("terminal", func(t *testing.T) {
				run(t, sandbox.ExecRequest{Shell: script, Env: map[string]string{"X": "y"}, TTY: &sandbox.TTYSize{}}, want)
			})
			t.Run("#! script", func(t *testing.T) {
				writeFile(t, filepath.Join(home, "s.sh"), []byte("#!/bin/sh\n"+script+"\n"), 0o755)
				run(t, sandbox.ExecRequest{Argv: []string{"./s.sh", "one", "two"}, Env: map[string]string{"X": "y"}}, want)
			})
			t.Run("the next command has none", func(t *testing.T) {
				var out bytes.Buffer
				if _, err := c.Exec(ctx, sandbox.ExecRequest{Shell: `echo "[$K]"`}, nil, &out, nil); err != nil || out.String() != "[]\n" {
					t.Errorf("the next command's K = %q, %v", out.String(), err)
				}
			})
		})
	}
	if !bytes.Equal(k, secrets[0].Value) {
		t.Errorf("ExecSecrets changed the caller's value")
	}
}

// TestExecSecretsRefused: a secret the agent cannot put in an environment
// is invalid_argument, and the command does not run.
func TestExecSecretsRefused(t *testing.T) {
	c, home := startServer(t, agent.Options{})
	ctx := ctxT(t, 10*time.Second)
	marker := filepath.Join(home, "ran")
	for _, tc := range []struct {
		name    string
		secrets []agent.Secret
		req     sandbox.ExecRequest
	}{
		{"NUL in a value", []agent.Secret{{Name: "K", Value: []byte("ab\x00cd")}}, sandbox.ExecRequest{Shell: "touch " + marker}},
		{"bad name", []agent.Secret{{Name: "K=V", Value: []byte("abcd")}}, sandbox.ExecRequest{Shell: "touch " + marker}},
		{"named twice", []agent.Secret{{Name: "K", Value: []byte("abcd")}, {Name: "K", Value: []byte("efgh")}}, sandbox.ExecRequest{Shell: "touch " + marker}},
		{"names in the request", nil, sandbox.ExecRequest{Shell: "touch " + marker, Secrets: []string{"K"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marker)
			_, err := c.ExecSecrets(ctx, tc.req, tc.secrets, nil, nil, nil)
			wantCode(t, err, sandbox.CodeInvalidArgument)
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command ran")
			}
		})
	}
}

// TestExecSecretsWiped: once a command with a secret has run, the agent's
// memory (a process of its own here, as in a sandbox) holds no copy of
// the value: not in the request, not in the environment it built.
func TestExecSecretsWiped(t *testing.T) {
	c, _ := startPID1(t)
	ctx := ctxT(t, 20*time.Second)
	ping, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	value := secretValue(t, 40)
	for range 3 {
		var out bytes.Buffer
		res, err := c.ExecSecrets(ctx, sandbox.ExecRequest{Shell: `printf %s "$K" | sha256sum | cut -c1-64`},
			[]agent.Secret{{Name: "K", Value: value}}, nil, &out, nil)
		if err != nil || res.ExitCode != 0 || out.String() != sha256Hex(value)+"\n" {
			t.Fatalf("ExecSecrets = %+v, %v, %q", res, err, out.String())
		}
	}
	if n := countInProcess(t, ping.PID, value); n != 0 {
		t.Errorf("the agent's memory holds %d copies of the secret's value after the commands", n)
	}
	// The search finds what is there: a value in the agent's
	// environment-to-be (a request's env) is seen.
	// (A context of its own: reading the whole memory of this race-built
	// process takes seconds, more on a loaded machine.)
	probe := secretValue(t, 40)
	if _, err := c.Exec(ctxT(t, 20*time.Second), sandbox.ExecRequest{Shell: "true", Env: map[string]string{"P": string(probe)}}, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := countInProcess(t, ping.PID, probe); n == 0 {
		t.Errorf("the memory search does not find a value given in a request's env")
	}
}

// countInProcess counts needle in the readable private mappings of pid.
func countInProcess(t *testing.T, pid int, needle []byte) int {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	maps, err := os.ReadFile(dir + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(dir + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	n := 0
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || strings.Contains(line, "[vvar") || strings.Contains(line, "[vsyscall]") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start || end-start > 1<<30 {
			continue
		}
		b, err := io.ReadAll(io.NewSectionReader(mem, int64(start), int64(end-start)))
		if err != nil && len(b) == 0 {
			continue
		}
		n += bytes.Count(b, needle)
	}
	return n
}
