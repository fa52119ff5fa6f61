package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// stateDir is the layout of the driver's state directory (Options.StateDir;
// see the package doc): where each file of it is, and what the markers in
// a sandbox's directory say. It holds nothing but the directory's path, so
// every part of the driver keeps a copy.
type stateDir struct {
	path string
}

// claim creates the state directory and records that runtime owns it, or
// refuses a directory another runtime owns: each runtime has its own
// --root format, so sandboxes of one are invisible to another.
func (s stateDir) claim(runtime string) error {
	for _, dir := range []string{s.path, s.root(), s.sandboxes()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("oci: state dir: %w", err)
		}
	}
	marker := filepath.Join(s.path, "runtime")
	b, err := os.ReadFile(marker)
	switch {
	case err == nil:
		if owner := strings.TrimSpace(string(b)); owner != runtime {
			return fmt.Errorf("oci: state dir %s belongs to runtime %s, not %s", s.path, owner, runtime)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return os.WriteFile(marker, []byte(runtime+"\n"), 0o600)
	default:
		return fmt.Errorf("oci: state dir: %w", err)
	}
}

// root is the runtime's shared root: the --root of containers made before
// each sandbox had its own (runtimeRoot), and runsc's --shared-root.
func (s stateDir) root() string { return filepath.Join(s.path, "root") }

// nullNetns is the empty network namespace runsc's gofers share, which the
// first runsc sandbox bind-mounts in the shared root.
func (s stateDir) nullNetns() string { return filepath.Join(s.root(), "null-netns") }

// runtimeRoot is sandbox id's own --root, made by each start and removed
// with its container (see runner.rootOf).
func (s stateDir) runtimeRoot(id string) string { return filepath.Join(s.sandboxDir(id), "runtime") }

// sandboxes holds one directory per sandbox.
func (s stateDir) sandboxes() string { return filepath.Join(s.path, "sandboxes") }

// memory holds the memory images, one directory per key (see images.go).
func (s stateDir) memory() string { return filepath.Join(s.path, "memory") }

// memoryDir is memory image key's directory.
func (s stateDir) memoryDir(key string) string { return filepath.Join(s.memory(), key) }

// Per-sandbox paths.
func (s stateDir) sandboxDir(id string) string { return filepath.Join(s.sandboxes(), id) }
func (s stateDir) socketDir(id string) string  { return filepath.Join(s.sandboxDir(id), "run") }
func (s stateDir) consoleLog(id string) string { return filepath.Join(s.sandboxDir(id), "console.log") }
func (s stateDir) runtimeLog(id string) string { return filepath.Join(s.sandboxDir(id), "runtime.log") }
func (s stateDir) oomMarker(id string) string  { return filepath.Join(s.sandboxDir(id), "oom") }
func (s stateDir) pidFile(id string) string    { return filepath.Join(s.sandboxDir(id), "pid") }
func (s stateDir) config(id string) string     { return filepath.Join(s.sandboxDir(id), "config.json") }

// pid is the runtime's pid of sandbox id's container process (runsc's
// sandbox, runc's init), as its run wrote it to pidFile.
func (s stateDir) pid(id string) (int, error) {
	b, err := readTrimmed(s.pidFile(id))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(b)
}

// idsFile is where a sandbox's directory records the slot of the user
// namespace range it claimed (see userns.go).
func (s stateDir) idsFile(id string) string { return filepath.Join(s.sandboxDir(id), "ids") }

// busyFile is sandbox id's busy lock (see runner.holdBusy).
func (s stateDir) busyFile(id string) string { return filepath.Join(s.sandboxDir(id), "busy") }

// raisedMarker holds sandbox id's memory cgroup's limits while a memory
// checkpoint has them raised (see cgroups.raiseMemoryLimit).
func (s stateDir) raisedMarker(id string) string {
	return filepath.Join(s.sandboxDir(id), raisedMarkerName)
}

// pausedMarker exists while runsc has sandbox id paused (see freezer.pause).
func (s stateDir) pausedMarker(id string) string { return filepath.Join(s.sandboxDir(id), "paused") }

// runPidFile holds the pid of the runtime's `run --detach` of id while it
// works (see runner.create).
func (s stateDir) runPidFile(id string) string { return filepath.Join(s.sandboxDir(id), "run.pid") }

// stoppedMarker exists while the sandbox is stopped by Stop (or by the
// cleanup of a failed wake): its container is known to be deleted, so State,
// Stop and Start skip asking the runtime. Only Start removes it, under the
// id's lock and before it creates a container.
func (s stateDir) stoppedMarker(id string) string {
	return filepath.Join(s.sandboxDir(id), "stopped")
}

// quietMarker says a memory checkpoint has sandbox id's agent quiet: Dial
// waits for it instead of failing.
func (s stateDir) quietMarker(id string) string { return filepath.Join(s.sandboxDir(id), "quiet") }

// known reports whether the driver has a record of id (its directory).
func (s stateDir) known(id string) (bool, error) {
	_, err := os.Stat(s.sandboxDir(id))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// stopped reports whether id's stopped marker exists.
func (s stateDir) stopped(id string) bool { return exists(s.stoppedMarker(id)) }

// markStopped records that id's container is deleted.
func (s stateDir) markStopped(id string) error {
	return os.WriteFile(s.stoppedMarker(id), nil, 0o600)
}

// quiet reports whether sandbox id's agent is quiet for a memory
// checkpoint.
func (s stateDir) quiet(id string) bool { return exists(s.quietMarker(id)) }

// exists reports whether path can be stat'ed.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
