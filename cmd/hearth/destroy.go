package main

import (
	"context"
	"fmt"
)

// runDestroy destroys a sandbox: its processes, its disk, its checkpoints.
func runDestroy(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("destroy", "NAME", "Destroy a sandbox: stop its processes and delete its disk. There is no undo.")
	pos, err := fs.parseArgs(args, "destroy", "NAME")
	if err != nil {
		return err
	}
	cl := c.client()
	if err := cl.Destroy(ctx, pos[0]); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]string{"destroyed": pos[0]})
	}
	fmt.Fprintf(c.stdout, "destroyed %s\n", pos[0])
	return nil
}
