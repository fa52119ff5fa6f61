// Command hearth is the hearth daemon (`hearth serve`) and its command-line
// client: every other verb is a thin client of the HTTP API (see package
// client), so what a script sees here is what any other door would see.
//
// It is built twice: bin/hearth with the tag nokube, which links no
// Kubernetes library and hands a daemon in a cluster to bin/hearth-kube,
// built without the tag (kubeflags.go, kube.go, kube_omitted.go).
//
// Conventions every verb keeps, because scripts depend on them:
//
//   - human output (tables, key: value lines) on stdout by default; --json
//     prints one JSON object instead;
//   - errors go to stderr as "error: <message>" and "hint: <hint>", or, with
//     --json, as {"error":{"code","message","hint","details"}};
//   - the exit code is the error code's sandbox.Code.ExitCode(), 2 for a
//     usage error (bad flags or arguments), and for exec the command's own
//     exit status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hearth/hearth/sandbox"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one hearth invocation and returns its exit code. It is main
// without the process: tests call it with their own environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	c := &cli{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		printUsage(stderr)
		return c.report(ctx, &usageError{msg: "no verb given"})
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		printUsage(stdout)
		return 0
	case "serve":
		// serve parses its own flags; --json there is a request for JSON errors too.
		c.json = wantsJSON(rest)
		return c.report(ctx, serveError(runServe(ctx, rest, getenv, stdout, stderr)))
	case "node":
		if len(rest) > 0 && isNodeOp(rest[0]) {
			return c.report(ctx, c.runSub(ctx, "node", "NAME", nodeOpsSummary, nodeOps(), rest))
		}
		c.json = wantsJSON(rest)
		return c.report(ctx, serveError(runNode(ctx, rest, getenv, stdout, stderr)))
	}
	v, ok := findVerb(name)
	if !ok {
		return c.report(ctx, &usageError{msg: fmt.Sprintf("unknown verb %q", name)})
	}
	return c.report(ctx, v.run(ctx, c, rest))
}

// serveError gives a daemon failure that is not a *sandbox.Error (a bad
// flag, a data dir it cannot open, a port in use) a hint that fits it.
func serveError(err error) error {
	var e *sandbox.Error
	var u *usageError
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.As(err, &e) || errors.As(err, &u) || errors.Is(err, context.Canceled) {
		return err
	}
	return &sandbox.Error{Code: sandbox.CodeInternal, Message: "serve: " + err.Error(),
		Hint: "the daemon could not start or stopped; 'hearth serve -h' lists its flags"}
}

// verb is one hearth subcommand.
type verb struct {
	name    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

// verbs lists the client verbs in the order `hearth help` shows them. serve
// is dispatched separately: its flags belong to the daemon.
func verbs() []verb {
	return []verb{
		{"create", "create a sandbox, or resume the one with that name", runCreate},
		{"list", "list the sandboxes you can see", runList},
		{"get", "show one sandbox", runGet},
		{"destroy", "destroy a sandbox and its disk", runDestroy},
		{"exec", "run a command in a sandbox", runExec},
		{"shell", "open an interactive terminal in a sandbox", runShell},
		{"top", "show what your sandboxes use: CPU, memory, disk, network, processes", runTop},
		{"gone", "list why your sandboxes went (destroyed, reaped, a create undone)", runGone},
		{"fs", "read, write and manage files in a sandbox", runFS},
		{"url", "print the URL of a sandbox's port, list its listening ports, make one public", runURL},
		{"egress", "show or change where an egress sandbox may connect", runEgress},
		{"checkpoint", "save a sandbox's disk as a checkpoint, live (or --delete one)", runCheckpoint},
		{"checkpoints", "list a sandbox's checkpoints", runCheckpoints},
		{"pool", "show the warm pool (operators)", runPool},
		{"doctor", "check the daemon, its store and nodes, and this host; exit 1 naming each problem", runDoctor},
		{"limits", "show your quota, budget, TTL cap and create-rate breaker", runLimits},
		{"tenant", "manage tenants (create, list, get, update)", runTenant},
		{"agent", "manage agent identities (create, list)", runAgent},
		{"token", "manage tokens (create, list, revoke)", runToken},
		{"audit", "show the audit log of calls to the daemon (JSONL with --json)", runAudit},
		{"secret", "manage a tenant's secrets (set, list, rm)", runSecret},
		{"key", "make the sealing key file the daemons of one store share (create)", runKey},
		{"image", "manage images: pull, import, export, create, build, list, inspect, rm, public", runImage},
		{"registry", "manage registry logins for pulls (login, list, rm)", runRegistry},
		{"binding", "bind a secret to an upstream API sandboxes call via NAME.hearth.internal (set, list, rm)", runBinding},
		{"restore", "put a sandbox's disk back to a checkpoint", runRestore},
		{"fork", "create a new sandbox from a checkpoint", runFork},
		{"sleep", "stop a sandbox's processes to free memory, keeping its disk", runSleep},
		{"wake", "start a sleeping sandbox again", runWake},
		{"move", "move a sleeping sandbox to another node of the store (operators)", runMove},
		{"mcp", "serve hearth's MCP tools on stdin and stdout, through the daemon", runMCP},
		{"version", "print the client's version", runVersion},
		{"help", "show help for hearth or one verb", runHelp},
	}
}

func findVerb(name string) (verb, bool) {
	for _, v := range verbs() {
		if v.name == name {
			return v, true
		}
	}
	return verb{}, false
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: hearth <verb> [flags] [args]\n\nVerbs:\n")
	fmt.Fprintf(w, "  %-11s %s\n", "serve", "run the hearth daemon")
	fmt.Fprintf(w, "  %-11s %s\n", "node", "run this machine as a Kubernetes node of hearth sandboxes; node cordon|uncordon|drain NAME manage one (operators)")
	for _, v := range verbs() {
		fmt.Fprintf(w, "  %-11s %s\n", v.name, v.summary)
	}
	fmt.Fprint(w, `
Every verb takes --json (machine-readable output) and -h (its usage).
A sandbox NAME is one of your tenant's: names are unique within a tenant,
and you may leave out your attribution prefix (agent-<you>-). An operator
writes TENANT/NAME for a tenant's sandbox; an operator's bare NAME is the
system tenant's.
Client verbs reach the daemon at HEARTH_URL with the token HEARTH_TOKEN
(--url and --token override). With neither set they use the local daemon,
`+defaultURL+`, and its operator token file when readable.

Run 'hearth help <verb>' for a verb's flags.
`)
}

// runHelp prints the usage of hearth or of one verb.
func runHelp(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("help", "[VERB]", "Show help for hearth or for one verb.")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch len(pos) {
	case 0:
		printUsage(c.stdout)
		return nil
	case 1:
		if pos[0] == "serve" {
			return runServe(ctx, []string{"-h"}, c.getenv, c.stdout, c.stderr)
		}
		v, ok := findVerb(pos[0])
		if !ok {
			return &usageError{verb: "help", msg: fmt.Sprintf("unknown verb %q", pos[0])}
		}
		return v.run(ctx, c, []string{"-h"})
	}
	return &usageError{verb: "help", msg: "help takes at most one verb"}
}

// wantsJSON reports whether args ask for JSON output, for verbs whose flags
// this file does not parse. It stops at "--".
func wantsJSON(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		return !hasVal || val == "true" || val == "1"
	}
	return false
}

// errHelpShown says a verb printed its usage because -h was given; the
// invocation succeeds.
var errHelpShown = errors.New("help shown")
