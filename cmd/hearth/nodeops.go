package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// nodeOps are the client ops of `hearth node` (without one, `hearth node`
// runs a node daemon).
func nodeOps() []subOp {
	return []subOp{
		{"cordon", "NAME", "stop placing new sandboxes on node NAME (operators, on a control plane)", runNodeCordon},
		{"uncordon", "NAME", "let the fleet place sandboxes on node NAME again", runNodeUncordon},
		{"drain", "NAME", "cordon node NAME, then move its sandboxes to other nodes", runNodeDrain},
	}
}

// isNodeOp says whether `hearth node ARG …` is a client op, not the daemon.
func isNodeOp(arg string) bool {
	for _, op := range nodeOps() {
		if op.name == arg {
			return true
		}
	}
	return false
}

const nodeOpsSummary = "Manage the nodes of a fleet through its control plane (without an op, `hearth node` runs one; see hearth node -h)."

// runNodeCordon cordons a node.
func runNodeCordon(ctx context.Context, c *cli, args []string) error {
	return cordonOp(ctx, c, args, "cordon")
}

// runNodeUncordon lifts a node's cordon.
func runNodeUncordon(ctx context.Context, c *cli, args []string) error {
	return cordonOp(ctx, c, args, "uncordon")
}

// cordonOp runs op, cordon or uncordon, on the node args name.
func cordonOp(ctx context.Context, c *cli, args []string, op string) error {
	fs := c.subFlagSet("node", "", nodeOps(), op)
	pos, err := fs.parseArgs(args, "node "+op, "NAME")
	if err != nil {
		return err
	}
	if err := c.client().Admin().Cordon(ctx, pos[0], op == "cordon"); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"node": pos[0], "cordoned": op == "cordon"})
	}
	fmt.Fprintf(c.stdout, "node %s %sed\n", pos[0], op)
	return nil
}

// drained is what drain did with one sandbox.
type drained struct {
	Sandbox string         `json:"sandbox"`
	Node    string         `json:"node,omitempty"`
	Status  sandbox.Status `json:"status,omitempty"`
	// Processes says what became of a running sandbox's processes:
	// "kept" (resumed from a memory checkpoint), "restarted", or, when
	// the restore failed, "held by checkpoint ID" (the sandbox sleeps;
	// `hearth restore` of that checkpoint resumes them).
	Processes string         `json:"processes,omitempty"`
	Error     *sandbox.Error `json:"error,omitempty"`
}

// runNodeDrain cordons a node, then moves each of its sandboxes to a node
// the sandbox's node chooses (see drainOne). A sandbox that cannot move
// stays where it is, and drain says why.
func runNodeDrain(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("node", "", nodeOps(), "drain")
	pos, err := fs.parseArgs(args, "node drain", "NAME")
	if err != nil {
		return err
	}
	node, cl := pos[0], c.client()
	if err := cl.Admin().Cordon(ctx, node, true); err != nil {
		return err
	}
	list, err := cl.List(ctx)
	if err != nil {
		return err
	}
	var out []drained
	failed := 0
	for _, sb := range list {
		if sb.Node != node {
			continue
		}
		d := drainOne(ctx, cl, sb)
		if d.Error != nil {
			failed++
		}
		out = append(out, d)
	}
	if c.json {
		if err := c.printJSON(map[string]any{"node": node, "sandboxes": append([]drained{}, out...)}); err != nil {
			return err
		}
	} else {
		printDrained(c, node, out)
	}
	if failed > 0 {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "%d of the %d sandboxes of node %s did not move", failed, len(out), node).
			WithHint("see each one's error; run hearth node drain %s again once they can move", node).With("failed", failed)
	}
	return nil
}

// drainOne moves sb off its node: a sleeping sandbox as it is; a running
// one checkpointed with its memory and left asleep at that instant, moved,
// and restored from the checkpoint there, its processes resuming where
// they stopped (the checkpoint is then deleted; it stays when the restore
// fails). Where its memory cannot
// be saved (a runtime that cannot, or a command running), a running
// sandbox is put to sleep, moved and woken, its processes starting
// afresh. One that cannot move is running again where it was.
func drainOne(ctx context.Context, cl *client.Client, sb sandbox.Sandbox) drained {
	ref := sandbox.Ref(sb.Tenant, sb.Name)
	d := drained{Sandbox: ref, Node: sb.Node, Status: sb.Status}
	if sb.Status != sandbox.StatusRunning {
		moved, err := cl.Move(ctx, ref, "")
		return d.result(moved, err)
	}
	ck, err := cl.Checkpoint(ctx, ref, sandbox.CheckpointRequest{Label: "drain of node " + sb.Node, Memory: true, Sleep: true})
	if cantSaveMemory(err) {
		return d.restarted(ctx, cl, ref)
	}
	if err != nil {
		return d.result(sandbox.Sandbox{}, err)
	}
	_, merr := cl.Move(ctx, ref, "")
	// Restored where it now is: on its new node, or, when it could not
	// move, back where it was.
	back, err := cl.Restore(ctx, ref, ck.ID)
	if err != nil {
		d.Processes = "held by checkpoint " + ck.ID
		return d.result(back, errors.Join(merr, err))
	}
	d.Processes = "restarted"
	if strings.HasSuffix(back.Reason, "with its processes") {
		d.Processes = "kept"
	}
	if err := cl.DeleteCheckpoint(ctx, ref, ck.ID); err != nil && merr == nil {
		merr = err
	}
	return d.result(back, merr)
}

// cantSaveMemory says err refused a memory checkpoint for a reason a
// drain goes around by restarting the processes: the runtime cannot save
// memory, or a command is running (its stream would be cut either way).
func cantSaveMemory(err error) bool {
	e := sandbox.AsError(err)
	if e == nil {
		return false
	}
	_, running := e.Details["running"]
	return e.Code == sandbox.CodeInvalidArgument || (e.Code == sandbox.CodeUnavailable && running)
}

// restarted moves running sandbox ref by putting it to sleep, moving it
// and waking it: its processes start afresh.
func (d drained) restarted(ctx context.Context, cl *client.Client, ref string) drained {
	if _, err := cl.Sleep(ctx, ref); err != nil {
		return d.result(sandbox.Sandbox{}, err)
	}
	moved, err := cl.Move(ctx, ref, "")
	// Woken where it now is, as drainOne's restore.
	if woke, werr := cl.Wake(ctx, ref); werr == nil {
		d.Processes = "restarted"
		if err == nil {
			moved = woke
		}
	}
	return d.result(moved, err)
}

// result is d once its sandbox is sb, or failed with err (d's node and
// status then stay as they were).
func (d drained) result(sb sandbox.Sandbox, err error) drained {
	if err != nil {
		d.Error = sandbox.AsError(err)
		return d
	}
	d.Node, d.Status = sb.Node, sb.Status
	return d
}

// printDrained prints what drain did, a line per sandbox.
func printDrained(c *cli, node string, out []drained) {
	if len(out) == 0 {
		fmt.Fprintf(c.stdout, "node %s cordoned; it runs no sandbox\n", node)
		return
	}
	fmt.Fprintf(c.stdout, "node %s cordoned\n", node)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tNODE\tSTATUS\tPROCESSES\tERROR")
	for _, d := range out {
		msg := ""
		if d.Error != nil {
			msg = string(d.Error.Code) + ": " + d.Error.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Sandbox, d.Node, d.Status, cmp.Or(d.Processes, "-"), msg)
	}
	tw.Flush()
}
