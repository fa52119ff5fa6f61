package main

import (
	"context"
	"fmt"
)

// runRestore puts a sandbox's disk back to one of its checkpoints.
func runRestore(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("restore", "NAME CHECKPOINT",
		"Put a sandbox's disk back to CHECKPOINT: its processes are stopped, its disk\n"+
			"replaced, and it runs again. The checkpoint stays, so restore can be repeated.")
	pos, err := fs.parseArgs(args, "restore", "NAME", "CHECKPOINT")
	if err != nil {
		return err
	}
	cl := c.client()
	sb, err := cl.Restore(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(sb)
	}
	fmt.Fprintf(c.stdout, "restored %s to checkpoint %s\n", sb.Name, pos[1])
	return nil
}
