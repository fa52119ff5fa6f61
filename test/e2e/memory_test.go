package e2e_test

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// TestMemoryLimit: on every runtime a small sandbox's 512 MiB ends the
// command that goes over it (oom_killed, and the sandbox's reason says
// so), never the sandbox, also when several commands go over at once; and
// it refuses no program for reserving more address space than it uses
// (Node reserves gigabytes for one WebAssembly memory).
func TestMemoryLimit(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "mem"}); err != nil {
			t.Fatal(err)
		}
		run := func(req sandbox.ExecRequest, stdin *os.File) (sandbox.ExecResult, string) {
			t.Helper()
			var out, errb bytes.Buffer
			var res sandbox.ExecResult
			var err error
			if stdin != nil {
				req.Stdin = true
				res, err = c.Exec(ctx, "mem", req, stdin, &out, &errb)
			} else {
				res, err = c.Exec(ctx, "mem", req, nil, &out, &errb)
			}
			if err != nil {
				t.Fatalf("Exec(%+v) = %v", req, err)
			}
			return res, out.String() + errb.String()
		}
		alive := func(after string) {
			t.Helper()
			if res, out := run(sandbox.ExecRequest{Shell: "echo still here"}, nil); res.ExitCode != 0 || out != "still here\n" {
				t.Fatalf("the sandbox after %s: %+v, %q", after, res, out)
			}
			if sb, err := c.Get(ctx, "mem"); err != nil || sb.Status != sandbox.StatusRunning {
				t.Fatalf("the sandbox after %s = %+v, %v; want it running", after, sb, err)
			}
		}
		hog := sandbox.ExecRequest{Argv: []string{"python3", "-c", "b = bytearray(1500 << 20); b[::4096] = b'x' * len(b[::4096]); print('survived')"},
			Timeout: sandbox.Duration(time.Minute)}
		if res, out := run(hog, nil); !res.OOMKilled || res.Signal != "SIGKILL" || strings.Contains(out, "survived") {
			t.Fatalf("a 1.5 GiB allocation in a 512 MiB sandbox = %+v, %q; want it oom_killed", res, out)
		}
		if sb, err := c.Get(ctx, "mem"); err != nil || !strings.HasPrefix(sb.Reason, "oom") {
			t.Fatalf("status after an OOM kill = %+v, %v; want the reason to say oom", sb, err)
		}
		alive("a memory hog")

		// Four commands that each fit but together do not: some are
		// killed, the sandbox lives.
		res, _ := run(sandbox.ExecRequest{Shell: `for i in 1 2 3 4; do python3 -c 'x = b"x" * (400 << 20); import time; time.sleep(3)' & done; wait`,
			Timeout: sandbox.Duration(time.Minute)}, nil)
		if res.TimedOut {
			t.Fatalf("four hogs = %+v", res)
		}
		if runtime == "runsc" {
			settle(t, c, "mem")
		}
		alive("four hogs at once")

		t.Run("node", func(t *testing.T) {
			node, _ := npmPackages(t, "HEARTH_NPM_UNUSED", "node22")
			f, err := os.Open(node)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if res, out := run(sandbox.ExecRequest{Shell: "cat > node && chmod +x node"}, f); res.ExitCode != 0 {
				t.Fatalf("copying Node in = %+v, %q", res, out)
			}
			wasm := "const m = new WebAssembly.Memory({initial: 1, maximum: 65536}); console.log(m.buffer.byteLength)"
			if res, out := run(sandbox.ExecRequest{Argv: []string{"./node", "-e", wasm}}, nil); res.ExitCode != 0 || out != "65536\n" {
				t.Fatalf("node with a WebAssembly memory in a 512 MiB sandbox = %+v, %q", res, out)
			}
			nodeHog := sandbox.ExecRequest{Argv: []string{"./node", "-e", "const a = []; for (;;) a.push(Buffer.alloc(64 << 20, 1))"},
				Timeout: sandbox.Duration(time.Minute)}
			if res, out := run(nodeHog, nil); !res.OOMKilled {
				t.Fatalf("a Node hog = %+v, %q; want it oom_killed", res, out)
			}
			alive("a Node hog")
		})
	})
}

// settle waits (at most a minute) until gVisor's accounting of sandbox
// name's memory (its /proc/meminfo; under runc that is the host's) says
// less than half of it is used: after hogs were killed, what they held
// returns to the host a moment later, and a command started meanwhile may
// be the one the host's limit ends.
func settle(t *testing.T, c *client.Client, name string) {
	t.Helper()
	ctx := ctxT(t)
	probe := sandbox.ExecRequest{Shell: `awk '/MemTotal/ {t=$2} /MemAvailable/ {a=$2} END {print (t-a) * 1024}' /proc/meminfo`}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var out bytes.Buffer
		res, err := c.Exec(ctx, name, probe, nil, &out, nil)
		if err != nil {
			t.Fatalf("exec in %s while it settles: %v", name, err)
		}
		if used, perr := strconv.ParseFloat(strings.TrimSpace(out.String()), 64); res.ExitCode == 0 && perr == nil && used < 256<<20 {
			return
		}
	}
	t.Fatalf("%s's memory did not settle under 256 MiB within a minute", name)
}
