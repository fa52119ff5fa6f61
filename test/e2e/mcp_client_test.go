package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestMCPClientJS runs testdata/mcp-client.mjs, a client written with the
// official TypeScript SDK, with Node 22 against a real daemon and runtime:
// over Streamable HTTP with an agent's bearer token it calls the six tools
// end to end (exec with progress, checkpoint and restore of a changed
// file) and hits the agent's quota, whose text must be the CLI's.
func TestMCPClientJS(t *testing.T) {
	requireDaemon(t)
	node, prefix := nodeJS(t)
	d := newDaemon(t, bins.Runtimes[0])
	ctx := ctxT(t)
	tok := d.agentToken(t, "acme", "bot", 1)

	// What the CLI prints when the agent, with its one sandbox in use,
	// creates another: the script must get the same words over MCP.
	if _, stderr, code := d.CLIAs(tok, "", "create", "probe"); code != 0 {
		t.Fatalf("hearth create probe = %d %q", code, stderr)
	}
	_, quotaText, code := d.CLIAs(tok, "", "create", "probe2")
	if want := "error: quota exceeded: 1 of 1 sandboxes in use for agent-bot\nhint: destroy one or wait\n"; code != sandbox.CodeQuotaExceeded.ExitCode() || quotaText != want {
		t.Fatalf("hearth create probe2 over the quota = %d %q; want %q", code, quotaText, want)
	}
	if _, stderr, code := d.CLIAs(tok, "", "destroy", "probe"); code != 0 {
		t.Fatalf("hearth destroy probe = %d %q", code, stderr)
	}

	script, err := filepath.Abs(filepath.Join("testdata", "mcp-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, node, script)
	cmd.Env = append(os.Environ(),
		"HEARTH_MCP_URL="+d.URL+"/mcp", "HEARTH_TOKEN="+tok, "HEARTH_MCP_JS="+prefix, "HEARTH_QUOTA_TEXT="+quotaText)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", filepath.Base(script), err, out)
	}
	t.Logf("%s", out)
}
