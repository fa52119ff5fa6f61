package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// runner invokes the runtime binary: one command, run to its end (run),
// or the `run --detach` (or `restore --detach`) that makes a sandbox's
// container (create); and it reads what the runtime says of its
// containers (state, list, the logs). Every command on a sandbox holds
// the sandbox's busy lock while it runs (holdBusy), so that a command a
// killed daemon left running is waited for (waitIdle).
type runner struct {
	name   string // RuntimeRunsc, RuntimeRunc or RuntimeCrun
	binary string
	flags  []string // global flags of every invocation, before the subcommand
	dir    stateDir
	cg     *cgroups // whose freezer state says the runtime is not to be asked
	log    *slog.Logger

	// nullNetns serializes runsc creates until runsc has made its shared
	// empty network namespace for gofers (see create).
	nullNetns sync.Mutex
}

// command returns the runtime invocation `binary --root root <global
// flags> args...`. With logID set, the runtime logs to that sandbox's
// runtime.log. Under runsc every invocation names the shared root as its
// --shared-root, where the empty network namespace its gofers share is
// pinned (see create).
func (r *runner) command(ctx context.Context, root, logID string, args ...string) *exec.Cmd {
	argv := []string{"--root", root}
	if r.name == RuntimeRunsc {
		argv = append(argv, "--shared-root", r.dir.root())
	}
	if logID != "" {
		argv = append(argv, "--log", r.dir.runtimeLog(logID))
		if r.name != RuntimeRunsc {
			argv = append(argv, "--log-format", "json")
		}
	}
	argv = append(argv, r.flags...)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, r.binary, argv...)
	// The runtime and whatever it leaves running (runc's init, runsc's
	// sandbox and gofer) get a session of their own, so that a signal sent
	// to the daemon's process group or terminal (^C) never reaches them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// rootOf returns the --root that holds sandbox id's container: its own
// (stateDir.runtimeRoot) once a start has made one, else the shared root,
// where drivers before per-sandbox roots made every container. runsc
// matches every name in a root on each command, so a shared root made each
// start and each query slower by the number of sandboxes on the host.
func (r *runner) rootOf(id string) string {
	if own := r.dir.runtimeRoot(id); exists(own) {
		return own
	}
	return r.dir.root()
}

// run runs a short runtime command on sandbox id's container, logged to
// its runtime.log, and returns its stdout. The error carries the runtime's
// stderr. The command holds the sandbox's busy lock while it runs (see
// holdBusy), even past a daemon killed meanwhile.
func (r *runner) run(ctx context.Context, id string, args ...string) ([]byte, error) {
	var busy *os.File
	if busy = r.holdBusy(id); busy != nil {
		defer busy.Close()
	}
	return r.invoke(r.command(ctx, r.rootOf(id), id, args...), busy, args)
}

// ask runs a query (state, list) on the runtime's root, unlogged and
// without a busy lock, and returns its stdout.
func (r *runner) ask(ctx context.Context, root string, args ...string) ([]byte, error) {
	return r.invoke(r.command(ctx, root, "", args...), nil, args)
}

// invoke runs cmd, the runtime command args, with busy (if not nil) as
// its descriptor 3, and returns its stdout or an error with its stderr.
func (r *runner) invoke(cmd *exec.Cmd, busy *os.File, args []string) ([]byte, error) {
	if busy != nil {
		cmd.ExtraFiles = []*os.File{busy}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	r.log.Debug("runtime command", "args", args, "took", time.Since(began).Round(time.Microsecond), "err", err)
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s", r.name, args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// create runs `run --detach` for id, in network mode (driver.Spec.Network;
// see networkFlags), or `restore --detach` from the memory image at image
// when it is not "" (runsc only). The container's stdio (inherited from the run
// command) is the sandbox's console.log, opened here and closed when
// create returns: no pipe of the daemon's is ever an end of it, so the
// sandbox neither blocks on nor dies with the daemon. Under runc and crun
// listener is the agent's listening socket, which the container inherits
// as its descriptor 3 (agentListenFD; see channel.go); runsc gets nil.
//
// Under runsc the creates that find no <root>/null-netns yet run one at a
// time: each runsc gofer joins an empty network namespace that the first
// one bind-mounts there, and two first creates at once would both mount
// one (a mount leaked per race).
func (r *runner) create(ctx context.Context, id, network, image string, listener *os.File) error {
	if r.name == RuntimeRunsc {
		if _, err := os.Stat(r.dir.nullNetns()); err != nil {
			r.nullNetns.Lock()
			defer r.nullNetns.Unlock()
		}
	}
	if err := os.MkdirAll(r.dir.runtimeRoot(id), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(r.dir.consoleLog(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	verb := []string{"run"}
	if image != "" {
		verb = []string{"restore", "--image-path", image}
	}
	if listener != nil {
		verb = append(verb, "--preserve-fds", "1")
	}
	args := slices.Concat(networkFlags(r.name, network), verb, []string{"--detach", "--bundle", r.dir.sandboxDir(id), "--pid-file", r.dir.pidFile(id), id})
	cmd := r.command(ctx, r.dir.runtimeRoot(id), id, args...)
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: passed as is, no copying goroutine
	if listener != nil {
		cmd.ExtraFiles = []*os.File{listener}
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s %s: %w", r.name, verb[0], err)
	}
	// While run works, its pid is on disk: a daemon killed meanwhile leaves
	// run going in its own session, and the next one stops it (see
	// stopStrayRun) before it touches the sandbox.
	if err := os.WriteFile(r.dir.runPidFile(id), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		r.log.Warn("record the pid of run", "sandbox", id, "err", err)
	}
	err = cmd.Wait()
	os.Remove(r.dir.runPidFile(id))
	r.log.Debug("runtime command", "args", append(verb, "--detach", id), "took", time.Since(began).Round(time.Microsecond), "err", err)
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.name, verb[0], err)
	}
	return nil
}

// stopStrayRun kills the `run --detach` of id that a killed daemon left
// going, if any, with everything it started (its session: runc's init,
// runsc's sandbox and gofer), and waits until they are gone, so that a
// Delete or Start of id never races with a half-made container. The pid is
// only trusted if that process's command line still names id.
func (r *runner) stopStrayRun(ctx context.Context, id string) {
	b, err := os.ReadFile(r.dir.runPidFile(id))
	if err != nil {
		return
	}
	defer os.Remove(r.dir.runPidFile(id))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte(id)) || !bytes.Contains(cmdline, []byte("run")) {
		return // finished, or the pid is another process's now
	}
	r.log.Warn("stopping a run an earlier daemon left going", "sandbox", id, "pid", pid)
	syscall.Kill(-pid, syscall.SIGKILL) // its session's process group
	syscall.Kill(pid, syscall.SIGKILL)
	waitExit(ctx, pid, 5*time.Second)
}

// state returns the runtime's state of container id, or nil when the
// runtime has no such container. A failing `state` is taken as "no such
// container" only when `list` agrees, so that a runtime error never makes a
// running sandbox look gone.
//
// A frozen sandbox (see Freeze) is not asked about, because `runsc state`
// signals the container through its sentry and so blocks until it is
// thawed: it is "paused" (as runc says), with the pid its run wrote to the
// pid file.
func (r *runner) state(ctx context.Context, id string) (*specs.State, error) {
	if st := r.cg.frozenState(id); st != nil {
		return st, nil
	}
	root := r.rootOf(id)
	out, err := r.ask(ctx, root, "state", id)
	if err == nil {
		var st specs.State
		if err := json.Unmarshal(out, &st); err != nil {
			return nil, fmt.Errorf("%s state: %w", r.name, err)
		}
		return &st, nil
	}
	listed, lerr := r.list(ctx, root)
	if lerr != nil {
		return nil, err
	}
	if i := slices.IndexFunc(listed, func(c specs.State) bool { return c.ID == id }); i >= 0 {
		return nil, err
	}
	return nil, nil
}

// container returns what tearing down sandbox id's container needs to
// know of it: nil when the runtime has no such container. Under runsc that
// is whether the runtime's root holds a state file of id's (see
// rootEntryOwner), read from the directory rather than asked of `runsc
// state`: a process of about 10 ms of CPU, half of a destroy's runtime
// commands. The state it returns then has the id and status "unknown" and
// nothing else, all that teardown uses under runsc, which force-deletes
// whatever the runtime knows and asks the runtime itself only when that
// fails. A frozen sandbox's is frozenState's, as in state. Under runc and
// crun, whose teardown kills the container's pid first, it is state.
func (r *runner) container(ctx context.Context, id string) (*specs.State, error) {
	if r.name != RuntimeRunsc {
		return r.state(ctx, id)
	}
	if st := r.cg.frozenState(id); st != nil {
		return st, nil
	}
	entries, err := os.ReadDir(r.rootOf(id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".state") && rootEntryOwner(e.Name()) == id {
			return &specs.State{Version: specs.Version, ID: id, Status: "unknown"}, nil
		}
	}
	return nil, nil
}

// stoppedEarly reports whether sandbox id's container, started a moment
// ago, no longer runs: its process (the runtime's pid file: runsc's
// sandbox, runc's init) is gone or a zombie, or, without a pid file to
// read, the runtime says so. Reading /proc costs microseconds; asking the
// runtime starts a process, tens of milliseconds of CPU under runsc,
// which every start slower than the check's interval used to pay.
func (r *runner) stoppedEarly(ctx context.Context, id string) bool {
	if pid, err := r.dir.pid(id); err == nil && pid > 1 {
		return !processAlive(pid)
	}
	st, err := r.state(ctx, id)
	return err == nil && (st == nil || st.Status != "running")
}

// list returns the runtime's containers under root.
func (r *runner) list(ctx context.Context, root string) ([]specs.State, error) {
	out, err := r.ask(ctx, root, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	out = bytes.TrimSpace(out)
	if len(out) == 0 || string(out) == "null" {
		return nil, nil
	}
	var listed []specs.State
	if err := json.Unmarshal(out, &listed); err != nil {
		return nil, fmt.Errorf("%s list: %w", r.name, err)
	}
	return listed, nil
}

// removeLeftovers removes what the runtime keeps for id once the
// container is gone: its own root, and its entries in the shared one
// (runc's state directory, runsc's state, lock and socket files). A
// `delete --force` removes most of them too; this is for a container whose
// create was cut short, which the runtime cannot delete.
func (r *runner) removeLeftovers(id string) error {
	if err := os.RemoveAll(r.dir.runtimeRoot(id)); err != nil {
		return err
	}
	return r.removeEntries(func(owner string) bool { return owner == id })
}

// removeStrays removes what the shared root holds for sandboxes not in
// keep: a container's lock file that outlived its delete (about one
// delete in thirty, when 980 went 4 at a time), or what a delete cut
// short left. runsc looks for a sandbox's files by matching every name in
// the root, so each stray slows every start.
func (r *runner) removeStrays(keep map[string]bool) error {
	return r.removeEntries(func(owner string) bool { return !keep[owner] })
}

// removeEntries removes the entries of the shared root that belong to
// a sandbox (see rootEntryOwner) for which remove reports true.
func (r *runner) removeEntries(remove func(owner string) bool) error {
	entries, err := os.ReadDir(r.dir.root())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if owner := rootEntryOwner(e.Name()); owner != "" && remove(owner) {
			if err := os.RemoveAll(filepath.Join(r.dir.root(), e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// rootEntryOwner returns the sandbox id that an entry of the runtime's
// root belongs to (runc's directory ID; runsc's ID_sandbox:ID.state and
// .lock, and runsc-ID.sock), or "" for an entry of no sandbox's (the
// shared null-netns).
func rootEntryOwner(name string) string {
	if s, ok := strings.CutPrefix(name, "runsc-"); ok {
		name = strings.TrimSuffix(s, ".sock")
	}
	if i := strings.IndexByte(name, '_'); i > 0 {
		name = name[:i]
	}
	if validID(name) != nil {
		return ""
	}
	return name
}

// logTail returns the last lines of the sandbox's console and runtime
// logs, for an error message.
func (r *runner) logTail(id string) string {
	var b strings.Builder
	for _, p := range []string{r.dir.consoleLog(id), r.dir.runtimeLog(id)} {
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
func (r *runner) holdBusy(id string) *os.File {
	f, err := os.OpenFile(r.dir.busyFile(id), os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
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
// (see holdBusy), at most idleTimeout or until ctx ends, and reports
// whether none does.
func (r *runner) waitIdle(ctx context.Context, id string) bool {
	f, err := os.OpenFile(r.dir.busyFile(id), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return true // no command ever ran on it
	}
	if err != nil {
		return false
	}
	defer f.Close()
	deadline := time.Now().Add(idleTimeout)
	for {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			return true
		}
		if time.Now().After(deadline) {
			r.log.Error("recover: a runtime command of a dead daemon still runs on this sandbox", "sandbox", id, "waited", idleTimeout)
			return false
		}
		if sleep(ctx, 10*time.Millisecond) != nil {
			return false
		}
	}
}
