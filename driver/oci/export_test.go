package oci

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/internal/mountinfo"
)

// Internals the external tests reach.
var (
	BundleSpec = func(runtime string, spec driver.Spec, socketDir, cgroupParent, netns, resolvConf string, idBase uint32) *specs.Spec {
		b := bundle{runtime: runtime, spec: spec, root: spec.RootFS, agent: spec.AgentPath, socketDir: socketDir, cgroupParent: cgroupParent, netns: netns, resolvConf: resolvConf}
		if idBase != 0 {
			b.ids = &idRange{base: idBase}
		}
		return bundleSpec(b)
	}
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
// mounts (shared directory, idmapped root), its user namespace range claim,
// its network attachment, and processes that name it on their command line (runsc's sandbox and gofer)
// or sit in one of its cgroups.
func (d *Driver) Leftovers(id string) []string {
	var left []string
	if _, err := os.Stat(d.dir.sandboxDir(id)); err == nil {
		left = append(left, "directory "+d.dir.sandboxDir(id))
	}
	if m, _ := filepath.Glob(filepath.Join(d.dir.root(), "*"+id+"*")); len(m) > 0 {
		left = append(left, "runtime state "+strings.Join(m, " "))
	}
	for _, p := range d.cg.leftovers(id) {
		left = append(left, "cgroup "+p)
	}
	// Mounts: the shared directory's tmpfs (runsc), the root's idmapped
	// mount (runc, crun); and the id range's claim.
	for _, p := range []string{d.dir.socketDir(id), d.mounts.rootMount(id)} {
		if under, _ := mountinfo.Under(p); len(under) > 0 {
			left = append(left, "mounts "+strings.Join(under, " "))
		}
	}
	claims, _ := os.ReadDir(d.ids.dir)
	for _, c := range claims {
		if b, err := os.ReadFile(filepath.Join(d.ids.dir, c.Name())); err == nil && string(b) == d.ids.owner(id) {
			left = append(left, "user namespace range claim "+filepath.Join(d.ids.dir, c.Name()))
		}
	}
	if d.net.attached(id) {
		left = append(left, "network attachment: namespace "+d.net.host.Namespace(id)+", link "+d.net.host.Link(id))
	}
	cg := d.cg.rel(id)
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
func (d *Driver) ResumeLeftQuiet(id string) { d.channels.resumeLeftQuiet(id) }

// AsRoot runs script with /bin/sh as root inside sandbox id through the
// runtime's exec, for the conformance suite's hostile tests under runsc.
func (d *Driver) AsRoot(ctx context.Context, id, script string) (string, error) {
	out, err := d.rt.command(ctx, d.rt.rootOf(id), "", "exec", "--user", "0:0", id, "/bin/sh", "-c", script).CombinedOutput()
	return string(out), err
}

// ClaimIDs, ReleaseIDs and RecoverIDs reach the user namespace range
// claims; ClaimIDs returns the range's first host id.
func (d *Driver) ClaimIDs(id string) (uint32, error) {
	if err := os.MkdirAll(d.dir.sandboxDir(id), 0o700); err != nil {
		return 0, err
	}
	r, err := d.ids.claim(id)
	return r.base, err
}
func (d *Driver) ReleaseIDs(id string) error         { return d.ids.release(id) }
func (d *Driver) RecoverIDs(running map[string]bool) { d.ids.recover(running) }

// StartFromImage starts sandbox spec.ID from the plaintext memory image in
// dir, as RestoreMemory did before images were sealed: the baseline of
// BenchmarkMemoryImage.
func (d *Driver) StartFromImage(ctx context.Context, spec driver.Spec, dir string) error {
	return d.start(ctx, spec, dir)
}

// ListenDial makes a listening socket called name in directory dir as the
// runc channel does (sharedDir.listen) and connects to it as Dial does
// (sharedDir.dial), whatever the length of dir's path.
func ListenDial(ctx context.Context, dir, name string) (net.Listener, net.Conn, error) {
	fd, err := openDir(dir)
	if err != nil {
		return nil, nil, err
	}
	s := &sharedDir{fd: fd, path: dir}
	defer s.Close()
	f, err := s.listen(name)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, nil, err
	}
	c, err := s.dial(ctx, name)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, c, nil
}

// ConsoleLog is the host file sandbox id's agent's stdout and stderr go to.
func (d *Driver) ConsoleLog(id string) string { return d.dir.consoleLog(id) }

// HoldBusy and WaitIdle reach sandbox id's busy lock (see holdBusy).
func (d *Driver) HoldBusy(id string) *os.File             { return d.rt.holdBusy(id) }
func (d *Driver) WaitIdle(ctx context.Context, id string) { d.rt.waitIdle(ctx, id) }

// SandboxDir is sandbox id's directory.
func (d *Driver) SandboxDir(id string) string { return d.dir.sandboxDir(id) }

// WaitSealed waits until memory image key, if it is being sealed in the
// background, is sealed (or its seal has failed).
func (d *Driver) WaitSealed(ctx context.Context, key string) error {
	return d.images.seals.waitKey(ctx, key)
}

// PIDFile is where sandbox id's runtime writes its container's host pid.
func (d *Driver) PIDFile(id string) string { return d.dir.pidFile(id) }

// PID is the host pid that sandbox id's runtime wrote to PIDFile.
func (d *Driver) PID(id string) (int, error) { return d.dir.pid(id) }

// RunPIDFile is where the pid of sandbox id's `run --detach` is kept while
// it works.
func (d *Driver) RunPIDFile(id string) string { return d.dir.runPidFile(id) }

// RuntimeRoot is the runtime's --root, shared by the driver's sandboxes.
func (d *Driver) RuntimeRoot() string { return d.dir.root() }

// RuntimeState is what the runtime itself says of sandbox id's container
// (nil: none), asked even where State answers from /proc.
func (d *Driver) RuntimeState(ctx context.Context, id string) (*specs.State, error) {
	return d.rt.state(ctx, id)
}

// OwnRuntimeRoot is sandbox id's own --root.
func (d *Driver) OwnRuntimeRoot(id string) string { return d.dir.runtimeRoot(id) }
