package drivertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/sandbox"
)

// What a hostile sandbox plants, and where: hearth's agent listens on
// AgentSocketDir/agent.sock (under runsc a directory the host shares with
// the sandbox; under runc and crun only a directory of the root) and is
// resumed from a memory checkpoint by AgentSocketDir/resume.
const (
	AgentSocketDir = "/run/hearth"
	// RootHelper is where the suite puts its setuid-root helper in a
	// sandbox's root (see installRootHelper).
	RootHelper = "/usr/local/bin/hearth-test-root"
)

// agentNames are the names the daemon uses in AgentSocketDir.
var agentNames = []string{"agent.sock", "resume"}

// installRootHelper copies the root's own bash to RootHelper, mode 04755
// and owned by root, as an image that ships sudo or another setuid binary
// has: run with -p, it keeps the effective uid 0 it gets from the setuid
// bit, so the sandbox user can act as root inside the sandbox.
func installRootHelper(t *testing.T, rootfs string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rootfs, "bin", "bash"))
	if err != nil {
		t.Fatalf("the root has no bash to make a setuid-root helper of: %v", err)
	}
	dst := filepath.Join(rootfs, RootHelper)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o755|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
}

// asRoot runs script with sh as root in sandbox id, through tg.AsRoot or
// else RootHelper, and returns its output and exit code (-1 for an
// AsRoot error); it fails t only when the agent cannot be reached.
func asRoot(t *testing.T, tg Target, id, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if tg.AsRoot != nil {
		out, err := tg.AsRoot(ctx, id, script)
		if err != nil {
			return out + err.Error(), -1
		}
		return out, 0
	}
	d := tg.Driver
	var out bytes.Buffer
	// Through sh: under gVisor the agent traces each command up to its
	// exec (to set its rlimits), and a traced exec ignores setuid bits.
	res, err := agentClient(d, id).Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `exec "$0" -p -c "$1"`, RootHelper, script}}, nil, &out, &out)
	if err != nil {
		t.Fatalf("Exec(%s) as root: %v", id, err)
	}
	return out.String(), res.ExitCode
}

// hostBait is what a hostile sandbox aims its links at on the host: a
// file, an empty directory, and a listening unix socket counting what
// connects to it.
type hostBait struct {
	file, fileContent string
	dir               string
	sock              string
	accepts           atomic.Int64
}

func newHostBait(t *testing.T) *hostBait {
	t.Helper()
	dir := t.TempDir()
	b := &hostBait{file: filepath.Join(dir, "host-file"), fileContent: "host file " + newID() + "\n", dir: filepath.Join(dir, "host-dir"), sock: filepath.Join(dir, "host.sock")}
	if err := os.WriteFile(b.file, []byte(b.fileContent), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(b.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", b.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptAndClose(ln, func() { b.accepts.Add(1) })
	return b
}

// check wants the host untouched: the file's content, nothing in the
// directory, nobody connected to the socket.
func (b *hostBait) check(t *testing.T) {
	t.Helper()
	if got, err := os.ReadFile(b.file); err != nil || string(got) != b.fileContent {
		t.Errorf("host file %s = %q, %v; want it unchanged (%q)", b.file, got, err, b.fileContent)
	}
	if des, err := os.ReadDir(b.dir); err != nil || len(des) > 0 {
		t.Errorf("host directory %s holds %v (%v); want it empty", b.dir, des, err)
	}
	if n := b.accepts.Load(); n > 0 {
		t.Errorf("the host socket %s received %d connections; want none", b.sock, n)
	}
}

// plantScript returns the shell script that replaces every name the daemon
// uses in AgentSocketDir with kind, aimed at b: a symlink to the host file
// (absolute, or relative climbing to / first, which reaches the host's
// root from anywhere), to the host directory, to the host socket, a FIFO,
// or a hard link to a file beside it. A kind "quiet-K" plants only the
// resume marker, as K, and removes the socket, as a quiet agent has.
func plantScript(b *hostBait, kind string) string {
	var s strings.Builder
	s.WriteString("mkdir -p " + AgentSocketDir + "; cd " + AgentSocketDir + " || exit 1; echo bait > bait\n")
	quiet := strings.HasPrefix(kind, "quiet-")
	kind = strings.TrimPrefix(kind, "quiet-")
	for _, name := range agentNames {
		s.WriteString("rm -rf " + name + "; ")
		if quiet && name != "resume" {
			// The agent looks quiet (no socket): the daemon's restart
			// then writes the resume marker.
			s.WriteString("\n")
			continue
		}
		switch kind {
		case "abs-link":
			s.WriteString("ln -s " + b.file + " " + name)
		case "rel-link":
			s.WriteString("ln -s " + strings.Repeat("../", 24) + strings.TrimPrefix(b.file, "/") + " " + name)
		case "dir-link":
			s.WriteString("ln -s " + b.dir + " " + name)
		case "sock-link":
			s.WriteString("ln -s " + b.sock + " " + name)
		case "fifo":
			s.WriteString("mkfifo " + name)
		case "hardlink":
			s.WriteString("ln bait " + name)
		}
		s.WriteString(" || exit 2\n")
	}
	return s.String()
}

// hostileKinds are what testHostileChannel plants.
var hostileKinds = []string{"abs-link", "rel-link", "dir-link", "sock-link", "fifo", "hardlink", "quiet-abs-link", "quiet-rel-link", "quiet-fifo"}

// testHostileChannel: root in the sandbox replaces every name the daemon
// uses in the agent's socket directory with a link to a host file, a host
// directory or a host socket, a FIFO or a hard link; then Dial, a memory
// checkpoint (when the driver has them), a daemon restart (Recover), Stop
// and a wake. Each call returns within its context (a FIFO never blocks
// the daemon), fails or reaches the real agent, and afterwards the host
// file is unchanged, nothing was created in the host directory, and
// nothing connected to the host socket; after the wake the sandbox
// answers again.
func (s *suite) testHostileChannel(t *testing.T) {
	tg, d, spec, bait := s.hostile(t)
	for _, kind := range hostileKinds {
		t.Run(kind, func(t *testing.T) {
			if out, code := asRoot(t, tg, spec.ID, plantScript(bait, kind)); code != 0 {
				t.Fatalf("planting %s as root: exit %d: %s", kind, code, out)
			}
			d = s.hostileCalls(t, tg, d, spec)
			bait.check(t)
			ping(t, d, spec.ID)
		})
	}
}

// hostile starts a sandbox with the root helper on a new target, and
// makes the host's bait.
func (s *suite) hostile(t *testing.T) (Target, driver.Driver, driver.Spec, *hostBait) {
	t.Helper()
	tg := s.cfg.New(t)
	spec := s.spec(t)
	installRootHelper(t, spec.RootFS)
	s.start(t, tg.Driver, spec)
	return tg, tg.Driver, spec, newHostBait(t)
}

// hostileCalls makes the daemon's calls on sandbox spec.ID after a plant:
// Dial (three times), a memory checkpoint, Recover through a reopened
// driver (which it returns, or d when the target has no Reopen), Stop and
// a wake. Each must return within its bound; their errors are expected.
func (s *suite) hostileCalls(t *testing.T, tg Target, d driver.Driver, spec driver.Spec) driver.Driver {
	t.Helper()
	bounded := func(what string, limit time.Duration, call func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), limit)
		defer cancel()
		began := time.Now()
		err := call(ctx)
		if took := time.Since(began); took > limit+5*time.Second {
			t.Errorf("%s took %v, want it bounded by its context (%v)", what, took, limit)
		}
		t.Logf("%s = %v", what, err)
	}
	for range 3 {
		bounded("Dial", 5*time.Second, func(ctx context.Context) error {
			c, err := d.Dial(ctx, spec.ID)
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := agent.NewClient(func(context.Context) (net.Conn, error) { return c, nil }).Ping(ctx)
			if err == nil && res.PID != 1 {
				t.Errorf("Dial reached something that says pid %d, want the sandbox's agent (pid 1)", res.PID)
			}
			return err
		})
	}
	if mc, ok := d.(driver.MemoryCheckpointer); ok && d.Capabilities().MemoryCheckpoint {
		key := "hostile" + newID()
		bounded("CheckpointMemory", 10*time.Second, func(ctx context.Context) error {
			return mc.CheckpointMemory(ctx, spec.ID, key, driver.MemoryOptions{})
		})
		mc.DeleteMemory(t.Context(), key)
	}
	if tg.Reopen != nil {
		d = tg.Reopen(t)
		bounded("Recover", 30*time.Second, func(ctx context.Context) error {
			_, err := d.Recover(ctx)
			return err
		})
	}
	bounded("Stop", 30*time.Second, func(ctx context.Context) error { return d.Stop(ctx, spec.ID) })
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.StartTimeout)
	defer cancel()
	if err := d.Start(ctx, spec); err != nil {
		t.Fatalf("Start(%s) after the attack = %v", spec.ID, err)
	}
	return d
}

// testHostileSwaps: root in the sandbox swaps the names the daemon uses
// in the agent's socket directory between links to host objects, a FIFO
// and a file, as fast as it can, while the daemon dials, checkpoints
// memory and recovers; the host is untouched, and after a stop and a wake
// the sandbox answers.
func (s *suite) testHostileSwaps(t *testing.T) {
	tg, d, spec, bait := s.hostile(t)
	var loop strings.Builder
	loop.WriteString("cd " + AgentSocketDir + " || exit 1; n=0; end=$(($(date +%s)+4)); while [ $(date +%s) -lt $end ]; do\n")
	for _, name := range agentNames {
		for i, target := range []string{bait.file, bait.sock, bait.dir} {
			tmp := name + ".t" + strconv.Itoa(i)
			loop.WriteString("ln -sfn " + target + " " + tmp + "; mv -Tf " + tmp + " " + name + "\n")
		}
		loop.WriteString("rm -f " + name + ".f; mkfifo " + name + ".f; mv -Tf " + name + ".f " + name + "\n")
	}
	loop.WriteString("n=$((n+1)); echo $n > /tmp/hostile-swaps; done\n")
	if out, code := asRoot(t, tg, spec.ID, "rm -f /tmp/hostile-swaps; ("+loop.String()+") >/dev/null 2>&1 &"); code != 0 {
		t.Fatalf("starting the swap loop: exit %d: %s", code, out)
	}
	// Attack once the loop is under way (its count is in the root's /tmp).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(spec.RootFS, "tmp", "hostile-swaps")); err == nil {
			break
		}
	}
	d = s.hostileCalls(t, tg, d, spec)
	bait.check(t)
	ping(t, d, spec.ID)
	// The loop did swap (until it ended, or the stop ended it).
	n, _ := strconv.Atoi(strings.TrimSpace(execArgv(t, d, spec.ID, "sh", "-c", "cat /tmp/hostile-swaps 2>/dev/null || echo 0")))
	if n == 0 {
		t.Errorf("the swap loop never completed a round: the attack did not run")
	}
	t.Logf("the sandbox swapped the names %d times", n)
}

// testCrossTenant: root in sandbox B replaces B's agent socket with a
// link to sandbox A's (relative, as the host lays them out:
// ../../<A>/run/agent.sock; ids are no secret). B's calls must never reach
// A: every command that runs through Dial(B) runs in B (its hostname), A's
// file is not read, and A's file is not changed.
func (s *suite) testCrossTenant(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	a, b := s.spec(t), s.spec(t)
	installRootHelper(t, b.RootFS)
	s.start(t, d, a)
	s.start(t, d, b)
	secret := "tenant-a-secret-" + newID()
	execArgv(t, d, a.ID, "sh", "-c", "echo "+secret+" > /home/sandbox/a-secret")
	link := "../../" + a.ID + "/run/agent.sock"
	script := "mkdir -p " + AgentSocketDir + " && rm -f " + AgentSocketDir + "/agent.sock && ln -s " + link + " " + AgentSocketDir + "/agent.sock"
	if out, code := asRoot(t, tg, b.ID, script); code != 0 {
		t.Fatalf("planting the link as root in B: exit %d: %s", code, out)
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var out bytes.Buffer
		res, err := agentClient(d, b.ID).Exec(ctx, sandbox.ExecRequest{Shell: "hostname; cat /home/sandbox/a-secret; echo overwritten-by-b > /home/sandbox/a-secret"}, nil, &out, &out)
		cancel()
		t.Logf("Exec in B = %+v, %v: %q", res, err, out.String())
		if err == nil && !strings.HasPrefix(out.String(), b.Hostname+"\n") {
			t.Errorf("a command through Dial(B) ran on host %q, want B's (%s)", strings.SplitN(out.String(), "\n", 2)[0], b.Hostname)
		}
		if strings.Contains(out.String(), secret) {
			t.Errorf("a command through Dial(B) read A's file: %q", out.String())
		}
		ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
		var got bytes.Buffer
		err = agentClient(d, b.ID).ReadFile(ctx, "/home/sandbox/a-secret", &got)
		cancel()
		if strings.Contains(got.String(), secret) {
			t.Errorf("ReadFile through Dial(B) read A's file: %q, %v", got.String(), err)
		}
	}
	if got := execArgv(t, d, a.ID, "cat", "/home/sandbox/a-secret"); got != secret+"\n" {
		t.Errorf("A's file = %q after B's attack, want %q", got, secret+"\n")
	}
}

// testAgentOutOfReach: a setuid-root program an image may ship, run by a
// command, gets no way into the agent (PID 1): its bounding set holds
// neither CAP_SYS_PTRACE nor CAP_SETPCAP; it cannot read the agent's
// environment or memory, follow or write its descriptors (one of which is
// the host file its console output goes to), nor ptrace it; and that host
// file holds nothing of what it tried to write there. (Under gVisor the
// setuid bit gives no root at all, and the attack runs as the user; under
// runc and crun root inside is an unprivileged host uid, to which the
// host's files are closed anyway; the bounding set is the same bar for
// both.)
func (s *suite) testAgentOutOfReach(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	spec := s.spec(t)
	installRootHelper(t, spec.RootFS)
	s.start(t, d, spec)
	marker := "hostile-" + newID()
	// The attack runs with every id 0, as sudo gives, not only the
	// effective uid the setuid bit gives: ptrace's same-ids rule then
	// leaves the agent's dumpability and the attacker's capabilities as
	// the only bars.
	attack := `id -u; grep CapBnd /proc/self/status
cat /proc/1/environ >/dev/null 2>&1 && echo READ-ENVIRON
python3 -c 'open("/proc/1/mem", "rb")' 2>/dev/null && echo READ-MEM
readlink /proc/1/fd/1 >/dev/null 2>&1 && echo READLINK-FD
for fd in 0 1 2 3 4 5 6 7 8 9; do (echo ` + marker + ` >> /proc/1/fd/$fd) 2>/dev/null && echo WROTE-FD$fd; done
python3 -c 'import ctypes; print("PTRACE", ctypes.CDLL(None).ptrace(16, 1, 0, 0))'
true`
	script := `exec python3 -c '
import os, sys
try:
    os.setgroups([0]); os.setresgid(0, 0, 0); os.setresuid(0, 0, 0)
except OSError:
    pass  # no root to be had (gVisor ignores the setuid bit): attack as the user
os.execv("/bin/sh", ["sh", "-c", sys.argv[1]])' "$1"`
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := agentClient(d, spec.ID).Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `exec "$0" -p -c "$1" sh "$2"`, RootHelper, script, attack}}, nil, &out, &out)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the setuid-root helper = %+v, %v: %s", res, err, out.String())
	}
	got := out.String()
	for _, reached := range []string{"READ-ENVIRON", "READ-MEM", "READLINK-FD", "WROTE-FD"} {
		if strings.Contains(got, reached) {
			t.Errorf("root inside reached the agent (%s):\n%s", reached, got)
		}
	}
	if !strings.Contains(got, "PTRACE -1") {
		t.Errorf("root inside's ptrace of the agent: %q, want -1", got)
	}
	bnd := ""
	for line := range strings.Lines(got) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "CapBnd:" {
			bnd = f[1]
		}
	}
	mask, err := strconv.ParseUint(bnd, 16, 64)
	if err != nil {
		t.Fatalf("no bounding set in %q", got)
	}
	const sysPtrace, setpcap = 19, 8
	if mask&(1<<sysPtrace|1<<setpcap) != 0 {
		t.Errorf("a command's bounding set %s holds CAP_SYS_PTRACE or CAP_SETPCAP", bnd)
	}
	if tg.ConsoleLog != nil {
		if b, err := os.ReadFile(tg.ConsoleLog(spec.ID)); err != nil || bytes.Contains(b, []byte(marker)) {
			t.Errorf("the host's console log of the agent (%v) holds what root inside wrote to its descriptors", err)
		}
	}
}

// testHostRoot, for a driver whose sandboxes are containers (Isolation
// "container": runc, crun): root inside is not root on the host. The
// agent (PID 1, root inside) and a process the setuid-root helper made
// run as host uids of an unprivileged range (not 0, not below 65536);
// root inside cannot change the agent binary the host bind-mounts (the
// sandbox still sees the host's bytes after trying to write it and to
// remount it writable); and the sandbox's mountinfo names no host path of
// its root, its agent or the test's directories.
func (s *suite) testHostRoot(t *testing.T) {
	tg := s.cfg.New(t)
	d := tg.Driver
	if d.Capabilities().Isolation != "container" {
		t.Skipf("isolation %q: the host's view of root inside is the user-space kernel's", d.Capabilities().Isolation)
	}
	spec := s.spec(t)
	installRootHelper(t, spec.RootFS)
	s.start(t, d, spec)
	st := wantState(t, d, spec.ID, driver.StatusRunning)
	wantUnprivileged(t, "the agent (PID 1)", st.PID)

	out, code := asRoot(t, tg, spec.ID, "id -u; (exec sleep 31.4159) >/dev/null 2>&1 & sleep 0.2")
	if code != 0 || !strings.HasPrefix(out, "0\n") {
		t.Fatalf("the setuid-root helper: exit %d, %q; want uid 0 inside", code, out)
	}
	pid := findProcess(t, "sleep\x0031.4159")
	wantUnprivileged(t, "a process of root inside", pid)

	agentSum := sha256File(t, spec.AgentPath)
	script := "mount -o remount,rw,bind " + "/.hearth/hearth-agent; printf x >> /.hearth/hearth-agent; " +
		"sha256sum /.hearth/hearth-agent; cat /proc/self/mountinfo"
	out, _ = asRoot(t, tg, spec.ID, script)
	if !strings.Contains(out, agentSum) {
		t.Errorf("the agent binary inside after root's writes: %q, want its host content (sha256 %s)", firstLines(out, 3), agentSum)
	}
	for _, p := range []string{spec.RootFS, filepath.Dir(spec.AgentPath), os.TempDir() + "/"} {
		if strings.Contains(out, p) {
			t.Errorf("the sandbox's mountinfo shows the host path %s:\n%s", p, out)
		}
	}
}

// wantUnprivileged wants every uid of host process pid (real, effective,
// saved, filesystem) outside 0–65535.
func wantUnprivileged(t *testing.T, what string, pid int) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("%s: host pid %d: %v", what, pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "Uid:") {
			continue
		}
		for _, f := range strings.Fields(line)[1:] {
			if uid, err := strconv.Atoi(f); err != nil || uid < 65536 {
				t.Errorf("%s runs on the host as %q; want an unprivileged range (no uid below 65536)", what, strings.TrimSpace(line))
			}
		}
		return
	}
	t.Errorf("%s: no Uid line in /proc/%d/status", what, pid)
}

// findProcess returns the host pid whose command line contains cmdline
// (NUL-separated), waiting up to 5 seconds.
func findProcess(t *testing.T, cmdline string) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			pid, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			if b, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline"); bytes.Contains(b, []byte(cmdline)) {
				return pid
			}
		}
	}
	t.Fatalf("no host process runs %q", strings.ReplaceAll(cmdline, "\x00", " "))
	return 0
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
