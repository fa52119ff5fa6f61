package main

import (
	"context"

	"github.com/hearth/hearth/sandbox"
)

// runCheckpoints lists the checkpoints of a sandbox, marking its head: the
// checkpoint its disk last descended from.
func runCheckpoints(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("checkpoints", "NAME",
		"List the checkpoints of a sandbox, oldest first, as a table ID LABEL PARENT CREATED SIZE.\n"+
			"A * marks the head, the checkpoint the sandbox's disk last descended from.")
	pos, err := fs.parseArgs(args, "checkpoints", "NAME")
	if err != nil {
		return err
	}
	cl := c.client()
	cps, err := cl.ListCheckpoints(ctx, pos[0])
	if err != nil {
		return err
	}
	if cps == nil {
		cps = []sandbox.Checkpoint{} // "checkpoints": [] rather than null
	}
	if c.json {
		return c.printJSON(map[string]any{"checkpoints": cps})
	}
	// The head is the sandbox's, read after the list: a checkpoint taken
	// in between is then the head but missing from the table, and nothing
	// is marked, rather than the wrong one.
	sb, err := cl.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	return printCheckpointTable(c.stdout, cps, sb.Head)
}
