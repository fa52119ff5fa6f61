package attack_test

import (
	"bytes"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/testenv"
)

// tenantToken makes a tenant with an agent identity on d and returns the
// agent's token: all that a hostile tenant has.
func tenantToken(t *testing.T, d *daemonproc.Daemon, tenant string) string {
	t.Helper()
	ctx, op := ctxT(t), d.Client()
	quota := 5
	if _, err := op.Admin().CreateTenant(ctx, sandbox.Tenant{Name: tenant, Policy: sandbox.PolicyOverrides{AgentQuota: &quota},
		Allocation: sandbox.Resources{MilliCPU: 64_000, MemoryBytes: 64 << 30, DiskBytes: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Admin().CreateAgent(ctx, sandbox.Agent{Name: "bot", Tenant: tenant}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := op.Admin().CreateToken(ctx, sandbox.TokenRequest{Tenant: tenant, Agent: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// shell runs script in sandbox name and returns its stdout, failing t
// unless it exits 0.
func shell(t *testing.T, c *client.Client, name, script string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	res, err := c.Exec(ctxT(t), name, sandbox.ExecRequest{Shell: script}, nil, &out, &errOut)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q = %+v, %v: %s%s", script, res, err, out.String(), errOut.String())
	}
	return out.String()
}

// TestFileAPIRunsAsTheUser: the file API can do in a sandbox what its user
// could do in a shell there, nothing more, through the API and the CLI:
// chmod of the agent's socket directory (whose loosening let the user plant
// links the root daemon followed), setuid on the image's python (under
// runc, the user's way to euid 0), reading /etc/shadow, and writing into
// /etc, /run/hearth and /.hearth are refused, and each leaves the sandbox
// (seen by a command in it) and the host's socket directory as they were.
// A read of a socket a command made is invalid_argument saying so.
func TestFileAPIRunsAsTheUser(t *testing.T) {
	daemonproc.ForEachRuntime(t, func(t *testing.T, runtime string) {
		d := daemonproc.New(t, runtime)
		tok := tenantToken(t, d, "mallory")
		c := client.New(d.URL, tok, nil)
		ctx := ctxT(t)
		sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "box"})
		if err != nil {
			t.Fatal(err)
		}
		// Only gVisor's agent shares a host directory with its sandbox,
		// mounted on /run/hearth; under runc and crun /run/hearth is the
		// image's own empty directory, and nothing is shared.
		shared := runtime == "runsc"
		var hostRun string
		var hostBefore []string
		if shared {
			hostRun = filepath.Join(d.DataDir, "oci", runtime, "sandboxes", sb.ID, "run")
			hostBefore = testenv.DirNames(t, hostRun)
		} else if got := shell(t, c, "box", "grep -c ' /run/hearth ' /proc/self/mountinfo || true"); got != "0\n" {
			t.Errorf("under %s /run/hearth is a mount (%q); want nothing shared with the host", runtime, got)
		}
		python := strings.TrimSpace(shell(t, c, "box", "readlink -f /usr/bin/python3"))
		modes := func() string {
			return shell(t, c, "box", "stat -c '%a %U' /run/hearth /etc /.hearth "+python+" /etc/shadow; ls -a /etc /run/hearth /.hearth | md5sum")
		}
		before := modes()

		api := map[string]func() error{
			"chmod /run/hearth 0777": func() error { _, err := c.Chmod(ctx, "box", "/run/hearth", 0o777); return err },
			"chmod python 04755": func() error {
				_, err := c.Chmod(ctx, "box", python, 0o755|fs.ModeSetuid)
				return err
			},
			"read /etc/shadow": func() error { return c.ReadFile(ctx, "box", "/etc/shadow", io.Discard) },
		}
		for _, p := range []string{"/etc/hearth-attack", "/run/hearth/attack", "/.hearth/attack"} {
			api["write "+p] = func() error {
				_, err := c.WriteFile(ctx, "box", sandbox.WriteRequest{Path: p}, strings.NewReader("x"))
				return err
			}
		}
		for name, attack := range api {
			t.Run("api/"+name, func(t *testing.T) {
				if err := attack(); !sandbox.IsCode(err, sandbox.CodePermissionDenied) {
					t.Errorf("%s = %v, want permission_denied", name, err)
				}
			})
		}
		cli := map[string][]string{
			"chmod /run/hearth 0777": {"fs", "chmod", "box", "0777", "/run/hearth"},
			"chmod python 04755":     {"fs", "chmod", "box", "04755", python},
			"read /etc/shadow":       {"fs", "read", "box", "/etc/shadow"},
			"write /etc":             {"fs", "write", "box", "/etc/hearth-attack"},
			"write /run/hearth":      {"fs", "write", "box", "/run/hearth/attack"},
			"write /.hearth":         {"fs", "write", "box", "/.hearth/attack"},
		}
		for name, args := range cli {
			t.Run("cli/"+name, func(t *testing.T) {
				out, errOut, code := d.CLIAs(tok, "x", args...)
				if code != sandbox.CodePermissionDenied.ExitCode() || !strings.Contains(errOut, "permission denied") || strings.Contains(out, "root:") {
					t.Errorf("hearth %s = %d %q %q; want exit %d, permission denied", strings.Join(args, " "), code, out, errOut, sandbox.CodePermissionDenied.ExitCode())
				}
			})
		}
		if after := modes(); after != before {
			t.Errorf("the sandbox after the attacks:\n%s\nbefore:\n%s", after, before)
		}
		if shared {
			if after := testenv.DirNames(t, hostRun); !slices.Equal(after, hostBefore) {
				t.Errorf("the host's socket directory holds %q after the attacks, %q before", after, hostBefore)
			}
		}
		if euid := shell(t, c, "box", python+" -c 'import os; print(os.geteuid())'"); euid != "1000\n" {
			t.Errorf("python's euid = %q, want 1000", euid)
		}

		t.Run("read a socket", func(t *testing.T) {
			shell(t, c, "box", `python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/tmp/s.sock")'`)
			err := c.ReadFile(ctx, "box", "/tmp/s.sock", io.Discard)
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) || !strings.Contains(sandbox.AsError(err).Message, "socket") {
				t.Errorf("ReadFile(a socket) = %v, want invalid_argument saying it is a socket", err)
			}
			_, errOut, code := d.CLIAs(tok, "", "fs", "read", "box", "/tmp/s.sock")
			if code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(errOut, "socket") {
				t.Errorf("hearth fs read of a socket = %d %q", code, errOut)
			}
			if strings.Contains(d.Out.String(), "internal error") {
				t.Errorf("the daemon logged an internal error")
			}
		})
	})
}
