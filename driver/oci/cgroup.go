package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hearth/hearth/internal/kernfile"
	"github.com/hearth/hearth/internal/mountinfo"
)

// cgroupMounts are the host's cgroup hierarchies, as the daemon sees them.
// On a v1 or hybrid host there is one per v1 controller (or group of
// controllers mounted together), named ones like name=systemd, and on a
// hybrid host the unified (v2) hierarchy beside them; on a v2 host, only
// that one. The runtimes create <parent>/<id> in every hierarchy they use,
// and the driver checks every one of them, so a hierarchy a runtime forgot
// is caught, not leaked.
type cgroupMounts struct {
	all     []string // every hierarchy's mount point, one per hierarchy
	memory  string   // the v1 memory controller's, if mounted
	freezer string   // the v1 freezer controller's, if mounted
	cpu     string   // the v1 cpu controller's, if mounted
	cpuacct string   // the v1 cpuacct controller's, if mounted
	cpuset  string   // the v1 cpuset controller's, if mounted
	pids    string   // the v1 pids controller's, if mounted
	v2      string   // the unified hierarchy's, if mounted
}

// readCgroupMounts parses mountinfo (proc(5)) for cgroup and cgroup2
// mounts whose root is the hierarchy's root.
func readCgroupMounts(path string) (cgroupMounts, error) {
	mounts, err := mountinfo.Read(path)
	if err != nil {
		return cgroupMounts{}, fmt.Errorf("oci: cgroup mounts: %w", err)
	}
	var m cgroupMounts
	seen := map[string]bool{} // hierarchies by their super options
	for _, mnt := range mounts {
		if mnt.Root != "/" {
			continue
		}
		switch mnt.FSType {
		case "cgroup2":
			if seen["cgroup2"] {
				continue
			}
			seen["cgroup2"] = true
			m.v2 = mnt.Point
			m.all = append(m.all, mnt.Point)
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(mnt.SuperOptions, ",") {
				if o != "rw" && o != "ro" && !strings.HasPrefix(o, "release_agent=") && o != "clone_children" && o != "noprefix" && o != "xattr" && o != "cpuset_v2_mode" {
					ctrls = append(ctrls, o)
				}
			}
			slices.Sort(ctrls)
			key := strings.Join(ctrls, ",")
			if seen[key] {
				continue
			}
			seen[key] = true
			m.all = append(m.all, mnt.Point)
			if slices.Contains(ctrls, "memory") {
				m.memory = mnt.Point
			}
			if slices.Contains(ctrls, "freezer") {
				m.freezer = mnt.Point
			}
			if slices.Contains(ctrls, "cpu") {
				m.cpu = mnt.Point
			}
			if slices.Contains(ctrls, "cpuacct") {
				m.cpuacct = mnt.Point
			}
			if slices.Contains(ctrls, "cpuset") {
				m.cpuset = mnt.Point
			}
			if slices.Contains(ctrls, "pids") {
				m.pids = mnt.Point
			}
		}
	}
	return m, nil
}

// cgroups are the sandboxes' cgroups, <parent>/<id> in every hierarchy
// of mounts: what is left of one, whether its memory cgroup killed a task,
// its freezer, its memory limits, and their removal. The runtimes create
// them (the bundle names the path); the driver reads and removes them.
type cgroups struct {
	mounts cgroupMounts
	parent string // Options.CgroupParent
	dir    stateDir
	log    *slog.Logger
}

// live returns the host pid of sandbox id's container process (what its
// runtime wrote to the pid file: runsc's sandbox, runc's init) if that
// process is alive and in the sandbox's cgroup. The cgroup is what tells
// the container's process from another that the kernel gave a dead one's
// pid to. It reads three small files, microseconds.
func (c *cgroups) live(id string) (int, bool) {
	pid, err := c.dir.pid(id)
	if err != nil || pid <= 1 || !processAlive(pid) {
		return 0, false
	}
	b, err := kernfile.Read("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return 0, false
	}
	want := cgroupsPath(c.parent, id)
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		_, path, ok := strings.Cut(line[strings.IndexByte(line, ':')+1:], ":")
		if ok && (path == want || strings.HasPrefix(path, want+"/")) {
			return pid, true
		}
	}
	return 0, false
}

// rel is the sandbox's cgroup relative to a hierarchy's root.
func (c *cgroups) rel(id string) string {
	return filepath.FromSlash(cgroupsPath(c.parent, id))
}

// leftovers returns the sandbox's cgroup directories that exist, in
// any hierarchy.
func (c *cgroups) leftovers(id string) []string {
	var left []string
	for _, mnt := range c.mounts.all {
		p := filepath.Join(mnt, c.rel(id))
		if _, err := os.Stat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// oom reports whether the sandbox's memory cgroup has killed a task
// for being over its limit: the oom_kill counter of v1 memory.oom_control
// (Linux 4.13+), or of v2 memory.events. False when there is no cgroup.
func (c *cgroups) oom(id string) bool {
	rel := c.rel(id)
	if c.mounts.memory != "" {
		if n, ok := readKeyed(filepath.Join(c.mounts.memory, rel, "memory.oom_control"), "oom_kill"); ok {
			return n > 0
		}
	}
	if c.mounts.v2 != "" {
		if n, ok := readKeyed(filepath.Join(c.mounts.v2, rel, "memory.events"), "oom_kill"); ok {
			return n > 0
		}
	}
	return false
}

// memoryLimit returns the memory limit of the sandbox whose bundle's
// config.json is at config (the cgroup's, headroom included), 0 when it
// has none.
func memoryLimit(config string) int64 {
	b, err := os.ReadFile(config)
	if err != nil {
		return 0
	}
	var spec specs.Spec
	if json.Unmarshal(b, &spec) != nil || spec.Linux == nil || spec.Linux.Resources == nil ||
		spec.Linux.Resources.Memory == nil || spec.Linux.Resources.Memory.Limit == nil {
		return 0
	}
	return max(0, *spec.Linux.Resources.Memory.Limit)
}

// memoryLimitFiles returns the files of sandbox id's memory cgroup that
// hold its limits, in the order they are raised (v1: memsw, which must
// stay at least the limit, before the limit; v2: memory.max).
func (c *cgroups) memoryLimitFiles(id string) []string {
	rel := c.rel(id)
	if c.mounts.memory != "" {
		dir := filepath.Join(c.mounts.memory, rel)
		if _, err := os.Stat(dir); err == nil {
			return []string{filepath.Join(dir, "memory.memsw.limit_in_bytes"), filepath.Join(dir, "memory.limit_in_bytes")}
		}
	}
	if c.mounts.v2 != "" {
		dir := filepath.Join(c.mounts.v2, rel)
		if _, err := os.Stat(dir); err == nil {
			return []string{filepath.Join(dir, "memory.max")}
		}
	}
	return nil
}

// raisedLimit is sandbox id's memory cgroup with its limits raised above
// old (the values of files before) for a memory image; marker records old
// for Recover.
type raisedLimit struct {
	log    *slog.Logger
	id     string
	files  []string
	old    map[string]string
	marker string
}

// raiseMemoryLimit raises each limit of sandbox id's memory cgroup that is
// set by by bytes, and returns it raised, for set and lower. It records
// the old limits in the sandbox's raisedMarker first, for Recover.
func (c *cgroups) raiseMemoryLimit(id string, by int64) (*raisedLimit, error) {
	r := &raisedLimit{log: c.log, id: id, old: map[string]string{}}
	if by <= 0 {
		return r, nil
	}
	r.files = c.memoryLimitFiles(id)
	if len(r.files) == 0 {
		return r, nil
	}
	for _, f := range r.files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // no swap accounting: no memsw
		}
		r.old[f] = strings.TrimSpace(string(b))
	}
	rec, _ := json.Marshal(r.old)
	r.marker = c.dir.raisedMarker(id)
	if err := os.WriteFile(r.marker, rec, 0o600); err != nil {
		return nil, err
	}
	if err := r.set(by); err != nil {
		r.lower()
		return nil, err
	}
	return r, nil
}

// set sets each limit that was set to its old value plus by, in the order
// of a raise when it grows and in reverse when it shrinks.
func (r *raisedLimit) set(by int64) error {
	order := slices.Clone(r.files)
	if cur, err := os.ReadFile(order[len(order)-1]); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(cur)), 10, 64); err == nil && r.raised(order[len(order)-1], by) < v {
			slices.Reverse(order)
		}
	}
	for _, f := range order {
		v := r.raised(f, by)
		if v < 0 {
			continue
		}
		if err := os.WriteFile(f, []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// raised returns file f's old limit plus by, or -1 when it had none to
// raise ("max", v1's unlimited, or unreadable).
func (r *raisedLimit) raised(f string, by int64) int64 {
	v, err := strconv.ParseInt(r.old[f], 10, 64)
	if err != nil || v >= 1<<62 {
		return -1
	}
	return v + by
}

// lower sets the limits back to what they were. A sandbox that is gone
// meanwhile has nothing to lower.
func (r *raisedLimit) lower() {
	if r.marker == "" {
		return
	}
	if err := setLimits(r.files, r.old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Error("lower the memory limit raised for a checkpoint; the next restart does", "sandbox", r.id, "err", err)
		return
	}
	os.Remove(r.marker)
}

// setLimits writes the old values of files back, in the reverse order of
// a raise.
func setLimits(files []string, old map[string]string) error {
	var errs []error
	for i := len(files) - 1; i >= 0; i-- {
		if v, ok := old[files[i]]; ok {
			if err := os.WriteFile(files[i], []byte(v), 0o644); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// lowerRaised lowers the memory limits a memory checkpoint raised and a
// daemon killed in between left raised (their sandboxes' raisedMarker
// holds the old ones), for Recover.
func (c *cgroups) lowerRaised() {
	sandboxes, _ := filepath.Glob(filepath.Join(c.dir.sandboxes(), "*", raisedMarkerName))
	for _, marker := range sandboxes {
		id := filepath.Base(filepath.Dir(marker))
		old := map[string]string{}
		if b, err := os.ReadFile(marker); err == nil && json.Unmarshal(b, &old) == nil {
			if err := setLimits(c.memoryLimitFiles(id), old); err != nil {
				c.log.Error("recover: lower a memory limit a checkpoint raised", "sandbox", id, "err", err)
				continue
			}
		}
		os.Remove(marker)
	}
}

// readKeyed reads the value of key in a cgroup "key value" file.
func readKeyed(path, key string) (int64, bool) {
	b, err := kernfile.Read(path)
	if err != nil {
		return 0, false
	}
	return parseKeyed(b, key)
}

// parseKeyed returns the value of key in b, a flat keyed file's content
// ("key value" lines).
func parseKeyed(b []byte, key string) (int64, bool) {
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// remove removes the sandbox's cgroup directories in every
// hierarchy, children first. A cgroup that still has tasks cannot be removed
// (EBUSY): their tasks are killed and removal retried until ctx ends or 10
// seconds pass. It fails naming what is left.
func (c *cgroups) remove(ctx context.Context, id string) error {
	left := c.leftovers(id)
	if len(left) == 0 {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var errs []error
		for _, p := range left {
			if err := removeCgroupTree(p); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("cgroups left: %w", errors.Join(errs...))
		}
		time.Sleep(delay)
	}
}

// removeCgroupTree removes the cgroup directory p and its children,
// deepest first, killing the tasks of any cgroup that is still busy. A cgroup
// directory holds only the kernel's files, which rmdir does not mind.
func removeCgroupTree(p string) error {
	var dirs []string
	err := filepath.WalkDir(p, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if de.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range slices.Backward(dirs) {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			continue
		}
		if errors.Is(err, syscall.EBUSY) {
			killTasks(dir)
		}
		errs = append(errs, fmt.Errorf("%s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// killTasks sends SIGKILL to every process in the cgroup at dir.
func killTasks(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
