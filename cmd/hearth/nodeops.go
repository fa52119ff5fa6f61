package main

import (
	"context"
	"fmt"
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
	Error   *sandbox.Error `json:"error,omitempty"`
}

// runNodeDrain cordons a node, then moves each of its sandboxes to a node
// the sandbox's node chooses: a sleeping one as it is, a running one put
// to sleep, moved and woken there (its processes start afresh). A
// sandbox that cannot move stays where it is, and drain says why.
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
		d := drained{Sandbox: sandbox.Ref(sb.Tenant, sb.Name)}
		moved, err := drainOne(ctx, cl, d.Sandbox, sb.Status)
		if err != nil {
			d.Error, d.Node, d.Status = sandbox.AsError(err), sb.Node, sb.Status
			failed++
		} else {
			d.Node, d.Status = moved.Node, moved.Status
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

// drainOne moves the sandbox ref, whose status is status, off its node.
func drainOne(ctx context.Context, cl *client.Client, ref string, status sandbox.Status) (sandbox.Sandbox, error) {
	running := status == sandbox.StatusRunning
	if running {
		if _, err := cl.Sleep(ctx, ref); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	moved, err := cl.Move(ctx, ref, "")
	if running {
		// Woken where it now is: on its new node, or, when it could not
		// move, back where it was.
		if woke, werr := cl.Wake(ctx, ref); werr == nil && err == nil {
			moved = woke
		}
	}
	return moved, err
}

// printDrained prints what drain did, a line per sandbox.
func printDrained(c *cli, node string, out []drained) {
	if len(out) == 0 {
		fmt.Fprintf(c.stdout, "node %s cordoned; it runs no sandbox\n", node)
		return
	}
	fmt.Fprintf(c.stdout, "node %s cordoned\n", node)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tNODE\tSTATUS\tERROR")
	for _, d := range out {
		msg := ""
		if d.Error != nil {
			msg = string(d.Error.Code) + ": " + d.Error.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Sandbox, d.Node, d.Status, msg)
	}
	tw.Flush()
}
