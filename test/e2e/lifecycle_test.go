package e2e_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// TestLifecycle walks one sandbox through its whole life on every installed
// runtime, with the Go client and the CLI: create → exec → files → daemon
// killed and restarted → still there → destroy → nothing left.
func TestLifecycle(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime)
		ctx := ctxT(t)
		c := d.Client()

		sb, created, err := c.Create(ctx, sandbox.CreateRequest{Name: "life", Size: "small"})
		if err != nil || !created {
			t.Fatalf("Create(life) = %v, %v, %v; want created", sb, created, err)
		}
		if sb.Status != sandbox.StatusRunning || sb.Runtime != runtime || sb.ID == "" {
			t.Fatalf("Create(life) = %+v; want running on %s with an id", sb, runtime)
		}
		for _, want := range []string{sandbox.CapExec, sandbox.CapFiles, sandbox.CapRuntime + runtime} {
			if !contains(sb.Capabilities, want) {
				t.Errorf("capabilities %v lack %q", sb.Capabilities, want)
			}
		}
		again, created, err := c.Create(ctx, sandbox.CreateRequest{Name: "life"})
		if err != nil || created || again.ID != sb.ID {
			t.Fatalf("second Create(life) = %s, created=%v, %v; want the same sandbox %s resumed", again.ID, created, err, sb.ID)
		}

		// exec: stdout, stderr and the exit code, separately and byte-exact.
		var stdout, stderr bytes.Buffer
		res, err := c.Exec(ctx, "life", sandbox.ExecRequest{Argv: []string{"python3", "-c",
			"import sys, os; print('out', os.getuid()); print('err', file=sys.stderr); sys.exit(3)"}}, nil, &stdout, &stderr)
		if err != nil || res.ExitCode != 3 || stdout.String() != "out 1000\n" || stderr.String() != "err\n" {
			t.Fatalf("exec python3 = %+v, %v, stdout %q, stderr %q; want exit 3, \"out 1000\\n\", \"err\\n\"", res, err, stdout.String(), stderr.String())
		}

		// files: 1 MiB round trip, parents created, owned by the sandbox user.
		blob := make([]byte, 1<<20)
		rand.Read(blob)
		info, err := c.WriteFile(ctx, "life", sandbox.WriteRequest{Path: "deep/er/blob.bin", Parents: true}, bytes.NewReader(blob))
		if err != nil || info.Size != int64(len(blob)) || info.Owner != "sandbox" || info.Path != "/home/sandbox/deep/er/blob.bin" {
			t.Fatalf("WriteFile(blob) = %+v, %v; want 1 MiB owned by sandbox at /home/sandbox/deep/er/blob.bin", info, err)
		}
		var back bytes.Buffer
		if err := c.ReadFile(ctx, "life", "/home/sandbox/deep/er/blob.bin", &back); err != nil || !bytes.Equal(back.Bytes(), blob) {
			t.Fatalf("ReadFile(blob) = %d bytes, %v; want the 1 MiB written", back.Len(), err)
		}
		parent, err := c.Stat(ctx, "life", "deep/er")
		if err != nil || parent.Type != sandbox.FileDir || parent.Owner != "sandbox" {
			t.Fatalf("Stat(deep/er) = %+v, %v; want a dir owned by sandbox", parent, err)
		}
		// overwrite keeps the mode: a 0755 script stays executable.
		if _, err := c.WriteFile(ctx, "life", sandbox.WriteRequest{Path: "run.sh", Mode: 0o755, SetMode: true}, strings.NewReader("#!/bin/sh\necho one\n")); err != nil {
			t.Fatal(err)
		}
		info, err = c.WriteFile(ctx, "life", sandbox.WriteRequest{Path: "run.sh"}, strings.NewReader("#!/bin/sh\necho two\n"))
		if err != nil || info.Mode.Perm() != 0o755 {
			t.Fatalf("overwrite run.sh = %+v, %v; want mode 0755 kept", info, err)
		}
		stdout.Reset()
		if res, err := c.Exec(ctx, "life", sandbox.ExecRequest{Argv: []string{"./run.sh"}}, nil, &stdout, &stdout); err != nil || res.ExitCode != 0 || stdout.String() != "two\n" {
			t.Fatalf("./run.sh = %+v, %v, %q; want exit 0 and \"two\\n\"", res, err, stdout.String())
		}

		// the daemon dies; the sandbox does not.
		d.Kill()
		d.Start()
		c = d.Client()
		got, err := c.Get(ctx, "life")
		if err != nil || got.ID != sb.ID || got.Status != sandbox.StatusRunning {
			t.Fatalf("Get(life) after restart = %+v, %v; want %s running", got, err, sb.ID)
		}
		back.Reset()
		if err := c.ReadFile(ctx, "life", "deep/er/blob.bin", &back); err != nil || !bytes.Equal(back.Bytes(), blob) {
			t.Fatalf("ReadFile(blob) after restart = %d bytes, %v; want the 1 MiB written before", back.Len(), err)
		}
		stdout.Reset()
		// The agent kept running through the restart: its uptime predates it.
		if res, err := c.Exec(ctx, "life", sandbox.ExecRequest{Shell: "echo alive; cat /proc/1/cmdline | tr '\\0' ' '"}, nil, &stdout, &stdout); err != nil || res.ExitCode != 0 || !strings.HasPrefix(stdout.String(), "alive\n") {
			t.Fatalf("exec after restart = %+v, %v, %q", res, err, stdout.String())
		}

		// destroy releases everything.
		if err := c.Destroy(ctx, "life"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "life"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Fatalf("Get(life) after destroy = %v; want not_found", err)
		}
		assertNothingLeft(t, d, sb.ID)
	})
}

// assertNothingLeft checks that no process, mount, cgroup or directory of
// the sandbox id remains on the host.
func assertNothingLeft(t *testing.T, d *daemon, id string) {
	t.Helper()
	// Processes: the runtime names its processes and their arguments by id.
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs := processesMentioning(id)
		if len(procs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of %s still running: %v", id, procs)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(mi, []byte(id)) {
		t.Errorf("mounts of %s remain:\n%s", id, grepLines(string(mi), id))
	}
	filepath.WalkDir("/sys/fs/cgroup", func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		if strings.Contains(e.Name(), id) {
			t.Errorf("cgroup of %s remains: %s", id, p)
			return filepath.SkipDir
		}
		return nil
	})
	filepath.WalkDir(d.DataDir, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.Contains(e.Name(), id) {
			t.Errorf("file of %s remains: %s", id, p)
			if e.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

func processesMentioning(id string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(id)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestCLI drives the same daemon through the hearth binary, as a script
// would, including --json and error exit codes.
func TestCLI(t *testing.T) {
	requireDaemon(t)
	d := newDaemon(t, bins.Runtimes[0])

	out, errOut, code := d.CLI("", "create", "clitest", "--json")
	if code != 0 {
		t.Fatalf("hearth create clitest = exit %d, stderr %q", code, errOut)
	}
	var sb sandbox.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.Name != "clitest" || sb.Status != sandbox.StatusRunning {
		t.Fatalf("hearth create --json = %q (%v); want the running sandbox", out, err)
	}
	out, errOut, code = d.CLI("", "exec", "clitest", "--", "sh", "-c", "echo hi; echo oops >&2; exit 7")
	if code != 7 || out != "hi\n" || errOut != "oops\n" {
		t.Fatalf("hearth exec = exit %d, stdout %q, stderr %q; want 7, \"hi\\n\", \"oops\\n\"", code, out, errOut)
	}
	if _, errOut, code = d.CLI("payload\n", "fs", "write", "clitest", "notes/a.txt", "--parents"); code != 0 {
		t.Fatalf("hearth fs write = exit %d, %q", code, errOut)
	}
	if out, errOut, code = d.CLI("", "fs", "read", "clitest", "notes/a.txt"); code != 0 || out != "payload\n" {
		t.Fatalf("hearth fs read = exit %d, %q, %q; want \"payload\\n\"", code, out, errOut)
	}
	if out, _, code = d.CLI("", "list"); code != 0 || !strings.Contains(out, "clitest") {
		t.Fatalf("hearth list = exit %d, %q; want clitest listed", code, out)
	}
	_, errOut, code = d.CLI("", "get", "nosuch")
	if code != sandbox.CodeNotFound.ExitCode() || !strings.Contains(errOut, "error: ") || !strings.Contains(errOut, "hint: ") {
		t.Fatalf("hearth get nosuch = exit %d, stderr %q; want exit %d with error and hint", code, errOut, sandbox.CodeNotFound.ExitCode())
	}
	_, errOut, code = d.CLI("", "create", "Bad_Name")
	if code != sandbox.CodeInvalidArgument.ExitCode() || !strings.Contains(errOut, "invalid sandbox name") {
		t.Fatalf("hearth create Bad_Name = exit %d, %q; want invalid_argument", code, errOut)
	}
	if _, errOut, code = d.CLI("", "destroy", "clitest"); code != 0 {
		t.Fatalf("hearth destroy = exit %d, %q", code, errOut)
	}
}
