package oci_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/sandbox"
)

// factsScript runs as PID 1 before it execs the real agent (copied into
// the root), and writes what it sees to /facts, which the test reads from
// the host side of the root.
const factsScript = `#!/bin/sh
{
echo "pid=$$"
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
echo "env=$HEARTH_TEST"
echo "path=$PATH"
grep CapEff /proc/self/status | tr -d '\t' | tr 'A-Z' 'a-z' | sed 's/:/=/'
python3 -c 'import os; os.setgroups([]); os.setgid(1000); os.setuid(1000); open("/home/sandbox/owned", "w").write("x"); print("setuid=%d" % os.getuid())' || echo setuid=failed
python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); socket.create_connection(s.getsockname()); print("loopback=up")' || echo loopback=down
(echo x > /.hearth/hearth-agent) 2>/dev/null && echo agent=writable || echo agent=readonly
(echo x > /sys/kernel/hearth) 2>/dev/null && echo sys=writable || echo sys=readonly
(echo x > /run/hearth/probe) 2>/dev/null && echo socketdir=writable || echo socketdir=readonly
} > /facts 2>&1
exec /usr/local/bin/hearth-agent "$@"
`

// agentCaps is CapEff of the agent per runtime: CHOWN, DAC_OVERRIDE,
// FOWNER, FSETID, KILL, SETGID, SETPCAP, SETUID, NET_BIND_SERVICE and
// AUDIT_WRITE, and under runsc SYS_PTRACE.
var agentCaps = map[string]string{
	oci.RuntimeRunc:  "00000000200005fb",
	oci.RuntimeCrun:  "00000000200005fb",
	oci.RuntimeRunsc: "00000000200805fb",
}

// TestSandboxEnvironment checks, on every runtime, what PID 1 sees: it is
// pid 1 with the agent's capabilities and no more, can become the sandbox
// user, has the spec's hostname and env, only loopback (up), a read-only agent
// binary and /sys, and a writable socket directory.
func TestSandboxEnvironment(t *testing.T) {
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	agentPath := drivertest.BuildAgent(t)
	agentBin, err := os.ReadFile(agentPath)
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "wrapper")
	if err := os.WriteFile(wrapper, []byte(factsScript), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			bin := findRuntime(t, rt)
			dir := t.TempDir()
			t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
			d := newDriver(t, rt, bin, dir)
			root := drivertest.SnapshotRootFS(t, base)
			if err := os.WriteFile(filepath.Join(root, "usr/local/bin/hearth-agent"), agentBin, 0o755); err != nil {
				t.Fatal(err)
			}
			spec := driver.Spec{
				ID: "env" + rt, RootFS: root, AgentPath: wrapper, Hostname: "facts-host",
				Env: []string{"HEARTH_TEST=42"}, UID: 1000, GID: 1000, Home: "/home/sandbox",
				Resources: sandbox.Sizes()[sandbox.DefaultSize],
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := d.Start(ctx, spec); err != nil {
				t.Fatalf("Start() = %v", err)
			}
			t.Cleanup(func() {
				if err := d.Delete(context.Background(), spec.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
					t.Errorf("Delete() = %v", err)
				}
			})
			b, err := os.ReadFile(filepath.Join(root, "facts"))
			if err != nil {
				t.Fatal(err)
			}
			facts := map[string]string{}
			for line := range strings.Lines(string(b)) {
				if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
					facts[k] = strings.TrimSpace(v)
				}
			}
			t.Logf("facts:\n%s", b)
			for k, want := range map[string]string{
				"pid":       "1",
				"hostname":  "facts-host",
				"net":       "lo",
				"loopback":  "up",
				"env":       "42",
				"path":      "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"capeff":    agentCaps[rt],
				"setuid":    "1000",
				"agent":     "readonly",
				"sys":       "readonly",
				"socketdir": "writable",
			} {
				if got := facts[k]; got != want {
					t.Errorf("in the sandbox %s = %q, want %q", k, got, want)
				}
			}
			if fi, err := os.Stat(filepath.Join(root, "home/sandbox/owned")); err != nil {
				t.Errorf("file written as the sandbox user: %v", err)
			} else if uid := fileUID(fi); uid != 1000 {
				t.Errorf("file written as the sandbox user belongs to uid %d, want 1000", uid)
			}
		})
	}
}

func fileUID(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 0
}
