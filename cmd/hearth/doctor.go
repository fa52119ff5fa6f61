package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// Limits of doctor's checks.
const (
	// maxClockSkew is how far a node's clock may be from the store's before
	// doctor calls it a problem: heartbeats and leases are judged by the
	// store's clock, but a node's TTLs and timestamps by its own.
	maxClockSkew = 500 * time.Millisecond
	// doctorTimeout bounds the health call, so that a daemon that accepts
	// the connection but never answers is a problem, not a hang.
	doctorTimeout = 10 * time.Second
	// exitProblems is doctor's exit status when it found a problem: 1, as
	// `diff` and `grep` say "found something"; usage errors keep 2 and
	// the error codes 10 and up.
	exitProblems = 1
)

// check is the outcome of one of doctor's checks, or one problem it found:
// a check may find several (one per dead node, say), each its own check of
// the same name. Name is one of the stable names daemon, store, schema,
// leader, nodes, clock, versions, runtime, btrfs and network.
type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func pass(name, format string, a ...any) check {
	return check{Name: name, OK: true, Detail: fmt.Sprintf(format, a...)}
}

func problem(name, format string, a ...any) check {
	return check{Name: name, Detail: fmt.Sprintf(format, a...)}
}

// doctorHost is how doctor looks at the machine it runs on. Every field
// must be set; osDoctorHost has the real ones and tests their own. Each
// only reads.
type doctorHost struct {
	// lookPath finds an executable in PATH, as exec.LookPath.
	lookPath func(file string) (string, error)
	// readFile reads a file, as os.ReadFile.
	readFile func(name string) ([]byte, error)
	// isLocal reports whether the daemon URL names this machine, where
	// the host checks then describe the daemon's host.
	isLocal func(rawURL string) bool
}

// osDoctorHost looks at this machine.
func osDoctorHost() doctorHost {
	return doctorHost{lookPath: exec.LookPath, readFile: os.ReadFile, isLocal: isLocalURL}
}

// runDoctor checks the deployment the CLI reaches and this host.
func runDoctor(ctx context.Context, c *cli, args []string) error {
	return doctor(ctx, c, args, osDoctorHost(), time.Now)
}

// doctor is runDoctor looking at host, with now as its clock. It prints one
// line per problem and returns exitStatus(exitProblems) when there is any,
// so that report prints nothing more; else one line per check and nil.
// With --json it prints {"checks":[check…],"problems":N} either way. The
// checks of the store and its nodes need an operator token and an
// answering daemon; when they cannot run they are not listed. The host
// checks run only when the daemon's URL names this machine.
func doctor(ctx context.Context, c *cli, args []string, host doctorHost, now func() time.Time) error {
	fs := c.clientFlagSet("doctor", "[--json]",
		"Check the daemon, its store and nodes (with an operator token), and this host's runtime,\n"+
			"btrfs and networking when the daemon runs here. Prints one line per problem and exits 1,\n"+
			"or one \"ok\" line per check and exits 0.")
	if _, err := fs.parseArgs(args, "doctor"); err != nil {
		return err
	}
	cl := c.client()
	u := resolveConfig(c.url, c.token, c.getenv, os.ReadFile).URL
	checks := daemonChecks(ctx, cl, u, c.tokenSource, now)
	if err := ctx.Err(); err != nil {
		return err // interrupted: the checks did not run, and report says so
	}
	if host.isLocal(u) {
		checks = append(checks, hostChecks(host)...)
	}
	return printChecks(c, checks)
}

// printChecks prints checks as doctor's contract says, and returns
// exitStatus(exitProblems) when any failed.
func printChecks(c *cli, checks []check) error {
	n := 0
	for _, ch := range checks {
		if !ch.OK {
			n++
		}
	}
	switch {
	case c.json:
		if err := c.printJSON(map[string]any{"checks": checks, "problems": n}); err != nil {
			return err
		}
	case n == 0:
		for _, ch := range checks {
			fmt.Fprintf(c.stdout, "ok %s: %s\n", ch.Name, ch.Detail)
		}
	default:
		for _, ch := range checks {
			if !ch.OK {
				fmt.Fprintf(c.stdout, "doctor: %s: %s\n", ch.Name, ch.Detail)
			}
		}
		fmt.Fprintf(c.stdout, "doctor: %d %s\n", n, plural(n, "problem"))
	}
	if n > 0 {
		return exitStatus(exitProblems)
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// daemonChecks asks the daemon at u for its health: the daemon check, and
// with an operator token (tokenSource names where the token came from, ""
// for none) the store check and those of clusterChecks.
func daemonChecks(ctx context.Context, cl *client.Client, u, tokenSource string, now func() time.Time) []check {
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	h, err := cl.Health(ctx)
	var e *sandbox.Error
	switch {
	case err == nil:
	case errors.As(err, &e) && e.Code == sandbox.CodeInternal && tokenSource != "":
		// Only an operator's health reads the store: its failure is the store's.
		return []check{
			pass("daemon", "%s answers", u),
			problem("store", "store unreachable: the daemon at %s could not read the store's nodes (%s); its log says why", u, e.Message),
		}
	case errors.As(err, &e) && e.Code == sandbox.CodeUnavailable:
		return []check{problem("daemon", "%s", e.Message)} // it names the URL and the error
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return []check{problem("daemon", "%s did not answer GET /v1/health within %s", u, doctorTimeout)}
	default:
		return []check{problem("daemon", "GET %s/v1/health: %v", strings.TrimRight(u, "/"), err)}
	}
	checks := []check{pass("daemon", "%s answers (runtime %s)", u, dash(h.Runtime))}
	if h.Status != "ok" {
		checks[0] = problem("daemon", "%s answers status %q, not \"ok\"", u, h.Status)
	}
	if h.Cluster == nil {
		msg := "doctor needs an operator token to check the store and its nodes: make one with `hearth token create --operator`"
		if tokenSource == "" {
			msg = "no token was sent; " + msg
		}
		return append(checks, problem("store", "%s", msg))
	}
	checks = append(checks, pass("store", "%s, answered by node %s", h.Cluster.Store, h.Cluster.Node))
	return append(checks, clusterChecks(*h.Cluster, now())...)
}

// clusterChecks are the schema, leader, nodes, clock and versions checks
// of a store's health, as the doctor's clock reads now.
func clusterChecks(h sandbox.ClusterHealth, now time.Time) []check {
	var checks []check
	if h.Schema == h.SchemaKnown {
		checks = append(checks, pass("schema", "the store and node %s's binary are at schema %d", h.Node, h.Schema))
	} else {
		fix := "upgrade hearth on it"
		if h.Schema < h.SchemaKnown {
			fix = "restart it to migrate the store"
		}
		checks = append(checks, problem("schema", "the store is at schema %d and node %s's binary knows %d: %s",
			h.Schema, h.Node, h.SchemaKnown, fix))
	}
	if h.Leader == "" {
		checks = append(checks, problem("leader", "no node runs the store-wide loops (reaping, pool, audit retention)"))
	} else {
		checks = append(checks, pass("leader", "node %s runs the store-wide loops", h.Leader))
	}
	return append(checks, nodeChecks(h.Nodes, now)...)
}

// nodeChecks are the nodes, clock and versions checks: a node that stopped
// heartbeating, one whose clock is more than maxClockSkew from the store's,
// and nodes that run different versions.
func nodeChecks(nodes []sandbox.NodeHealth, now time.Time) []check {
	var checks, dead, skewed []check
	var live []string
	versions := map[string][]string{} // version → node names
	var worst time.Duration
	for _, n := range nodes {
		if n.Live {
			live = append(live, n.Name)
		} else {
			dead = append(dead, problem("nodes", "node %s is not live: its last heartbeat was at %s (%s ago); its sandboxes are unavailable",
				n.Name, formatTime(n.HeartbeatAt.UTC()), formatAge(now.Sub(n.HeartbeatAt))))
		}
		skew := time.Duration(n.ClockSkewMS) * time.Millisecond
		if skew.Abs() > maxClockSkew {
			way := "ahead of"
			if skew < 0 {
				way = "behind"
			}
			skewed = append(skewed, problem("clock", "node %s's clock is %s %s the store's (more than %s)", n.Name, skew.Abs(), way, maxClockSkew))
		}
		worst = max(worst, skew.Abs())
		v := firstNonEmpty(n.Version, "(unknown)")
		versions[v] = append(versions[v], n.Name)
	}
	switch {
	case len(nodes) == 0:
		checks = append(checks, problem("nodes", "the store knows no nodes"))
	case len(dead) == 0:
		checks = append(checks, pass("nodes", "%d live: %s", len(live), strings.Join(live, ", ")))
	}
	checks = append(checks, dead...)
	if len(skewed) == 0 {
		checks = append(checks, pass("clock", "every node's clock is within %s of the store's (at most %s off)", maxClockSkew, worst))
	}
	checks = append(checks, skewed...)
	return append(checks, versionCheck(versions))
}

// versionCheck is the versions check of the nodes by version.
func versionCheck(versions map[string][]string) check {
	vs := slices.Sorted(maps.Keys(versions))
	switch len(vs) {
	case 0:
		return pass("versions", "no nodes to compare")
	case 1:
		return pass("versions", "every node runs %s", vs[0])
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v + " (" + strings.Join(versions[v], ", ") + ")"
	}
	return problem("versions", "the nodes run different versions: %s; upgrade them to one", strings.Join(parts, ", "))
}

// hostChecks are the runtime, btrfs and network checks of this machine.
func hostChecks(h doctorHost) []check {
	var checks []check
	var runtimes []string
	for _, name := range []string{"runsc", "runc"} {
		if p, err := h.lookPath(name); err == nil {
			runtimes = append(runtimes, name+" ("+p+")")
		}
	}
	if len(runtimes) == 0 {
		checks = append(checks, problem("runtime", "neither runsc nor runc is in PATH: the daemon cannot run sandboxes; install gVisor's runsc or runc"))
	} else {
		checks = append(checks, pass("runtime", "%s", strings.Join(runtimes, ", ")))
	}
	switch fss, err := h.readFile("/proc/filesystems"); {
	case err != nil:
		checks = append(checks, problem("btrfs", "cannot read the kernel's filesystems: %v", err))
	case !slices.Contains(strings.Fields(string(fss)), "btrfs"):
		checks = append(checks, problem("btrfs", "the kernel has no btrfs: layers fall back to overlay (slower checkpoints, no disk limits)"))
	default:
		checks = append(checks, pass("btrfs", "the kernel has btrfs"))
	}
	return append(checks, networkChecks(h)...)
}

// networkChecks is the network check: IPv4 forwarding can be read (the
// daemon turns it on), and the tools the sandbox network is made with
// (package network) are in PATH: ip and tc (iproute2), iptables and
// iptables-restore, ipset.
func networkChecks(h doctorHost) []check {
	const forward = "/proc/sys/net/ipv4/ip_forward"
	var problems []check
	b, err := h.readFile(forward)
	if err != nil {
		problems = append(problems, problem("network", "cannot read %s: %v", forward, err))
	}
	var tools, missing []string
	for _, name := range []string{"ip", "tc", "iptables", "iptables-restore", "ipset"} {
		if _, err := h.lookPath(name); err != nil {
			missing = append(missing, name)
		} else {
			tools = append(tools, name)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, problem("network", "%s not in PATH: the daemon cannot make the sandboxes' network (install iproute2, iptables and ipset)", strings.Join(missing, ", ")))
	}
	if len(problems) > 0 {
		return problems
	}
	return []check{pass("network", "ip_forward is %s; %s", strings.TrimSpace(string(b)), strings.Join(tools, ", "))}
}

// isLocalURL reports whether rawURL's host is this machine: a loopback
// address, "localhost", this host's name, or an address of one of its
// interfaces. Names are not resolved, so that the answer is quick.
func isLocalURL(rawURL string) bool {
	if !strings.Contains(rawURL, "://") {
		rawURL = "http://" + rawURL // as the client takes it
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		addrs, _ := net.InterfaceAddrs()
		return slices.ContainsFunc(addrs, func(a net.Addr) bool {
			n, ok := a.(*net.IPNet)
			return ok && n.IP.Equal(ip)
		})
	}
	name, _ := os.Hostname()
	return strings.EqualFold(host, "localhost") || (name != "" && strings.EqualFold(host, name))
}
