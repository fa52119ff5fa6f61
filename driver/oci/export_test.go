package oci

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hearth/hearth/driver"
)

// Internals the external tests reach.
var (
	BundleSpec       = bundleSpec
	DialUnix         = dialUnix
	RuntimeFlags     = runtimeFlags
	NetworkFlags     = networkFlags
	ReadCgroupMounts = func(mountinfo string) (all []string, memory, v2 string, err error) {
		m, err := readCgroupMounts(mountinfo)
		return m.all, m.memory, m.v2, err
	}
	// FreezerMounts returns the v1 freezer hierarchy and the unified one.
	FreezerMounts = func(mountinfo string) (v1, v2 string, err error) {
		m, err := readCgroupMounts(mountinfo)
		return m.freezer, m.v2, err
	}
	// FreezeCgroup freezes the cgroup dir as Freeze does.
	FreezeCgroup = func(ctx context.Context, dir string, v2 bool) error {
		if v2 {
			return freezeV2(ctx, dir)
		}
		return freezeV1(ctx, dir)
	}
	ThawCgroup = thaw
)

// Leftovers describes what the host still holds for sandbox id: its
// directory, the runtime's state for it, its cgroups in any hierarchy, its
// network attachment, and processes that name it on their command line (runsc's sandbox and gofer)
// or sit in one of its cgroups.
func (d *Driver) Leftovers(id string) []string {
	var left []string
	if _, err := os.Stat(d.sandboxDir(id)); err == nil {
		left = append(left, "directory "+d.sandboxDir(id))
	}
	if m, _ := filepath.Glob(filepath.Join(d.root, "*"+id+"*")); len(m) > 0 {
		left = append(left, "runtime state "+strings.Join(m, " "))
	}
	for _, p := range d.cgroupLeftovers(id) {
		left = append(left, "cgroup "+p)
	}
	if d.net != nil && d.net.Attached(id) {
		left = append(left, "network attachment: namespace "+d.net.Namespace(id)+", link "+d.net.Link(id))
	}
	cg := d.cgroupRel(id)
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		cgroups, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cgroup"))
		if strings.Contains(string(cmdline), id) || strings.Contains(string(cgroups), cg+"\n") {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return left
}

// EnsureTmp is ensureTmp, for the tests of the /tmp mount's source.
var EnsureTmp = ensureTmp

// EnsureResolvConf is ensureResolvConf, for the tests of the mount point
// of an egress sandbox's resolv.conf.
var EnsureResolvConf = ensureResolvConf

// ResumeLeftQuiet is what Recover does for a sandbox an earlier daemon may
// have left quiet or quieting.
func (d *Driver) ResumeLeftQuiet(id string) { d.resumeLeftQuiet(id) }

// StartFromImage starts sandbox spec.ID from the plaintext memory image in
// dir, as RestoreMemory did before images were sealed: the baseline of
// BenchmarkMemoryImage.
func (d *Driver) StartFromImage(ctx context.Context, spec driver.Spec, dir string) error {
	return d.start(ctx, spec, dir)
}
