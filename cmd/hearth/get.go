package main

import (
	"context"
	"time"
)

// runGet shows one sandbox.
func runGet(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("get", "NAME", "Show one sandbox: status, runtime, capabilities, resources and expiry.")
	pos, err := fs.parseArgs(args, "get", "NAME")
	if err != nil {
		return err
	}
	cl := c.client()
	sb, err := cl.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(sb)
	}
	return printSandbox(c.stdout, sb, time.Now())
}
