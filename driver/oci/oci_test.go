package oci_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/network"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// cachedRunsc is where a development host keeps a static runsc when it is
// not on PATH.
const cachedRunsc = "/var/cache/hearth/bin/runsc"

// runtimes are the runtimes the tests run on, in Detect's order.
var runtimes = []string{oci.RuntimeRunsc, oci.RuntimeCrun, oci.RuntimeRunc}

// findRuntime returns the binary of rt on this host, or skips t.
func findRuntime(t testing.TB, rt string) string {
	t.Helper()
	if p, err := exec.LookPath(rt); err == nil {
		return p
	}
	if rt == oci.RuntimeRunsc {
		if _, err := os.Stat(cachedRunsc); err == nil {
			return cachedRunsc
		}
	}
	switch rt {
	case oci.RuntimeCrun:
		t.Skip("crun is not in PATH: skipping crun (Debian's crun 1.8.1 also refuses hybrid cgroup v1/v2 hosts; crun >= 1.9 on a cgroup v2 host runs these tests)")
	case oci.RuntimeRunsc:
		testenv.Skip(t, "runsc is not in PATH nor at %s: skipping runsc", cachedRunsc)
	default:
		testenv.Skip(t, "%s is not in PATH: skipping %s", rt, rt)
	}
	return ""
}

// newDriver returns a driver for rt on stateDir, logging to t (debug
// level in tests, none in benchmarks), with no network host.
func newDriver(t testing.TB, rt, bin, stateDir string) *oci.Driver {
	t.Helper()
	return newDriverNet(t, rt, bin, stateDir, nil)
}

// testLogger logs to t at debug level, or nowhere in a benchmark.
func testLogger(t testing.TB) *slog.Logger {
	if _, bench := t.(*testing.B); bench {
		return nil
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newDriverNet is newDriver with the network host nh (nil: none).
func newDriverNet(t testing.TB, rt, bin, stateDir string, nh *network.Host) *oci.Driver {
	t.Helper()
	d, err := oci.New(oci.Options{
		Runtime:  rt,
		Binary:   bin,
		StateDir: stateDir,
		Network:  nh,
		Logger:   testLogger(t),
	})
	if err != nil {
		t.Fatalf("New(%s) = %v", rt, err)
	}
	unmountAfter(t, d)
	return d
}

// unmountAfter unmounts d's mount directory in t's cleanup: it outlives
// the driver, as it outlives a daemon.
func unmountAfter(t testing.TB, d *oci.Driver) {
	t.Cleanup(func() {
		drivertest.UnmountUnder(t, d.MountDir())
		os.Remove(d.MountDir())
	})
}

// testWriter sends a log line to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestConformance(t *testing.T) {
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	agentPath := drivertest.BuildAgent(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			bin := findRuntime(t, rt)
			drivertest.Run(t, drivertest.Config{
				New: func(t *testing.T) drivertest.Target {
					dir, netDir := t.TempDir(), t.TempDir()
					t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
					d := newDriverNet(t, rt, bin, dir, newNetHost(t, netDir))
					tg := drivertest.Target{
						Driver: d,
						Reopen: func(t *testing.T) driver.Driver {
							return newDriverNet(t, rt, bin, dir, openNetHost(t, netDir))
						},
						Leftovers:  d.Leftovers,
						ConsoleLog: d.ConsoleLog,
					}
					if rt == oci.RuntimeRunsc {
						// gVisor ignores the setuid bit of the suite's
						// root helper; under runc and crun the helper is
						// the attacker (runc 1.1's exec fails here).
						tg.AsRoot = d.AsRoot
					}
					return tg
				},
				NewDNS: func(t *testing.T, upstream netip.AddrPort) drivertest.Target {
					dir := t.TempDir()
					t.Cleanup(func() { drivertest.UnmountUnder(t, dir) })
					nh := newNetHost(t, t.TempDir(), upstream)
					drivertest.ServeDNS(t, nh)
					return drivertest.Target{Driver: newDriverNet(t, rt, bin, dir, nh)}
				},
				RootFS:    func(t *testing.T) string { return drivertest.SnapshotRootFS(t, base) },
				AgentPath: agentPath,
			})
		})
	}
}

// TestStartErrorSaysWhy: a failed start's error names the step and quotes
// the sandbox's log.
func TestStartErrorSaysWhy(t *testing.T) {
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	bin := findRuntime(t, oci.RuntimeRunc)
	d := newDriver(t, oci.RuntimeRunc, bin, t.TempDir())
	agentPath := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agentPath, []byte("#!/bin/sh\necho 'no agent here' >&2\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := driver.Spec{ID: "saysywhy1", RootFS: drivertest.SnapshotRootFS(t, base), AgentPath: agentPath}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := d.Start(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "no agent here") || !strings.Contains(err.Error(), "stopped before its agent answered") {
		t.Errorf("Start() = %v, want the reason and the log tail", err)
	}
}

// TestOOMKilled: a sandbox whose memory cgroup killed a task says so while
// it runs and after Stop, until it is started again. PID 1 is a wrapper
// that runs a memory hog, which the kernel kills, then execs the agent.
func TestOOMKilled(t *testing.T) {
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	agentPath := drivertest.BuildAgent(t)
	bin := findRuntime(t, oci.RuntimeRunc)
	d := newDriver(t, oci.RuntimeRunc, bin, t.TempDir())
	root := drivertest.SnapshotRootFS(t, base)
	b, err := os.ReadFile(agentPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/local/bin/hearth-agent"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "wrapper")
	script := "#!/bin/sh\npython3 -c 'b = bytearray(256 << 20)'\nexec /usr/local/bin/hearth-agent \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := driver.Spec{
		ID: "oomkilled1", RootFS: root, AgentPath: wrapper,
		Resources: sandbox.Resources{MemoryBytes: 64 << 20},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := d.Start(ctx, spec); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusRunning || !st.OOMKilled {
		t.Errorf("State() = %+v, %v; want running and OOMKilled", st, err)
	}
	if err := d.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusStopped || !st.OOMKilled {
		t.Errorf("State() after Stop = %+v, %v; want stopped and OOMKilled", st, err)
	}
	spec.AgentPath = agentPath
	if err := d.Start(ctx, spec); err != nil {
		t.Fatalf("Start() again = %v", err)
	}
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusRunning || st.OOMKilled {
		t.Errorf("State() after a new start = %+v, %v; want running, not OOMKilled", st, err)
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name      string
		installed []string
		want      string
		wantErr   error
	}{
		{"all", []string{"runc", "crun", "runsc"}, oci.RuntimeRunsc, nil},
		{"crun and runc", []string{"runc", "crun"}, oci.RuntimeCrun, nil},
		{"runc", []string{"runc"}, oci.RuntimeRunc, nil},
		{"runsc and runc", []string{"runc", "runsc"}, oci.RuntimeRunsc, nil},
		{"none", nil, "", oci.ErrNoRuntime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookPath := func(file string) (string, error) {
				if slices.Contains(tc.installed, file) {
					return "/usr/bin/" + file, nil
				}
				return "", exec.ErrNotFound
			}
			got, err := oci.Detect(lookPath)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Detect(%v) = %q, %v; want %q, %v", tc.installed, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	if _, err := oci.New(oci.Options{Runtime: "lxc", Binary: "/bin/true", StateDir: dir}); err == nil {
		t.Error("New(lxc) succeeded, want an unknown-runtime error")
	}
	d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunc, Binary: "/bin/true", StateDir: dir})
	if err != nil {
		t.Fatalf("New(runc) = %v", err)
	}
	if got, want := d.Capabilities(), (driver.Capabilities{Runtime: "runc", Isolation: "container", CheapFreeze: true}); got != want {
		t.Errorf("Capabilities() = %+v, want %+v", got, want)
	}
	if _, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: "/bin/true", StateDir: dir}); err == nil || !strings.Contains(err.Error(), "belongs to runtime runc") {
		t.Errorf("New(runsc) on runc's state dir = %v, want a refusal", err)
	}
	gv, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: "/bin/true", StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("New(runsc) = %v", err)
	}
	// gVisor's pause is tens of milliseconds, not a cgroup write; it
	// checkpoints memory.
	if got, want := gv.Capabilities(), (driver.Capabilities{Runtime: "runsc", Isolation: "gvisor", MemoryCheckpoint: true}); got != want {
		t.Errorf("Capabilities() of runsc = %+v, want %+v", got, want)
	}
	d, err = oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: "/bin/true", StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("New(runsc) = %v", err)
	}
	if got, want := d.Capabilities(), (driver.Capabilities{Runtime: "runsc", Isolation: "gvisor", MemoryCheckpoint: true}); got != want {
		t.Errorf("Capabilities() = %+v, want %+v", got, want)
	}
	if err := d.Start(t.Context(), driver.Spec{ID: "Bad-ID", RootFS: "/", AgentPath: "/bin/true"}); err == nil {
		t.Error("Start() with an invalid id succeeded")
	}
	for _, id := range []string{"nope", "../etc", ""} {
		if _, err := d.State(t.Context(), id); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("State(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestBundleSpec(t *testing.T) {
	const mib = 1 << 20
	base := driver.Spec{
		ID:        "abc123",
		RootFS:    "/data/roots/abc123",
		AgentPath: "/usr/lib/hearth/hearth-agent",
		Hostname:  "agent-x-box",
		Env:       []string{"LANG=C.UTF-8"},
		UID:       1000,
		GID:       1000,
		Home:      "/home/sandbox",
		Resources: sandbox.Resources{MilliCPU: 1500, MemoryBytes: 512 * mib, Pids: 256},
	}
	// The agent starts on one processor (GOMAXPROCS=1), which it keeps
	// from the commands (--unset).
	agentArgs := []string{oci.AgentMount, "--socket", "/run/hearth/agent.sock", "--uid", "1000", "--gid", "1000", "--home", "/home/sandbox", "--unset", "GOMAXPROCS"}
	// Under runc and crun the agent serves the socket it inherits, and
	// keeps threads in reserve against a fork bomb that fills the pids
	// cgroup.
	reserving := []string{oci.AgentMount, "--listen-fd", "3", "--uid", "1000", "--gid", "1000", "--home", "/home/sandbox", "--unset", "GOMAXPROCS", "--threads", "32"}
	for _, tc := range []struct {
		name      string
		runtime   string
		res       sandbox.Resources
		wantArgs  []string
		wantQuota int64 // 0: no cpu limit
		wantMem   int64 // 0: no memory limit
		wantPids  int64 // 0: no pids limit
	}{
		{"runc", oci.RuntimeRunc, base.Resources, reserving, 150_000, 512 * mib, 256 + 64},
		{"crun", oci.RuntimeCrun, base.Resources, reserving, 150_000, 512 * mib, 256 + 64},
		{"runsc", oci.RuntimeRunsc, base.Resources,
			append(slices.Clone(agentArgs), "--nproc", "256", "--memory", "536870912"),
			150_000, 512*mib + 256*mib + 192*mib, 2*256 + 256},
		{"runc unlimited", oci.RuntimeRunc, sandbox.Resources{}, reserving, 0, 0, 0},
		{"runsc unlimited", oci.RuntimeRunsc, sandbox.Resources{}, agentArgs, 0, 0, 0},
		{"runsc small", oci.RuntimeRunsc, sandbox.Resources{MilliCPU: 250, MemoryBytes: 64 * mib, Pids: 10},
			append(slices.Clone(agentArgs), "--nproc", "10", "--memory", "67108864"),
			25_000, 64*mib + 32*mib + 192*mib, 2*10 + 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := base
			spec.Resources = tc.res
			runsc := tc.runtime == oci.RuntimeRunsc
			socketDir, idBase := "", uint32(0x70010000)
			if runsc {
				socketDir, idBase = "/state/sandboxes/abc123/run", 0
			}
			got := oci.BundleSpec(tc.runtime, spec, socketDir, "hearth", "", "", idBase)

			if got.Root.Path != spec.RootFS || got.Root.Readonly {
				t.Errorf("Root = %+v, want %s writable", got.Root, spec.RootFS)
			}
			if got.Hostname != "agent-x-box" {
				t.Errorf("Hostname = %q", got.Hostname)
			}
			p := got.Process
			if !slices.Equal(p.Args, tc.wantArgs) {
				t.Errorf("Args = %q, want %q", p.Args, tc.wantArgs)
			}
			if p.User.UID != 0 || p.Cwd != "/" || p.NoNewPrivileges || p.Terminal {
				t.Errorf("Process = uid %d cwd %q nnp %v terminal %v; want root in / with setuid allowed, no terminal", p.User.UID, p.Cwd, p.NoNewPrivileges, p.Terminal)
			}
			if !slices.Contains(p.Env, "LANG=C.UTF-8") || !slices.ContainsFunc(p.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=/") }) || !slices.Contains(p.Env, "GOMAXPROCS=1") {
				t.Errorf("Env = %q, want spec's env, a default PATH and GOMAXPROCS=1", p.Env)
			}
			for _, c := range []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL"} {
				if !slices.Contains(p.Capabilities.Effective, c) || !slices.Contains(p.Capabilities.Bounding, c) {
					t.Errorf("Capabilities = %+v, want %s", p.Capabilities, c)
				}
			}
			for _, c := range []string{"CAP_SYS_ADMIN", "CAP_NET_RAW", "CAP_SYS_PTRACE", "CAP_MKNOD"} {
				// gVisor's own ptrace sets the agent's rlimits on commands.
				want := c == "CAP_SYS_PTRACE" && tc.runtime == oci.RuntimeRunsc
				if slices.Contains(p.Capabilities.Bounding, c) != want {
					t.Errorf("Capabilities.Bounding has %s: %v, want %v", c, !want, want)
				}
			}
			if len(p.Capabilities.Inheritable) > 0 || len(p.Capabilities.Ambient) > 0 {
				t.Errorf("Capabilities = %+v, want no inheritable or ambient ones for commands", p.Capabilities)
			}

			mounts := map[string]specs.Mount{}
			for _, m := range got.Mounts {
				mounts[m.Destination] = m
			}
			if m := mounts[oci.AgentMount]; m.Source != spec.AgentPath || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "bind") {
				t.Errorf("agent mount = %+v, want %s bound read-only", m, spec.AgentPath)
			}
			m, ok := mounts[oci.SocketDir]
			if runsc && (m.Source != "/state/sandboxes/abc123/run" || !slices.Contains(m.Options, "rw")) {
				t.Errorf("socket mount = %+v, want the socket dir bound read-write", m)
			}
			if !runsc && ok {
				t.Errorf("socket mount = %+v, want none: under %s the agent inherits its socket", m, tc.runtime)
			}
			for _, dst := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/sys"} {
				if _, ok := mounts[dst]; !ok {
					t.Errorf("no mount at %s", dst)
				}
			}
			if m := mounts["/sys"]; !slices.Contains(m.Options, "ro") {
				t.Errorf("/sys mount = %+v, want read-only", m)
			}
			// The root's own /tmp, bound explicitly: without a /tmp mount
			// gVisor puts a tmpfs there, which would not persist. runc
			// needs none, and a bind would show its host path in
			// mountinfo.
			m, ok = mounts["/tmp"]
			if runsc && (m.Source != filepath.Join(spec.RootFS, "tmp") || !slices.Contains(m.Options, "rw")) {
				t.Errorf("/tmp mount = %+v, want the root's /tmp bound read-write", m)
			}
			if !runsc && ok {
				t.Errorf("/tmp mount = %+v, want none under %s", m, tc.runtime)
			}

			l := got.Linux
			if l.CgroupsPath != "/hearth/abc123" {
				t.Errorf("CgroupsPath = %q, want /hearth/abc123", l.CgroupsPath)
			}
			var ns []specs.LinuxNamespaceType
			for _, n := range l.Namespaces {
				if n.Path != "" {
					t.Errorf("namespace %s joins %s, want a new one", n.Type, n.Path)
				}
				ns = append(ns, n.Type)
			}
			for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.NetworkNamespace} {
				if !slices.Contains(ns, want) {
					t.Errorf("Namespaces = %v, want %s", ns, want)
				}
			}
			// Root in a runc or crun sandbox is an unprivileged host uid.
			wantMap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: idBase, Size: 65536}}
			if runsc {
				wantMap = nil
			}
			if slices.Contains(ns, specs.UserNamespace) == runsc || !slices.Equal(l.UIDMappings, wantMap) || !slices.Equal(l.GIDMappings, wantMap) {
				t.Errorf("Namespaces = %v, UIDMappings = %v, GIDMappings = %v; want a user namespace mapping %v under %s", ns, l.UIDMappings, l.GIDMappings, wantMap, tc.runtime)
			}
			if !slices.Contains(l.MaskedPaths, "/proc/kcore") || !slices.Contains(l.ReadonlyPaths, "/proc/sys") {
				t.Errorf("MaskedPaths = %v, ReadonlyPaths = %v; want runc's defaults", l.MaskedPaths, l.ReadonlyPaths)
			}

			r := l.Resources
			switch {
			case tc.wantQuota == 0 && r.CPU != nil:
				t.Errorf("CPU = %+v, want none", r.CPU)
			case tc.wantQuota != 0 && (r.CPU == nil || *r.CPU.Quota != tc.wantQuota || *r.CPU.Period != 100_000):
				t.Errorf("CPU = %+v, want quota %d per 100000", r.CPU, tc.wantQuota)
			}
			switch {
			case tc.wantMem == 0 && r.Memory != nil:
				t.Errorf("Memory = %+v, want none", r.Memory)
			case tc.wantMem != 0 && (r.Memory == nil || *r.Memory.Limit != tc.wantMem):
				t.Errorf("Memory limit = %+v, want %d", r.Memory, tc.wantMem)
			case tc.wantMem != 0 && (r.Memory.Reservation == nil || *r.Memory.Reservation != tc.res.MemoryBytes):
				t.Errorf("Memory reservation = %v, want the sandbox's memory %d", r.Memory.Reservation, tc.res.MemoryBytes)
			}
			switch {
			case tc.wantPids == 0 && r.Pids != nil:
				t.Errorf("Pids = %+v, want none", r.Pids)
			case tc.wantPids != 0 && (r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit != tc.wantPids):
				t.Errorf("Pids = %+v, want %d", r.Pids, tc.wantPids)
			}
			if len(r.Devices) != 1 || r.Devices[0].Allow {
				t.Errorf("Devices = %+v, want deny-all (the runtime adds its defaults)", r.Devices)
			}
		})
	}
}

func TestBundleSpecDefaults(t *testing.T) {
	spec := driver.Spec{ID: "x1", RootFS: "/r", AgentPath: "/a", Env: []string{"PATH=/opt/bin"}}
	got := oci.BundleSpec(oci.RuntimeRunc, spec, "", "/custom/parent/", "", "", 0x70000000)
	if got.Hostname != "x1" {
		t.Errorf("Hostname = %q, want the id when the spec names none", got.Hostname)
	}
	if !slices.Equal(got.Process.Env, []string{"PATH=/opt/bin", "GOMAXPROCS=1"}) {
		t.Errorf("Env = %q, want the spec's own PATH and the agent's GOMAXPROCS only", got.Process.Env)
	}
	// A sandbox whose environment sets GOMAXPROCS keeps it, for the agent
	// and its commands alike.
	own := spec
	own.Env = []string{"PATH=/opt/bin", "GOMAXPROCS=4"}
	if p := oci.BundleSpec(oci.RuntimeRunsc, own, "/state/run", "", "", "", 0).Process; !slices.Equal(p.Env, own.Env) || slices.Contains(p.Args, "--unset") {
		t.Errorf("Env = %q, Args = %q; want the spec's environment as it is and no --unset", p.Env, p.Args)
	}
	if slices.Contains(got.Process.Args, "--home") {
		t.Errorf("Args = %q, want no --home when the spec names none", got.Process.Args)
	}
	if got.Linux.CgroupsPath != "/custom/parent/x1" {
		t.Errorf("CgroupsPath = %q, want /custom/parent/x1", got.Linux.CgroupsPath)
	}
}

func TestReadCgroupMounts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mountinfo  string
		wantAll    []string
		wantMemory string
		wantV2     string
	}{
		{
			name: "hybrid",
			mountinfo: `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
34 30 0:30 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
35 30 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
36 22 0:29 / /mnt/memory\040again rw,relatime - cgroup cgroup rw,memory
37 22 0:29 /sub /mnt/sub rw,relatime - cgroup cgroup rw,pids
`,
			wantAll:    []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"},
			wantMemory: "/sys/fs/cgroup/memory",
			wantV2:     "/sys/fs/cgroup/unified",
		},
		{
			name:       "v2",
			mountinfo:  "35 30 0:31 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n",
			wantAll:    []string{"/sys/fs/cgroup"},
			wantV2:     "/sys/fs/cgroup",
			wantMemory: "",
		},
		{
			name:       "v1 with joined controllers and an escaped path",
			mountinfo:  "31 30 0:27 / /cg/cpu\\054cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
			wantAll:    []string{"/cg/cpu,cpuacct"},
			wantMemory: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(p, []byte(tc.mountinfo), 0o600); err != nil {
				t.Fatal(err)
			}
			all, mem, v2, err := oci.ReadCgroupMounts(p)
			if err != nil || !slices.Equal(all, tc.wantAll) || mem != tc.wantMemory || v2 != tc.wantV2 {
				t.Errorf("readCgroupMounts() = %q, %q, %q, %v; want %q, %q, %q", all, mem, v2, err, tc.wantAll, tc.wantMemory, tc.wantV2)
			}
		})
	}
}

// The source of the /tmp bind mount is the root's own /tmp: made (1777)
// when missing, kept when a directory, refused when anything else, a
// symlink above all (the source resolves on the host).
func TestEnsureTmp(t *testing.T) {
	root := t.TempDir()
	if err := oci.EnsureTmp(root); err != nil {
		t.Fatalf("EnsureTmp(no /tmp) = %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "tmp")); err != nil || !fi.IsDir() || fi.Mode()&(fs.ModePerm|fs.ModeSticky) != 0o777|fs.ModeSticky {
		t.Fatalf("made /tmp: %v %v; want a 1777 directory", fi.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp", "kept"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := oci.EnsureTmp(root); err != nil {
		t.Fatalf("EnsureTmp(a directory) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "tmp", "kept")); err != nil {
		t.Errorf("EnsureTmp changed an existing /tmp: %v", err)
	}
	evil := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(evil, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := oci.EnsureTmp(evil); err == nil {
		t.Error("EnsureTmp(a symlink to /etc) = nil, want an error")
	}
}

// TestDialLongPath: the agent's socket is made and reached through
// descriptors (/proc/self/fd/N), so a state directory whose path is longer
// than a unix socket address can hold works.
func TestDialLongPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 150 {
		dir = filepath.Join(dir, "a-rather-long-directory-name")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, c, err := oci.ListenDial(t.Context(), dir, "agent.sock")
	if err != nil {
		t.Fatalf("listen and dial in a %d-byte path: %v", len(dir), err)
	}
	defer ln.Close()
	defer c.Close()
	go func() {
		if s, err := ln.Accept(); err == nil {
			s.Write([]byte("hi"))
			s.Close()
		}
	}()
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("read = %q, %v; want hi", b, err)
	}
}

// TestBusyLock: a runtime command a killed daemon left running (here a
// process that inherited the busy lock, as every runtime command on a
// sandbox does) holds the sandbox's busy lock until it ends, and Recover's
// wait for it (WaitIdle) returns only then; with no command left it
// returns at once.
func TestBusyLock(t *testing.T) {
	d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunc, Binary: "/bin/true", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	const id = "xbusy"
	if err := os.MkdirAll(d.SandboxDir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	d.WaitIdle(t.Context(), id) // never locked: no wait
	f := d.HoldBusy(id)
	if f == nil {
		t.Fatal("HoldBusy = nil")
	}
	cmd := exec.Command("sleep", "0.5")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close() // as a killed daemon's copy goes
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	began := time.Now()
	d.WaitIdle(t.Context(), id)
	// The lock goes with the process's exit, a moment before its parent
	// reaps it: gone or a zombie is ended, anything else still ran.
	select {
	case <-done:
	default:
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		if _, after, _ := strings.Cut(string(stat), ") "); err == nil && !strings.HasPrefix(after, "Z") {
			t.Errorf("WaitIdle returned after %v while the command holding the lock still ran (%s)", time.Since(began), stat)
		}
	}
	<-done
	began = time.Now()
	d.WaitIdle(t.Context(), id)
	if took := time.Since(began); took > 100*time.Millisecond {
		t.Errorf("WaitIdle with no command left took %v", took)
	}
}

// TestRunscMemoryReservation: on a v1 host a runsc sandbox's memory
// cgroup has the sandbox's own memory as its soft limit (see resources),
// below the limit with gVisor's headroom.
func TestRunscMemoryReservation(t *testing.T) {
	drivertest.RequireRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		testenv.Skip(t, "no v1 memory hierarchy: v2's memory.low is the runtime's to set")
	}
	_, spec := startDefault(t, oci.RuntimeRunsc, findRuntime(t, oci.RuntimeRunsc), "reserve1")
	soft := filepath.Join("/sys/fs/cgroup/memory/hearth", spec.ID, "memory.soft_limit_in_bytes")
	if b, err := os.ReadFile(soft); err != nil {
		t.Error(err)
	} else if got := strings.TrimSpace(string(b)); got != strconv.FormatInt(spec.Resources.MemoryBytes, 10) {
		t.Errorf("%s = %s, want %d", soft, got, spec.Resources.MemoryBytes)
	}
	hard := filepath.Join(filepath.Dir(soft), "memory.limit_in_bytes")
	if b, err := os.ReadFile(hard); err != nil {
		t.Error(err)
	} else if limit, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); limit <= spec.Resources.MemoryBytes {
		t.Errorf("%s = %d, want above the reservation %d", hard, limit, spec.Resources.MemoryBytes)
	}
}

// TestStateFromProc: State answers for a running sandbox from /proc
// without starting the runtime (under runsc a process of ≈13 ms of CPU,
// which the sweep paid for every running sandbox), and so does a
// restarted daemon's Recover unless a runtime command of the dead one's
// was on its way there; it does not take a pid
// the kernel gave to a process outside the sandbox for the sandbox's, and
// asks the runtime once the container's process is gone.
func TestStateFromProc(t *testing.T) {
	drivertest.RequireRoot(t)
	for _, rt := range []string{oci.RuntimeRunsc, oci.RuntimeRunc} {
		t.Run(rt, func(t *testing.T) {
			wrapper, calls := countedRuntime(t, rt)
			d, spec := startDefault(t, rt, wrapper, "fromproc1")
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			os.Remove(calls)
			pid, err := d.PID(spec.ID)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusRunning || st.PID != pid {
					t.Fatalf("State() = %+v, %v; want running with pid %d", st, err, pid)
				}
			}
			if b, err := os.ReadFile(calls); err == nil {
				t.Errorf("State() of a running sandbox ran the runtime: %q", b)
			}

			// A daemon started again (a driver on the same state directory)
			// recovers it from /proc as well, unless a `run --detach` of the
			// dead daemon's was on its way there (its pid file left): then
			// it asks the runtime.
			recovered := func() string {
				t.Helper()
				os.Remove(calls)
				states, err := newDriver(t, rt, wrapper, d.StateDir()).Recover(ctx)
				if err != nil {
					t.Fatalf("Recover() = %v", err)
				}
				if i := slices.IndexFunc(states, func(st driver.State) bool { return st.ID == spec.ID }); i < 0 || states[i].Status != driver.StatusRunning || states[i].PID != pid {
					t.Fatalf("Recover() = %+v; want %s running with pid %d", states, spec.ID, pid)
				}
				b, _ := os.ReadFile(calls)
				return string(b)
			}
			if b := recovered(); strings.Contains(b, "state "+spec.ID) {
				t.Errorf("Recover() of a settled running sandbox asked the runtime: %q", b)
			}
			if err := os.WriteFile(d.RunPIDFile(spec.ID), []byte("1"), 0o644); err != nil {
				t.Fatal(err)
			}
			if b := recovered(); !strings.Contains(b, "state "+spec.ID) {
				t.Errorf("Recover() with a run of the dead daemon's left: runtime calls %q, want a state of %s", b, spec.ID)
			}
			os.Remove(d.RunPIDFile(spec.ID))
			os.Remove(calls)

			// The container's process dies and a process outside the
			// sandbox holds the pid file's pid (as if the kernel reused it).
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			stranger := exec.Command("sleep", "60")
			if err := stranger.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
			if err := os.WriteFile(d.PIDFile(spec.ID), []byte(strconv.Itoa(stranger.Process.Pid)), 0o644); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				st, err := d.State(ctx, spec.ID)
				if err == nil && st.Status == driver.StatusStopped {
					break
				}
				if st.PID == stranger.Process.Pid {
					t.Fatalf("State() = %+v: took a process outside the sandbox for its container", st)
				}
				if time.Now().After(deadline) {
					t.Fatalf("State() after the container's process died = %+v, %v; want stopped", st, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if b, _ := os.ReadFile(calls); !strings.Contains(string(b), "state "+spec.ID) {
				t.Errorf("runtime calls after the process died = %q, want a state of %s", b, spec.ID)
			}
		})
	}
}

// countedRuntime returns the path of a wrapper of runtime rt that appends
// the arguments of each of its invocations, a line each, to the file calls.
func countedRuntime(t *testing.T, rt string) (wrapper, calls string) {
	t.Helper()
	real := findRuntime(t, rt)
	calls = filepath.Join(t.TempDir(), "calls")
	wrapper = filepath.Join(t.TempDir(), rt)
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, calls
}

// TestTeardownFromRoot: under runsc, Stop and Delete learn whether the
// runtime has a container from its root's files, not from `runsc state`:
// a running sandbox's Stop and a Delete of one whose process was killed
// from outside each run the runtime's delete and no state, and leave no
// process, runtime file, cgroup or mount of the sandbox; a Delete of a
// stopped sandbox runs the runtime not at all.
func TestTeardownFromRoot(t *testing.T) {
	drivertest.RequireRoot(t)
	wrapper, calls := countedRuntime(t, oci.RuntimeRunsc)
	d, spec := startDefault(t, oci.RuntimeRunsc, wrapper, "fromroot1")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pidOf := func() int {
		t.Helper()
		pid, err := d.PID(spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	ran := func(step string, want []string) {
		t.Helper()
		b, _ := os.ReadFile(calls)
		os.Remove(calls)
		var verbs []string
		for line := range strings.Lines(string(b)) {
			for _, verb := range []string{"state", "delete", "kill", "list"} {
				if slices.Contains(strings.Fields(line), verb) {
					verbs = append(verbs, verb)
				}
			}
		}
		if !slices.Equal(verbs, want) {
			t.Errorf("%s ran the runtime's %q (%q); want %q", step, verbs, b, want)
		}
	}
	gone := func(step string, pid int) {
		t.Helper()
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status"); err == nil && !bytes.Contains(b, []byte("State:\tZ")) {
			t.Errorf("after %s the sandbox's process %d lives", step, pid)
		}
		if m, _ := filepath.Glob(filepath.Join(d.OwnRuntimeRoot(spec.ID), "*")); len(m) > 0 {
			t.Errorf("after %s the sandbox's runtime root holds %q", step, m)
		}
	}

	os.Remove(calls)
	pid := pidOf()
	if err := d.Stop(ctx, spec.ID); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	ran("Stop", []string{"delete"})
	gone("Stop", pid)
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusStopped {
		t.Errorf("State() after Stop = %+v, %v; want stopped", st, err)
	}

	if err := d.Start(ctx, spec); err != nil {
		t.Fatalf("Start() after Stop = %v", err)
	}
	pid = pidOf()
	os.Remove(calls)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, spec.ID); err != nil {
		t.Fatalf("Delete() of a sandbox whose process was killed = %v", err)
	}
	ran("Delete of a killed sandbox", []string{"delete"})
	gone("Delete", pid)
	if left := d.Leftovers(spec.ID); len(left) > 0 {
		t.Errorf("after Delete the host still holds %q", left)
	}

	stopped := spec
	stopped.ID = "fromroot2"
	t.Cleanup(func() { d.Delete(context.Background(), stopped.ID) })
	if err := d.Start(ctx, stopped); err != nil {
		t.Fatalf("Start(%s) = %v", stopped.ID, err)
	}
	if err := d.Stop(ctx, stopped.ID); err != nil {
		t.Fatalf("Stop(%s) = %v", stopped.ID, err)
	}
	os.Remove(calls)
	if err := d.Delete(ctx, stopped.ID); err != nil {
		t.Fatalf("Delete() of a stopped sandbox = %v", err)
	}
	ran("Delete of a stopped sandbox", nil)
	if left := d.Leftovers(stopped.ID); len(left) > 0 {
		t.Errorf("after Delete of a stopped sandbox the host still holds %q", left)
	}
}

// TestRecoverRemovesStrays: Recover removes the files the runtime's shared
// root holds for sandboxes that are gone (a lock file that outlived a
// delete, a socket), and keeps the shared null netns and a live sandbox's
// own root.
func TestRecoverRemovesStrays(t *testing.T) {
	drivertest.RequireRoot(t)
	d, spec := startDefault(t, oci.RuntimeRunsc, findRuntime(t, oci.RuntimeRunsc), "keepme1")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	root, own := d.RuntimeRoot(), d.OwnRuntimeRoot(spec.ID)
	before, ownBefore := testenv.DirNames(t, root), testenv.DirNames(t, own)
	strays := []string{"gone1_sandbox:gone1.lock", "runsc-gone2.sock", "gone3"}
	for _, s := range strays {
		if err := os.WriteFile(filepath.Join(root, s), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	if after := testenv.DirNames(t, root); !slices.Equal(after, before) {
		t.Errorf("the runtime's shared root after Recover = %q, want %q as before the strays", after, before)
	}
	if !slices.Contains(before, "null-netns") || slices.ContainsFunc(before, func(n string) bool { return strings.Contains(n, spec.ID) }) {
		t.Errorf("the runtime's shared root = %q: want null-netns and nothing of the live sandbox, which has its own root", before)
	}
	if ownAfter := testenv.DirNames(t, own); !slices.Equal(ownAfter, ownBefore) || !slices.ContainsFunc(ownAfter, func(n string) bool { return strings.Contains(n, spec.ID) }) {
		t.Errorf("the live sandbox's own root after Recover = %q, before %q: want its files, kept", ownAfter, ownBefore)
	}
	if st, err := d.State(ctx, spec.ID); err != nil || st.Status != driver.StatusRunning {
		t.Errorf("State(%s) after Recover = %+v, %v; want running", spec.ID, st, err)
	}
}

// TestSharedRootSandbox: a container that an older driver made in the
// shared root, where every sandbox's used to be, is still found, stopped and
// deleted after an upgrade, and its next start gives it its own root. The
// older layout is made from a running sandbox's: its runtime files move
// from its own root to the shared one, and runsc's state file, which names
// its root and control socket, is rewritten to say so.
func TestSharedRootSandbox(t *testing.T) {
	drivertest.RequireRoot(t)
	for _, rt := range []string{oci.RuntimeRunsc, oci.RuntimeRunc} {
		t.Run(rt, func(t *testing.T) {
			bin := findRuntime(t, rt)
			d, spec := startDefault(t, rt, bin, "legacy"+rt)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			root, own := d.RuntimeRoot(), d.OwnRuntimeRoot(spec.ID)
			moveToSharedRoot(t, own, root)
			owned := func(dir string) []string {
				return slices.DeleteFunc(testenv.DirNames(t, dir), func(n string) bool { return !strings.Contains(n, spec.ID) })
			}
			echo := func(d *oci.Driver, word string) {
				t.Helper()
				c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
				var out bytes.Buffer
				if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "echo " + word}, nil, &out, nil); err != nil || res.ExitCode != 0 || out.String() != word+"\n" {
					t.Fatalf("echo %s = %+v, %v, %q", word, res, err, out.String())
				}
			}

			d2 := newDriver(t, rt, bin, d.StateDir())
			if _, err := d2.Recover(ctx); err != nil {
				t.Fatalf("Recover() = %v", err)
			}
			if st, err := d2.State(ctx, spec.ID); err != nil || st.Status != driver.StatusRunning {
				t.Fatalf("State(%s) of the shared root's container after Recover = %+v, %v; want running", spec.ID, st, err)
			}
			echo(d2, "alive")
			pid, err := os.ReadFile(d2.PIDFile(spec.ID))
			if err != nil {
				t.Fatal(err)
			}
			// The runtime itself is reached, not only /proc: it knows the
			// container, and under runsc it pauses and resumes it.
			if st, err := d2.RuntimeState(ctx, spec.ID); err != nil || st == nil || st.Status != "running" || strconv.Itoa(st.Pid) != strings.TrimSpace(string(pid)) {
				t.Fatalf("the runtime's state of the shared root's container = %+v, %v; want running, pid %s", st, err, pid)
			}
			if err := d2.Freeze(ctx, spec.ID); err != nil {
				t.Fatalf("Freeze() = %v", err)
			}
			if err := d2.Thaw(ctx, spec.ID); err != nil {
				t.Fatalf("Thaw() = %v", err)
			}
			echo(d2, "thawed")
			if err := d2.Stop(ctx, spec.ID); err != nil {
				t.Fatalf("Stop() = %v", err)
			}
			if left := owned(root); len(left) > 0 {
				t.Errorf("after Stop the shared root still holds %q", left)
			}
			if b, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/status"); err == nil && !bytes.Contains(b, []byte("State:\tZ")) {
				t.Errorf("after Stop the sandbox's process %s lives: %s", pid, b)
			}
			if err := d2.Start(ctx, spec); err != nil {
				t.Fatalf("Start() after Stop = %v", err)
			}
			if len(owned(own)) == 0 || len(owned(root)) > 0 {
				t.Errorf("after the next Start its own root holds %q and the shared one %q; want its files in its own only", owned(own), owned(root))
			}
			echo(d2, "again")
			if err := d2.Delete(ctx, spec.ID); err != nil {
				t.Fatalf("Delete() = %v", err)
			}
			if left := d2.Leftovers(spec.ID); len(left) > 0 {
				t.Errorf("after Delete the host holds %q", left)
			}
		})
	}
}

// moveToSharedRoot moves what the runtime keeps in a sandbox's own root to
// the shared root, rewriting runsc's state file to name the shared root,
// and removes the own root: the layout of a driver before own roots.
func moveToSharedRoot(t *testing.T, own, root string) {
	t.Helper()
	for _, n := range testenv.DirNames(t, own) {
		if strings.HasSuffix(n, ".state") {
			b, err := os.ReadFile(filepath.Join(own, n))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(`"`+own+`"`)) {
				t.Fatalf("runsc's state file %s does not name its root %s", n, own)
			}
			b = bytes.ReplaceAll(b, []byte(`"`+own+`"`), []byte(`"`+root+`"`))
			b = bytes.ReplaceAll(b, []byte(`"`+own+`/`), []byte(`"`+root+`/`))
			if err := os.WriteFile(filepath.Join(root, n), b, 0o600); err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(own, n))
			continue
		}
		if err := os.Rename(filepath.Join(own, n), filepath.Join(root, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(own); err != nil {
		t.Fatal(err)
	}
}

// startDefault starts sandbox id, of the default size on the test root
// file system, on a new driver for runtime rt (binary bin) with a state
// directory of its own, and deletes it when t ends.
func startDefault(t *testing.T, rt, bin, id string) (*oci.Driver, driver.Spec) {
	t.Helper()
	return startOn(t, rt, bin, id, drivertest.SnapshotRootFS(t, drivertest.BaseRootFS(t)))
}

// startOn is startDefault on the root file system root.
func startOn(t *testing.T, rt, bin, id, root string) (*oci.Driver, driver.Spec) {
	t.Helper()
	state := t.TempDir()
	t.Cleanup(func() { drivertest.UnmountUnder(t, state) }) // runsc's null-netns
	d := newDriver(t, rt, bin, state)
	spec := driver.Spec{ID: id, RootFS: root, AgentPath: drivertest.BuildAgent(t),
		Resources: sandbox.Sizes()[sandbox.DefaultSize]}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := d.Start(ctx, spec); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
	return d, spec
}
