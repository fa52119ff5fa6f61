package oci

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hearth/hearth/driver"
)

// Paths inside every sandbox.
const (
	// AgentMount is where the hearth-agent binary is bind-mounted, read-only.
	// It lives in a directory of its own so that nothing in the image can
	// shadow it and so that the mount point is obvious to a reader of the
	// sandbox's root.
	AgentMount = "/.hearth/hearth-agent"
	// SocketDir is where a runsc sandbox's shared host directory is
	// bind-mounted, read-write: the agent listens on SocketDir/SocketName
	// and the daemon connects to the same file from the host (see
	// channel.go). runc and crun sandboxes have no such directory.
	SocketDir = "/run/hearth"
	// SocketName is the agent socket's file name in SocketDir.
	SocketName = "agent.sock"
	// ResolvConf is where an egress sandbox's generated resolv.conf is
	// bind-mounted, read-only, when the network host serves DNS.
	ResolvConf = "/etc/resolv.conf"
)

// defaultPath is PID 1's PATH when Spec.Env names none: the agent runs
// commands with its own environment underneath the request's, so without it
// "python3" would not resolve.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Host cgroup headroom above a sandbox's Resources.
//
// Under runc and crun the cgroup is the limit, but pids counts threads and the
// agent is a Go program with a handful of its own: a fork bomb that fills the
// pids limit would also stop the agent from starting a thread, which a Go
// program cannot survive. So the agent creates agentThreads threads at start
// and keeps them (--threads), within agentTasks of headroom: the commands can
// fill what is left, the agent needs no new thread.
//
// Under runsc the host cgroup holds the whole user-space kernel (the sentry,
// the gofer, and one systrap stub process plus stub threads per guest
// address space), and gVisor's own memory cgroup only reports. The agent
// enforces Resources itself: pids per command with RLIMIT_NPROC, memory as
// the sandbox's OOM killer (agent/memguard.go). The host limits sit above
// that with room for gVisor itself and, for memory, half as much again for
// what commands allocate between two looks of the agent (several hogs at
// once on a saturated host went a quarter over): if the host limit is
// hit, the host's OOM killer picks one of the sandbox's host processes,
// usually the systrap stub of the largest guest process (which ends that
// process), but it may pick the sentry and with it the whole sandbox.
const (
	agentTasks        = 64        // threads of the agent itself (runc, crun)
	agentThreads      = 32        // of which it creates at start (runc, crun)
	gvisorTasks       = 256       // sentry, gofer and stub threads (runsc)
	gvisorTasksFactor = 2         // host tasks per guest task under systrap
	gvisorMemory      = 192 << 20 // sentry and gofer memory (runsc)
	cpuPeriod         = 100_000   // µs; the CFS default
)

// agentCapabilities are the agent's, PID 1's, and they bound what any
// process of the sandbox may ever hold. The agent switches to the sandbox
// user for commands and file operations (SETUID, SETGID), signals the
// process groups it started (KILL), and drops from its bounding set what
// no command may hold (SETPCAP, which that takes; see cmd/hearth-agent's
// lockDown). Under runsc it also traces each command up to its exec to set
// its rlimits and hand it its secrets (SYS_PTRACE: gVisor, unlike Linux,
// checks it for PTRACE_TRACEME by a child that changed its uid; it is the
// sentry's own ptrace, not the host's); lockDown keeps SYS_PTRACE from
// every command. The rest are for root programs an image may ship (sudo,
// login tools): act on files of any owner (CHOWN, FOWNER, DAC_OVERRIDE,
// FSETID), bind low ports (NET_BIND_SERVICE), write audit records
// (AUDIT_WRITE). The inheritable and ambient sets stay empty, so commands
// run as the sandbox user start with no capabilities at all; under runc
// and crun root inside is an unprivileged host uid whatever it holds.
func agentCapabilities(runtime string) []string {
	caps := []string{
		"CAP_AUDIT_WRITE",
		"CAP_CHOWN",
		"CAP_DAC_OVERRIDE",
		"CAP_FOWNER",
		"CAP_FSETID",
		"CAP_KILL",
		"CAP_NET_BIND_SERVICE",
		"CAP_SETGID",
		"CAP_SETPCAP",
		"CAP_SETUID",
	}
	if runtime == RuntimeRunsc {
		caps = append(caps, "CAP_SYS_PTRACE")
	}
	return caps
}

// maskedPaths and readonlyPaths are runc's defaults (`runc spec`): they hide
// the host's kernel knobs that /proc and /sys would otherwise expose.
var (
	maskedPaths = []string{
		"/proc/acpi",
		"/proc/asound",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

// bundle is what bundleSpec makes a sandbox's configuration of.
type bundle struct {
	runtime string
	spec    driver.Spec
	// root is the root filesystem the runtime gets: spec.RootFS under
	// runsc, its idmapped mount under runc and crun (see userns.go).
	root string
	// agent is the host file bind-mounted read-only at AgentMount.
	agent string
	// socketDir is the host directory mounted at SocketDir (runsc only;
	// see channel.go).
	socketDir    string
	cgroupParent string
	// netns is the network namespace to join; "" makes a new empty one.
	netns string
	// resolvConf, when not "", is the host file bind-mounted read-only on
	// /etc/resolv.conf: an egress sandbox's, naming its gateway, whose DNS
	// queries the host's forwarder answers (see network.Host.ServeDNS).
	// With "" the sandbox has the image's file.
	resolvConf string
	// ids, under runc and crun, is the host range the sandbox's user
	// namespace maps its ids 0–65535 onto.
	ids *idRange
}

// bundleSpec returns the OCI runtime configuration of one sandbox: b.root
// as the container's writable root, hearth-agent as PID 1, spec.Resources
// as the cgroup limits (with the headroom the runtime needs) under
// cgroupParent, the network namespace b.netns or a new empty one, and
// under runc and crun a user namespace over b.ids. It is a pure function so
// that what each runtime is asked for can be read and tested without
// running one.
func bundleSpec(b bundle) *specs.Spec {
	spec := b.spec
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	caps := agentCapabilities(b.runtime)
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
		// Without netns, a new, empty network namespace: only
		// loopback, which runc and crun bring up; runsc gets
		// --network=none. With it (egress), the attachment's:
		// runc and crun join it, and runsc, with
		// --network=sandbox, starts its sandbox in it and takes
		// its interfaces over (see networkFlags).
		{Type: specs.NetworkNamespace, Path: b.netns},
	}
	linux := &specs.Linux{
		CgroupsPath:   cgroupsPath(b.cgroupParent, spec.ID),
		Resources:     resources(b.runtime, spec),
		MaskedPaths:   maskedPaths,
		ReadonlyPaths: readonlyPaths,
	}
	if b.ids != nil {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UserNamespace})
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: b.ids.base, Size: idRangeSize}}
		linux.UIDMappings, linux.GIDMappings = m, m
	}
	linux.Namespaces = ns
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: hostname,
		Root:     &specs.Root{Path: b.root, Readonly: false},
		Process: &specs.Process{
			User:         specs.User{UID: 0, GID: 0},
			Args:         agentArgs(b.runtime, spec),
			Env:          agentEnv(spec.Env),
			Cwd:          "/",
			Capabilities: &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
			// No rlimits: PID 1 inherits the daemon's (set them on its
			// service). runc applies rlimits after dropping to the
			// container's capabilities, so it cannot raise one above
			// the daemon's hard limit anyway.
			// The agent must change its uid to run commands as the sandbox
			// user; NoNewPrivileges does not stop that (it only ignores
			// setuid bits), but it would also apply to every command, so
			// it is left to the agent.
			NoNewPrivileges: false,
		},
		Mounts: mounts(b),
		Linux:  linux,
	}
}

// agentArgs is PID 1's command line. Under runsc the agent also gets the
// per-command rlimits that stand in for the cgroup limits gVisor does not
// enforce inside (its memory cgroup only reports, and a fork bomb that
// reaches the host pids limit would take the whole sandbox with it). Under
// runc and crun RLIMIT_NPROC would count the uid across the host, shared
// with every other sandbox, so the cgroup alone limits them, and the agent
// keeps threads in reserve instead (see agentTasks).
func agentArgs(runtime string, spec driver.Spec) []string {
	args := []string{AgentMount}
	if runtime == RuntimeRunsc {
		args = append(args, "--socket", SocketDir+"/"+SocketName)
	} else {
		args = append(args, "--listen-fd", strconv.Itoa(agentListenFD))
	}
	args = append(args, "--uid", strconv.Itoa(spec.UID), "--gid", strconv.Itoa(spec.GID))
	if spec.Home != "" {
		args = append(args, "--home", spec.Home)
	}
	if spec.WorkDir != "" {
		args = append(args, "--workdir", spec.WorkDir)
	}
	if ownProcs(spec.Env) {
		args = append(args, "--unset", procsVar)
	}
	if runtime != RuntimeRunsc {
		return append(args, "--threads", strconv.Itoa(agentThreads))
	}
	if n := spec.Resources.Pids; n > 0 {
		args = append(args, "--nproc", strconv.FormatInt(n, 10))
	}
	if n := spec.Resources.MemoryBytes; n > 0 {
		args = append(args, "--memory", strconv.FormatInt(n, 10))
	}
	return args
}

// procsVar is the variable that sets a Go program's processors at its
// start. The agent calls runtime.GOMAXPROCS(1) first thing, but by then
// the runtime has made a processor per CPU, and a second one's structures
// and span cache stay: started with GOMAXPROCS=1 instead, an idle sandbox
// under gVisor holds 0.2 MiB less (docs/BENCHMARKS.md, "The agent's price
// under gVisor").
const procsVar = "GOMAXPROCS"

// ownProcs reports whether the agent gets procsVar for itself: when the
// sandbox's environment does not set it. The agent keeps it from the
// commands (--unset), whose Go programs would otherwise run on one
// processor.
func ownProcs(env []string) bool { return !hasVar(env, procsVar) }

// hasVar reports whether env sets the variable name.
func hasVar(env []string, name string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// agentEnv is PID 1's environment: spec's, with a default PATH when it has
// none, and GOMAXPROCS=1 when it does not set it (ownProcs).
func agentEnv(env []string) []string {
	out := append([]string(nil), env...)
	if !hasVar(env, "PATH") {
		out = append(out, defaultPath)
	}
	if ownProcs(env) {
		out = append(out, procsVar+"=1")
	}
	return out
}

// mounts are runc's default mounts plus the agent, and the sandbox's
// resolv.conf when b has one (read-only on /etc/resolv.conf).
//
// Under runsc also the shared socket directory, and the root's own /tmp
// bound on /tmp, so that /tmp persists with the sandbox (across sleep,
// restore and fork, and in its checkpoints): without an explicit /tmp
// mount gVisor puts an internal tmpfs there. Under runc and crun /tmp is
// simply the root's, and there is no shared directory.
//
// /sys under runc and crun: the sandbox's user namespace may mount a sysfs
// only for a network namespace it owns. The empty one it makes is; an
// egress sandbox's, made by the host, is not, and runc would then bind the
// host's whole /sys instead. So an egress sandbox gets an empty read-only
// tmpfs on /sys (with its cgroups below): what reads /sys/class/net or
// /sys/devices finds nothing there.
func mounts(b bundle) []specs.Mount {
	sys := specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs",
		Options: []string{"nosuid", "noexec", "nodev", "ro"}}
	if b.ids != nil && b.netns != "" {
		sys = specs.Mount{Destination: "/sys", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "noexec", "nodev", "ro", "size=4k", "nr_inodes=16", "mode=555"}}
	}
	var m []specs.Mount
	if b.runtime == RuntimeRunsc {
		m = append(m, specs.Mount{Destination: "/tmp", Type: "bind", Source: filepath.Join(b.root, "tmp"),
			Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	m = append(m,
		specs.Mount{Destination: "/proc", Type: "proc", Source: "proc"},
		specs.Mount{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		specs.Mount{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
			Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue",
			Options: []string{"nosuid", "noexec", "nodev"}},
		sys,
		specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
			Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		specs.Mount{Destination: AgentMount, Type: "bind", Source: b.agent,
			Options: []string{"bind", "ro", "nosuid", "nodev"}},
	)
	if b.socketDir != "" {
		m = append(m, specs.Mount{Destination: SocketDir, Type: "bind", Source: b.socketDir,
			Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
	if b.resolvConf != "" {
		m = append(m, specs.Mount{Destination: ResolvConf, Type: "bind", Source: b.resolvConf,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	return m
}

// cgroupsPath is the sandbox's cgroup relative to every hierarchy's root:
// parent/id. An absolute path makes runc, crun and runsc create it under the
// root of each v1 controller (and of the unified hierarchy), outside the
// daemon's own cgroup, so the sandbox's limits and lifetime do not depend on
// the daemon's.
func cgroupsPath(parent, id string) string {
	return "/" + strings.Trim(parent, "/") + "/" + id
}

// resources are the host cgroup limits for spec under runtime: the sandbox's
// own under runc and crun, with headroom for gVisor itself under runsc (see
// agentTasks and gvisorMemory), and its memory as the reservation. A zero
// Resources field means no limit.
func resources(runtime string, spec driver.Spec) *specs.LinuxResources {
	r := &specs.LinuxResources{
		// Deny every device node but the ones the runtime adds itself
		// (null, zero, full, random, urandom, tty, ptmx).
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	res := spec.Resources
	if res.MilliCPU > 0 {
		quota := res.MilliCPU * cpuPeriod / 1000
		period := uint64(cpuPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if res.MemoryBytes > 0 {
		limit := res.MemoryBytes
		if runtime == RuntimeRunsc {
			limit += res.MemoryBytes/2 + gvisorMemory
		}
		// The reservation is the sandbox's own memory (v1
		// memory.soft_limit_in_bytes, v2 memory.low): when the host runs
		// short, the kernel reclaims first from sandboxes above it.
		reserve := res.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &limit, Reservation: &reserve}
	}
	if res.Pids > 0 {
		limit := res.Pids + agentTasks
		if runtime == RuntimeRunsc {
			limit = res.Pids*gvisorTasksFactor + gvisorTasks
		}
		r.Pids = &specs.LinuxPids{Limit: &limit}
	}
	return r
}

// validID reports whether id is a valid sandbox id for the runtimes and for
// a path component: lowercase letters and digits, as driver.Spec says, and
// short enough for every runtime.
func validID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("oci: sandbox id %q: want 1 to 64 characters", id)
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return fmt.Errorf("oci: sandbox id %q: want lowercase letters and digits only", id)
		}
	}
	return nil
}
