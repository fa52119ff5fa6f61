package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestSpritesJSClient runs testdata/sprites/client.mjs, a client written
// with the official Sprites JavaScript SDK (@fly/sprites), with Node 22
// against a real daemon per runtime, as an existing Sprites user would
// after changing only the base URL and the token: with an agent's token it
// creates, gets, lists and deletes sprites; execs with separate streams
// and exit code, env, dir, stdin, a TTY and a command silent for 50s
// (the SDK drops a socket that carries no message for 45s); writes,
// reads, lists and deletes files; checkpoints, changes a file and
// restores it; and sets and reads a network policy. The script prints one line per step and stops at the
// first mismatch, which the failure quotes first.
func TestSpritesJSClient(t *testing.T) {
	requireDaemon(t)
	node, prefix := npmPackages(t, "HEARTH_SPRITES_JS", "sprites-js", "@fly/sprites")
	script, err := filepath.Abs(filepath.Join("testdata", "sprites", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		// The script holds two sprites at once; the quota leaves room.
		tok := d.agentToken(t, "acme", "jsclient", 4)

		runNodeScript(t, node, script, 15*time.Minute,
			"HEARTH_SPRITES_URL="+d.URL, "HEARTH_TOKEN="+tok, "HEARTH_SPRITES_JS="+prefix)
	})
}

// failLineRE matches the line client.mjs prints for the step that failed.
var failLineRE = regexp.MustCompile(`(?m)^(FAIL .*)$`)

// runNodeScript runs script with Node, its environment this process's and
// env, for at most timeout, failing t with the step the script's FAIL
// line names (failLineRE) and logging its output.
func runNodeScript(t *testing.T, node, script string, timeout time.Duration, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		failed := "the script stopped without naming a failed step"
		if m := failLineRE.FindSubmatch(out); m != nil {
			failed = string(m[1])
		}
		t.Fatalf("%s\nnode %s: %v; its output:\n%s", failed, filepath.Base(script), err, out)
	}
	t.Logf("%s", out)
}
