package main

import (
	"context"
	"fmt"
	"time"
)

// runFork creates a new sandbox from a checkpoint of another.
func runFork(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("fork", "NAME CHECKPOINT NEWNAME",
		"Create the sandbox NEWNAME whose disk starts as CHECKPOINT of sandbox NAME, with\n"+
			"the same image and size; the two are independent from then on. A checkpoint\n"+
			"taken with --memory brings its processes too, resumed as they were (not from a\n"+
			"sandbox with a network; the reason says when they started afresh).")
	pos, err := fs.parseArgs(args, "fork", "NAME", "CHECKPOINT", "NEWNAME")
	if err != nil {
		return err
	}
	cl := c.client()
	sb, err := cl.Fork(ctx, pos[0], pos[1], pos[2])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(sb)
	}
	fmt.Fprintf(c.stdout, "forked %s at checkpoint %s into %s\n", pos[0], pos[1], sb.Name)
	return printSandbox(c.stdout, sb, time.Now())
}
