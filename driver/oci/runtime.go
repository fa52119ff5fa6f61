package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// command returns the runtime invocation `binary <global flags> args...`.
// With id set, the runtime logs to the sandbox's runtime.log.
func (d *Driver) command(ctx context.Context, id string, args ...string) *exec.Cmd {
	argv := []string{"--root", d.dir.root()}
	if id != "" {
		argv = append(argv, "--log", d.dir.runtimeLog(id))
		if d.runtime != RuntimeRunsc {
			argv = append(argv, "--log-format", "json")
		}
	}
	argv = append(argv, d.flags...)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, d.binary, argv...)
	// The runtime and whatever it leaves running (runc's init, runsc's
	// sandbox and gofer) get a session of their own, so that a signal sent
	// to the daemon's process group or terminal (^C) never reaches them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// run runs a short runtime command and returns its stdout. The error
// carries the runtime's stderr. A command on a sandbox holds its busy
// lock while it runs (see holdBusy), even past a daemon killed meanwhile.
func (d *Driver) run(ctx context.Context, id string, args ...string) ([]byte, error) {
	cmd := d.command(ctx, id, args...)
	if id != "" {
		if busy := d.holdBusy(id); busy != nil {
			defer busy.Close()
			cmd.ExtraFiles = []*os.File{busy}
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	d.log.Debug("runtime command", "args", args, "took", time.Since(began).Round(time.Microsecond), "err", err)
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s", d.runtime, args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// create runs `run --detach` for id, in network mode (driver.Spec.Network;
// see networkFlags), or `restore --detach` from the memory image at image
// when it is not "" (runsc only). The container's stdio (inherited from the run
// command) is the sandbox's console.log, opened here and closed when
// create returns: no pipe of the daemon's is ever an end of it, so the
// sandbox neither blocks on nor dies with the daemon.
func (d *Driver) create(ctx context.Context, id, network, image string) error {
	logf, err := os.OpenFile(d.dir.consoleLog(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	verb := []string{"run"}
	if image != "" {
		verb = []string{"restore", "--image-path", image}
	}
	var listener *os.File
	if d.runtime != RuntimeRunsc {
		// The agent's socket, made here and inherited as its descriptor 3
		// (agentListenFD): see channel.go.
		if listener, err = d.listenAgent(id); err != nil {
			return fmt.Errorf("agent socket: %w", err)
		}
		defer listener.Close()
		verb = append(verb, "--preserve-fds", "1")
	}
	args := slices.Concat(networkFlags(d.runtime, network), verb, []string{"--detach", "--bundle", d.dir.sandboxDir(id), "--pid-file", d.dir.pidFile(id), id})
	cmd := d.command(ctx, id, args...)
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: passed as is, no copying goroutine
	if listener != nil {
		cmd.ExtraFiles = []*os.File{listener}
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s %s: %w", d.runtime, verb[0], err)
	}
	// While run works, its pid is on disk: a daemon killed meanwhile leaves
	// run going in its own session, and the next one stops it (see
	// stopStrayRun) before it touches the sandbox.
	if err := os.WriteFile(d.dir.runPidFile(id), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		d.log.Warn("record the pid of run", "sandbox", id, "err", err)
	}
	err = cmd.Wait()
	os.Remove(d.dir.runPidFile(id))
	d.log.Debug("runtime command", "args", append(verb, "--detach", id), "took", time.Since(began).Round(time.Microsecond), "err", err)
	if err != nil {
		return fmt.Errorf("%s %s: %w", d.runtime, verb[0], err)
	}
	return nil
}

// stopStrayRun kills the `run --detach` of id that a killed daemon left
// going, if any, with everything it started (its session: runc's init,
// runsc's sandbox and gofer), and waits until they are gone, so that a
// Delete or Start of id never races with a half-made container. The pid is
// only trusted if that process's command line still names id.
func (d *Driver) stopStrayRun(ctx context.Context, id string) {
	b, err := os.ReadFile(d.dir.runPidFile(id))
	if err != nil {
		return
	}
	defer os.Remove(d.dir.runPidFile(id))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte(id)) || !bytes.Contains(cmdline, []byte("run")) {
		return // finished, or the pid is another process's now
	}
	d.log.Warn("stopping a run an earlier daemon left going", "sandbox", id, "pid", pid)
	syscall.Kill(-pid, syscall.SIGKILL) // its session's process group
	syscall.Kill(pid, syscall.SIGKILL)
	waitExit(ctx, pid, 5*time.Second)
}

// runtimeState returns the runtime's state of container id, or nil when the
// runtime has no such container. A failing `state` is taken as "no such
// container" only when `list` agrees, so that a runtime error never makes a
// running sandbox look gone.
//
// A frozen sandbox (see Freeze) is not asked about, because `runsc state`
// signals the container through its sentry and so blocks until it is
// thawed: it is "paused" (as runc says), with the pid its run wrote to the
// pid file.
func (d *Driver) runtimeState(ctx context.Context, id string) (*specs.State, error) {
	if st := d.frozenState(id); st != nil {
		return st, nil
	}
	out, err := d.run(ctx, "", "state", id)
	if err == nil {
		var st specs.State
		if err := json.Unmarshal(out, &st); err != nil {
			return nil, fmt.Errorf("%s state: %w", d.runtime, err)
		}
		return &st, nil
	}
	listed, lerr := d.list(ctx)
	if lerr != nil {
		return nil, err
	}
	if i := slices.IndexFunc(listed, func(c specs.State) bool { return c.ID == id }); i >= 0 {
		return nil, err
	}
	return nil, nil
}

// list returns the runtime's containers under the driver's root.
func (d *Driver) list(ctx context.Context) ([]specs.State, error) {
	out, err := d.run(ctx, "", "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	out = bytes.TrimSpace(out)
	if len(out) == 0 || string(out) == "null" {
		return nil, nil
	}
	var listed []specs.State
	if err := json.Unmarshal(out, &listed); err != nil {
		return nil, fmt.Errorf("%s list: %w", d.runtime, err)
	}
	return listed, nil
}

// logTail returns the last lines of the sandbox's console and runtime
// logs, for an error message.
func (d *Driver) logTail(id string) string {
	var b strings.Builder
	for _, p := range []string{d.dir.consoleLog(id), d.dir.runtimeLog(id)} {
		if t := tail(p, 1500); t != "" {
			fmt.Fprintf(&b, "--- %s:\n%s\n", p, t)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// tail returns up to the last n bytes of the file at path, from a line
// start.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return ""
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimSpace(string(b))
}

// The busy lock of a sandbox: a file in its directory that every runtime
// command on it (pause, resume, kill, checkpoint, …) holds a shared lock
// (flock) on for as long as it runs. The command inherits the descriptor,
// so a command that a killed daemon left running (its own session: it
// outlives the daemon) still holds the lock until it ends, and Recover,
// which takes the lock exclusively before it acts on the sandbox
// (waitIdle), never resumes a sandbox that a late `runsc pause` then
// pauses again, nor quiets an agent after it resumed it.

// holdBusy returns sandbox id's busy lock file with a shared lock on it,
// for a runtime command to inherit; nil when the sandbox has no
// directory (yet, or any more), which then needs no lock.
func (d *Driver) holdBusy(id string) *os.File {
	f, err := os.OpenFile(d.dir.busyFile(id), os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil
	}
	return f
}

// idleTimeout bounds how long Recover waits for a dead daemon's runtime
// command on one sandbox to end.
const idleTimeout = 60 * time.Second

// waitIdle waits until no runtime command holds sandbox id's busy lock
// (see holdBusy), at most idleTimeout or until ctx ends.
func (d *Driver) waitIdle(ctx context.Context, id string) {
	f, err := os.OpenFile(d.dir.busyFile(id), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return // no command ever ran on it
	}
	defer f.Close()
	deadline := time.Now().Add(idleTimeout)
	for {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			return
		}
		if time.Now().After(deadline) {
			d.log.Error("recover: a runtime command of a dead daemon still runs on this sandbox", "sandbox", id, "waited", idleTimeout)
			return
		}
		if sleep(ctx, 10*time.Millisecond) != nil {
			return
		}
	}
}
