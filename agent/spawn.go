package agent

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/sandbox"
)

const (
	// shellPath runs shell scripts.
	shellPath = "/bin/sh"
	// maxArgScript is the largest script passed as `sh -c script`. Linux
	// caps one argument at 128 KiB (MAX_ARG_STRLEN) and all of them with
	// the environment at a quarter of the stack limit; larger scripts go
	// through a memfd at fd 3 instead, which has no limit.
	maxArgScript = 64 << 10
	// maxScript bounds a script sent after the request (Request.ShellSize):
	// it is held in memory, charged to the sandbox.
	maxScript = 256 << 20
	// defaultPath is searched when the command's environment has no PATH.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// command is an exec request resolved against the server's options: what
// to execve, with which environment, where.
type command struct {
	path    string
	argv    []string
	env     []string // with placeholders for secrets
	dir     string
	script  *os.File    // a large shell script for fd 3, or nil
	secrets []secretVar // put in env at the exec stop (see putSecrets)
}

// close releases the script and wipes the secrets: once the command has
// started, or failed to, they are the command's alone.
func (c *command) close() {
	if c.script != nil {
		c.script.Close()
		c.script = nil
	}
	wipeSecrets(c.secrets)
}

// command resolves req: the merged environment (with TERM on a terminal,
// see withDefaultTerm, and placeholders for secrets), the working
// directory, and the program (looked up in the merged PATH) or the shell
// and its script. script, when not nil, is the script that followed the
// request, and secrets the secrets that came with it; command takes both
// over (see command.close).
func (s *Server) command(req sandbox.ExecRequest, script *os.File, secrets []secretVar) (*command, error) {
	over := req.Env
	if req.TTY != nil {
		over = withDefaultTerm(over)
	}
	c := &command{env: withSecretPlaceholders(mergeEnv(s.opts.Env, over), secrets), script: script, secrets: secrets}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	dir, err := s.resolve(cmp.Or(req.Cwd, s.opts.WorkDir))
	if err != nil {
		return nil, err
	}
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, sandbox.Errorf(sandbox.CodeNotFound, "working directory %s does not exist", dir).
			WithHint("create it first, or run in another cwd")
	case err != nil:
		return nil, fsError(err, dir)
	case !fi.IsDir():
		return nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "working directory %s is not a directory", dir)
	}
	c.dir = dir

	if req.Shell == "" && script == nil {
		c.path, err = lookPath(req.Argv[0], envValue(c.env, "PATH"), dir, s.opts.UID, s.opts.GID)
		if err != nil {
			return nil, err
		}
		c.argv = req.Argv
		ok = true
		return c, nil
	}
	if _, err := os.Stat(shellPath); err != nil {
		return nil, sandbox.Errorf(sandbox.CodeNotFound, "this sandbox has no %s to run a shell script", shellPath).
			WithHint("run the program with argv instead")
	}
	c.path = shellPath
	ok = true
	if c.script == nil && len(req.Shell) <= maxArgScript {
		c.argv = []string{"sh", "-c", req.Shell}
		return c, nil
	}
	if c.script == nil {
		if c.script, err = newScriptFile(); err != nil {
			return nil, err
		}
		if _, err := c.script.WriteString(req.Shell); err != nil {
			return nil, fsError(err, "the script's memory file")
		}
	}
	sealScript(c.script)
	c.argv = []string{"sh", "/proc/self/fd/3"}
	return c, nil
}

// newScriptFile returns an empty memfd for a large script, or, where
// memfd_create is missing, an unlinked temporary file: either way nothing
// is left behind. The shell reads it as /proc/self/fd/3.
func newScriptFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("hearth-script", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err == nil {
		return os.NewFile(uintptr(fd), "hearth-script"), nil
	}
	f, err := os.OpenFile(os.TempDir(), os.O_RDWR|unix.O_TMPFILE, 0o444)
	if err != nil {
		return nil, fsError(err, "a temporary file for the script")
	}
	return f, nil
}

// sealScript makes a memfd script immutable, so the command cannot change
// what its shell is reading; an O_TMPFILE script cannot be sealed, and is
// reachable only through the descriptor anyway.
func sealScript(f *os.File) {
	unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)
}

// receiveScript reads the size bytes of script that follow an exec request
// into a script file.
func receiveScript(conn io.Reader, size int64) (*os.File, error) {
	f, err := newScriptFile()
	if err != nil {
		return nil, err
	}
	var buf []byte
	for n := int64(0); n < size; {
		kind, payload, err := ReadFrame(conn, buf)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %v", errBroken, err)
		}
		buf = payload
		if kind != FrameData || n+int64(len(payload)) > size {
			f.Close()
			return nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: the script must follow the exec request in exactly %d bytes of data frames", size)
		}
		if bytes.IndexByte(payload, 0) >= 0 {
			f.Close()
			return nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "exec shell contains a NUL byte")
		}
		if _, err := f.Write(payload); err != nil {
			f.Close()
			return nil, fsError(err, "the script's memory file")
		}
		n += int64(len(payload))
	}
	return f, nil
}

// mergeEnv returns base ("K=V", the last of duplicates winning) with over
// merged in: a key of over replaces base's, new keys follow in name order.
func mergeEnv(base []string, over map[string]string) []string {
	out := make([]string, 0, len(base)+len(over))
	at := map[string]int{}
	for _, kv := range base {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, replaced := over[k]; replaced {
			continue
		}
		if i, dup := at[k]; dup {
			out[i] = kv
			continue
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+over[k])
	}
	return out
}

// withDefaultTerm returns env with TERM set to defaultTerm, unless env
// sets it: a command on a terminal runs with the caller's TERM, or the
// agent's, never with one the sandbox's environment says for its
// commands without a terminal.
func withDefaultTerm(env map[string]string) map[string]string {
	if _, set := env["TERM"]; set {
		return env
	}
	out := make(map[string]string, len(env)+1)
	maps.Copy(out, env)
	out["TERM"] = defaultTerm
	return out
}

func envValue(env []string, key string) string {
	for _, kv := range slices.Backward(env) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath finds name as execvp would for the user uid:gid: a name with a
// slash as is (relative to dir), others in path (defaultPath when empty;
// relative entries are relative to dir).
func lookPath(name, path, dir string, uid, gid int) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return "", sandbox.Errorf(sandbox.CodeNotFound, "no such program: %s", name).
				WithHint("check the path; relative paths start at the working directory")
		case !fi.Mode().IsRegular() || !executable(fi, uid, gid):
			return "", sandbox.Errorf(sandbox.CodePermissionDenied, "%s is not executable by uid %d", name, uid).
				WithHint("chmod +x it, or run it through its interpreter")
		}
		return p, nil
	}
	if path == "" {
		path = defaultPath
	}
	denied := ""
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if executable(fi, uid, gid) {
			return p, nil
		}
		if denied == "" {
			denied = p
		}
	}
	if denied != "" {
		return "", sandbox.Errorf(sandbox.CodePermissionDenied, "%s is not executable by uid %d", denied, uid).
			WithHint("chmod +x it, or run it through its interpreter")
	}
	return "", sandbox.Errorf(sandbox.CodeNotFound, "command not found: %s", name).
		WithHint("check the name, give a full path, or set PATH (searched: %s)", path)
}

// executable reports whether uid:gid (with no supplementary groups) may
// execute fi by its mode bits; root may when any x bit is set.
func executable(fi fs.FileInfo, uid, gid int) bool {
	m := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok || uid == 0:
		return m&0o111 != 0
	case int(st.Uid) == uid:
		return m&0o100 != 0
	case int(st.Gid) == gid:
		return m&0o010 != 0
	}
	return m&0o001 != 0
}

// start starts c with fds as its fds 0, 1 and 2, and with tty, fd 0 as
// its controlling terminal. It returns the process and a function that
// waits for its exit status: through the reaper when there is one, through
// os.Process.Wait otherwise.
func (s *Server) start(c *command, fds [3]*os.File, tty bool) (*os.Process, func() syscall.WaitStatus, error) {
	files := fds[:]
	if c.script != nil {
		files = append(files, c.script)
	}
	// Setctty makes the child, the leader of its new session, take fd 0
	// (Ctty) as its controlling terminal: TIOCSCTTY after setsid, before
	// the ptrace stop and the exec.
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: tty}
	if os.Geteuid() == 0 || s.opts.UID != os.Geteuid() || s.opts.GID != os.Getegid() {
		sys.Credential = &syscall.Credential{
			Uid:    uint32(s.opts.UID),
			Gid:    uint32(s.opts.GID),
			Groups: []uint32{}, // setgroups(0): no supplementary groups
		}
	}
	attr := &os.ProcAttr{Dir: c.dir, Env: c.env, Files: files, Sys: sys}
	fork := func() (*os.Process, *syscall.WaitStatus, error) {
		p, err := os.StartProcess(c.path, c.argv, attr)
		return p, nil, err
	}
	// Traced up to its exec when it has rlimits to set (limits.go) or
	// secrets to put in its environment (secretenv.go).
	if l := (limits{nproc: s.opts.NProc, uid: s.opts.UID, gid: s.opts.GID}); !l.none() || len(c.secrets) > 0 {
		sys.Ptrace = true
		atExec := func(pid int) (bool, error) {
			ok, err := l.apply(pid)
			if err != nil {
				return ok, fmt.Errorf("set the command's rlimits: %w", err)
			}
			if err := putSecrets(pid, c.env, c.secrets); err != nil {
				return ok, fmt.Errorf("give the command its secrets: %w", err)
			}
			return ok, nil
		}
		fork = func() (*os.Process, *syscall.WaitStatus, error) {
			return startTraced(func() (*os.Process, error) { return os.StartProcess(c.path, c.argv, attr) }, atExec)
		}
	}

	var (
		p    *os.Process
		wait func() syscall.WaitStatus
		err  error
	)
	if s.reaper != nil {
		var ch <-chan syscall.WaitStatus
		p, ch, err = s.reaper.start(fork)
		wait = func() syscall.WaitStatus { return <-ch }
	} else {
		var ended *syscall.WaitStatus
		p, ended, err = fork()
		wait = func() syscall.WaitStatus {
			if ended != nil {
				return *ended
			}
			st, err := p.Wait()
			if err != nil {
				return syscall.WaitStatus(0)
			}
			return st.Sys().(syscall.WaitStatus)
		}
	}
	if err != nil {
		return nil, nil, startError(err, c)
	}
	s.guard.poke() // a command runs: the memory guard looks until none is left
	return p, wait, nil
}

// startError explains why c did not start.
func startError(err error, c *command) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	name := c.path
	switch errno {
	case syscall.ENOENT:
		return sandbox.Errorf(sandbox.CodeNotFound, "cannot run %s: no such file (or its #! interpreter is missing)", name)
	case syscall.EACCES, syscall.EPERM:
		return sandbox.Errorf(sandbox.CodePermissionDenied, "cannot run %s: permission denied", name).
			WithHint("check the program's mode, its file system's noexec flag and the working directory's permissions")
	case syscall.ENOEXEC:
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "cannot run %s: not an executable format", name).
			WithHint("add a #! line, or run it through its interpreter")
	case syscall.E2BIG:
		return sandbox.Errorf(sandbox.CodeTooLarge, "cannot run %s: the argument list and environment are too long", name).
			WithHint("pass large data through stdin or a file")
	case syscall.ETXTBSY:
		return sandbox.Errorf(sandbox.CodeUnavailable, "cannot run %s: the file is being written", name).WithHint("retry")
	case syscall.EAGAIN, syscall.ENOMEM:
		return sandbox.Errorf(sandbox.CodeUnavailable, "cannot run %s: the sandbox is out of processes or memory", name).
			WithHint("wait for other commands to end, or raise the sandbox's limits")
	}
	return err
}
