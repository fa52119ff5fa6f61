package e2e_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecrets: a tenant admin stores a secret from stdin; a command that
// names it gets it in its environment; its output comes back scrubbed; and
// the value is nowhere on the host's disk (the data dir: the database, the
// sandbox's root, the logs), in the audit log or in the daemon's output.
func TestSecrets(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])
	const value = "sk-e2e-5b1f0c7d9a3e"
	mustCLI := func(token, stdin string, args ...string) string {
		t.Helper()
		out, errOut, code := d.CLIAs(token, stdin, args...)
		if code != 0 {
			t.Fatalf("hearth %q = %d %q %q", args, code, out, errOut)
		}
		return out
	}
	mustCLI(d.Token, "", "tenant", "create", "acme", "--cpu", "64", "--memory", "256GiB", "--disk", "1TiB")
	mustCLI(d.Token, "", "agent", "create", "boss", "--tenant", "acme")
	mustCLI(d.Token, "", "agent", "create", "bot", "--tenant", "acme")
	admin := strings.TrimSpace(mustCLI(d.Token, "", "token", "create", "--tenant", "acme", "--agent", "boss", "--role", "tenant-admin"))
	bot := strings.TrimSpace(mustCLI(d.Token, "", "token", "create", "--tenant", "acme", "--agent", "bot"))

	mustCLI(admin, value+"\n", "secret", "set", "API_KEY")
	if out := mustCLI(bot, "", "secret", "list"); !strings.Contains(out, "API_KEY") || strings.Contains(out, value) {
		t.Errorf("hearth secret list as the agent = %q", out)
	}
	mustCLI(bot, "", "create", "job")
	sum := sha256.Sum256([]byte(value))
	stdout, stderr, code := d.CLIAs(bot, "", "exec", "job", "--secret", "API_KEY", "--shell", "--",
		`printf %s "$API_KEY" | sha256sum | cut -c1-64; echo "key=$API_KEY"; echo "err=$API_KEY" >&2`)
	if code != 0 || stdout != hex.EncodeToString(sum[:])+"\nkey=[secret API_KEY]\n" || stderr != "err=[secret API_KEY]\n" {
		t.Fatalf("exec with the secret = %d %q %q; want its hash computed inside and the value scrubbed", code, stdout, stderr)
	}
	if out, _, _ := d.CLIAs(bot, "", "exec", "job", "--shell", "--", `echo "[$API_KEY]"`); out != "[]\n" {
		t.Errorf("the next command's API_KEY = %q, want none", out)
	}

	audit, _, _ := d.CLI("", "audit", "--json")
	for where, text := range map[string]string{"the audit log": audit, "the daemon's output": d.Out.String()} {
		if strings.Contains(text, value) {
			t.Errorf("the secret's value is in %s", where)
		}
	}
	if !strings.Contains(audit, `"sandbox.exec"`) {
		t.Errorf("the audit log has no exec: %q", audit)
	}
	// Every file under the data dir, the sandbox's root (mounted below it)
	// included; not the layer store's sparse backing file, whose live
	// blocks are the files walked here.
	err := filepath.WalkDir(d.DataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || e.Name() == "layers.btrfs" {
			return nil // a file that went away, a socket, a device
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(value)) {
			t.Errorf("the secret's value is on disk in %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
