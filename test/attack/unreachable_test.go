package attack_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
)

// TestCutAgentChannel: root in a gVisor sandbox (here by runsc's own exec,
// as an image with sudo would give it) removes its agent's socket from the
// directory it shares with the host. That cuts only its own channel: the
// sandbox's status says so once the sweep or a call notices, instead of
// "running" for ever, and the next call starts it again on its root, with
// its files; the other tenant's sandbox is untouched throughout.
func TestCutAgentChannel(t *testing.T) {
	b := daemonproc.Require(t)
	if !slices.Contains(b.Runtimes, "runsc") {
		t.Skip("only gVisor's agent shares a socket directory with its sandbox")
	}
	// The sweep runs every quarter of the idle timeout: every 10 s here,
	// while nothing idles long enough to sleep.
	d := daemonproc.New(t, "runsc", "--idle-timeout", "40s")
	ctx := ctxT(t)
	mallory := client.New(d.URL, tenantToken(t, d, "mallory"), nil)
	alice := client.New(d.URL, tenantToken(t, d, "alice"), nil)
	sb, _, err := mallory.Create(ctx, sandbox.CreateRequest{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := alice.Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	shell(t, mallory, "box", "echo kept > f")
	shell(t, alice, "web", "echo alice > f")

	root := filepath.Join(d.DataDir, "oci", "runsc", "sandboxes", sb.ID, "runtime")
	if out, err := exec.Command("runsc", "--root", root, "exec", "--user", "0:0", sb.ID, "rm", "-f", "/run/hearth/agent.sock").CombinedOutput(); err != nil {
		t.Fatalf("root inside removing the agent's socket: %v: %s", err, out)
	}

	// The sweep notices within a few of its rounds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := mallory.Get(ctx, "box")
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == sandbox.StatusStopped && strings.Contains(got.Reason, "could not be reached") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after its agent's socket went, the sandbox is %s (%q); want stopped, saying its agent could not be reached", got.Status, got.Reason)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The next call starts it again, files and all.
	if out := shell(t, mallory, "box", "cat f"); out != "kept\n" {
		t.Errorf("cat f after the restart = %q, want kept", out)
	}
	if got, err := mallory.Get(ctx, "box"); err != nil || got.Status != sandbox.StatusRunning {
		t.Errorf("after the call the sandbox is %+v, %v; want running", got, err)
	}
	// The other tenant's sandbox never noticed.
	if got, err := alice.Get(ctx, "web"); err != nil || got.Status != sandbox.StatusRunning || got.Reason != "created" {
		t.Errorf("the other tenant's sandbox = %+v, %v; want running since its create", got, err)
	}
	if out := shell(t, alice, "web", "cat f"); out != "alice\n" {
		t.Errorf("the other tenant's file = %q", out)
	}
}
