package main

import (
	"context"
	"fmt"
)

// runMove moves a sleeping sandbox to another node of the store.
func runMove(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("move", "NAME NODE",
		"Move a sleeping sandbox to NODE, another daemon of the store (operators only):\n"+
			"its disk goes there as what it holds beyond its image, and it wakes there on\n"+
			"its next call. A sandbox with checkpoints does not move yet.")
	pos, err := fs.parseArgs(args, "move", "NAME", "NODE")
	if err != nil {
		return err
	}
	sb, err := c.client().Move(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(sb)
	}
	fmt.Fprintf(c.stdout, "%s is %s on node %s\n", sb.Name, sb.Status, sb.Node)
	return nil
}
