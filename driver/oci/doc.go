// Package oci is the driver for OCI runtimes on this host: runsc (gVisor),
// runc and crun. One Driver drives one runtime binary.
//
// Every sandbox is an OCI bundle in the driver's state directory whose root
// is the host-prepared root filesystem and whose process is hearth-agent,
// bind-mounted read-only from the host. The agent serves a unix socket on
// the host, so the daemon reaches it without the runtime's help and a
// daemon restart only drops connections. Under runc and crun the daemon
// makes that socket in the sandbox's directory, which the sandbox never
// sees, and the agent inherits it; under runsc the agent makes it in a
// small host tmpfs shared with the sandbox, where the daemon never follows
// a name (see channel.go). runc and crun sandboxes run in a user namespace
// of their own over an idmapped root (see userns.go); what they bind-mount
// from the host comes from the driver's mount directory (see share.go).
//
// Layout of Options.StateDir, which the driver owns:
//
//	runtime                the runtime that owns this directory ("runsc")
//	root/                  the runtime's shared root: runsc's --shared-root, with
//	                       null-netns, the empty network namespace its gofers
//	                       share (a bind mount that stays); and the --root of
//	                       containers that drivers before own roots made there
//	sandboxes/<id>/        one per sandbox; its existence is the record that
//	  config.json          the sandbox exists (running or stopped)
//	  runtime/             the runtime's --root for this sandbox's container, made
//	                       by each start and removed with the container: runsc
//	                       matches every name in a root on each command, so one
//	                       root per sandbox keeps a start's cost from growing
//	                       with the number of sandboxes
//	  console.log          PID 1's stdout and stderr (console.log.1: the boot before)
//	  runtime.log          the runtime's own log (--log)
//	  oom                  present when the sandbox's last run hit its memory limit
//	  pid                  the runtime's pid of the sandbox (run --pid-file): State's while it is frozen
//	  stopped              present when Stop deleted the container (no need to ask the runtime)
//	  run.pid              the pid of the runtime's `run --detach` while it works (a later daemon stops a stray one)
//	  paused               runsc: present while Freeze has the sandbox paused
//	  quiet                present while a memory checkpoint has the agent quiet (Dial waits)
//	  ids                  runc, crun: the slot of the user namespace range it claimed (see userns.go)
//	  agent.sock           runc, crun: the agent's listening socket, made by the daemon
//	  run/                 runsc: a 64 KiB tmpfs mounted at /run/hearth in the sandbox,
//	    agent.sock         where the agent makes its socket,
//	    resume             and the marker that resumes it after a memory checkpoint
//	  memory-raised        while a memory checkpoint has the cgroup's memory limits raised: the old ones
//	  busy                 locked (shared) by every runtime command on the sandbox while it runs; Recover waits for it
//	memory/<key>/          a memory image (runsc), sealed: key (its data key, sealed by Options.Sealer)
//	                       and <file>.sealed per file of runsc's checkpoint (see images.go)
//	memory/<key>.tmp/      an image being sealed; memory/<key>.save-*, .load-*: tmpfs mounts of
//	                       an image's plaintext while it is taken or restored (Recover removes all three)
//	memory/<key>.taken     the name of the .save- tmpfs that holds a whole image not yet sealed
//	                       (Recover seals it; see seal.go)
//
// Elsewhere on the host: Options.MountDir (/run/hearth/oci/<hash>), the
// driver's private tmpfs with the agent binary and egress resolv.conf
// files that sandboxes bind-mount, and runc roots while they start; and
// Options.IDClaimDir (/run/hearth/ids), one file per user namespace range
// in use, shared by every hearth daemon on the host.
//
// Surviving the daemon: sandboxes are made with `run --detach` (one runtime
// invocation instead of `create` + `start`, which saves ≈8 ms with runc and
// ≈30 ms with runsc; never an attached `run`), in a session of their own
// (setsid), with their stdio on
// console.log rather than on a pipe the daemon holds, and with a runtime root
// that outlives the daemon. A daemon that starts again builds a new Driver on
// the same StateDir, calls Recover, and dials the same sockets.
//
// Cgroups: every sandbox gets /<CgroupParent>/<id> in every hierarchy the
// runtime uses, with Resources as limits (plus headroom, see resources).
// On a hybrid host (v1 controllers and a cgroup2 mount at
// /sys/fs/cgroup/unified), runc uses every v1 hierarchy, name=systemd and
// the unified one; runsc uses every v1 hierarchy and name=systemd, puts its
// sandbox and gofer processes there and enforces the cpu, memory and pids
// limits on them (it needs no --ignore-cgroups); Debian's crun 1.8.1 refuses
// hybrid hosts. Teardown checks every hierarchy in mountinfo, so a leaked
// cgroup is noticed and removed, not left behind.
//
// Limits under gVisor: the host cgroup holds the user-space kernel, so
// hitting it kills the whole sandbox (State then says stopped and
// OOMKilled). The agent therefore enforces the sandbox's pids as a
// per-command RLIMIT_NPROC and its memory as the sandbox's own OOM killer
// (--memory), below the host limits.
//
// Freezing (driver.Freezer): under runc and crun, Freeze and Thaw write the
// sandbox's cgroup directly, the v1 freezer's freezer.state on a v1 or
// hybrid host and cgroup.freeze on a v2 one, which takes about a
// millisecond where `runc pause` takes ≈110 ms. While a sandbox is frozen
// the driver does not ask the runtime about it: it is running, with the
// pid that run wrote to its pid file. Under runsc the cgroup freezer is not
// safe (a systrap stub frozen in a seccomp user notification loses it, and
// the sentry kills the sandbox), so Freeze is `runsc pause`, ≈14 ms, and
// Thaw `runsc resume`; Capabilities says so (CheapFreeze false). Stop and
// Delete thaw a frozen sandbox before they kill it, and Recover thaws every
// sandbox a dead daemon left frozen or paused.
//
// Stop deletes the runtime's container as well as killing it, so a stopped
// (sleeping) sandbox holds no cgroups and no runtime state: only its
// directory. Start on it creates the container again on the same root.
//
// Networking (driver.Spec.Network): a sandbox in mode none gets a new,
// empty network namespace (runsc: --network=none), loopback only. An
// egress sandbox is attached to the host's network by Options.Network (see
// package network for the namespace, the veth, the addressing and the
// firewall policy) before the runtime starts, and its config.json names
// the attachment's namespace: runc and crun join it, and runsc, run with
// --network=sandbox for that sandbox alone, starts its sandbox in it and
// gVisor's netstack takes its eth0 over (taking the addresses off the
// interface, which the next Start's attach puts back). Every Start passes
// the spec's network caps (Resources.NetBitsPerSec and NetConns) to the
// attach, which enforces them on the host, out of the sandbox's reach, and
// replaces those of the previous run: a wake gets its spec's. So do its
// own egress rules (Spec.Egress), which the host enforces in a chain of
// per-sandbox rules; the driver is a driver.EgressSetter, and SetEgress
// replaces them while the sandbox runs (network.Host.SetEgress, one
// iptables transaction), also on its open connections, recording nothing:
// the next Start applies Spec.Egress again, so the host keeps the spec
// up to date. SetEgress on a sandbox with no attachment (mode none) is an
// error. When the
// network host serves DNS (network.Host.ServesDNS), every Start of an
// egress sandbox writes <dir>/resolv.conf, naming the sandbox's gateway,
// and bind-mounts it read-only on the root's /etc/resolv.conf (made empty
// when missing, refused when not a regular file); a sandbox in mode none
// keeps its image's file. The
// attachment, and with it the sandbox's address, lives until Delete (Stop
// keeps it for the wake); Recover removes attachments whose sandbox has no
// directory.
// A driver without Options.Network reports no Egress in Capabilities and
// refuses an egress Start (ErrNoEgress) before it makes anything.
//
// The code: the Driver (oci.go, and start.go, stop.go, freeze.go,
// memory.go and network.go for its calls) implements driver.Driver and
// its optional capabilities and orchestrates them; each part it holds has
// one job: stateDir (statedir.go) the layout above, runner (runtime.go)
// the runtime binary, cgroups (cgroup.go) the cgroups and their memory
// limits, freezer (freeze.go) freezing and thawing, channels (channel.go)
// the agent channels, mountDir (share.go) the mount directory, idClaims
// (userns.go) the user namespace ranges, networks (network.go) the network
// attachments, bundles (bundle.go; the configuration itself is spec.go's
// pure bundleSpec) the bundles, and images (images.go, seal.go) the memory
// images.
package oci
