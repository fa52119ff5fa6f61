package oci

import (
	"context"
	"errors"
	"fmt"
	"github.com/hearth/hearth/internal/mountinfo"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
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
		}
	}
	return m, nil
}

// cgroupRel is the sandbox's cgroup relative to a hierarchy's root.
func (d *Driver) cgroupRel(id string) string {
	return filepath.FromSlash(cgroupsPath(d.cgroupParent, id))
}

// cgroupLeftovers returns the sandbox's cgroup directories that exist, in
// any hierarchy.
func (d *Driver) cgroupLeftovers(id string) []string {
	var left []string
	for _, mnt := range d.cgroups.all {
		p := filepath.Join(mnt, d.cgroupRel(id))
		if _, err := os.Stat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// cgroupOOM reports whether the sandbox's memory cgroup has killed a task
// for being over its limit: the oom_kill counter of v1 memory.oom_control
// (Linux 4.13+), or of v2 memory.events. False when there is no cgroup.
func (d *Driver) cgroupOOM(id string) bool {
	rel := d.cgroupRel(id)
	if d.cgroups.memory != "" {
		if n, ok := readKeyed(filepath.Join(d.cgroups.memory, rel, "memory.oom_control"), "oom_kill"); ok {
			return n > 0
		}
	}
	if d.cgroups.v2 != "" {
		if n, ok := readKeyed(filepath.Join(d.cgroups.v2, rel, "memory.events"), "oom_kill"); ok {
			return n > 0
		}
	}
	return false
}

// readKeyed reads the value of key in a cgroup "key value" file.
func readKeyed(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// removeCgroups removes the sandbox's cgroup directories in every
// hierarchy, children first. A cgroup that still has tasks cannot be removed
// (EBUSY): their tasks are killed and removal retried until ctx ends or 10
// seconds pass. It fails naming what is left.
func (d *Driver) removeCgroups(ctx context.Context, id string) error {
	left := d.cgroupLeftovers(id)
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
