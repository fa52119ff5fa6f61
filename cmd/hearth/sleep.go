package main

import (
	"context"
	"fmt"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// runSleep puts a sandbox to sleep: its processes stop and free their
// memory, its disk stays.
func runSleep(ctx context.Context, c *cli, args []string) error {
	return runStatusVerb(ctx, c, args, "sleep",
		"Put a sandbox to sleep: stop its processes and free their memory, keeping its disk.\n"+
			"The next call to it, or 'hearth wake', starts it again.",
		(*client.Client).Sleep)
}

// runWake starts a sleeping or stopped sandbox again on its disk.
func runWake(ctx context.Context, c *cli, args []string) error {
	return runStatusVerb(ctx, c, args, "wake",
		"Start a sleeping or stopped sandbox again on its disk. Any call to a sandbox wakes\n"+
			"it too; wake does it ahead of time. A running sandbox is left as it is.",
		(*client.Client).Wake)
}

// runStatusVerb runs a verb that takes one sandbox name, changes its status
// through call, and prints the status it ends in (the sandbox with --json).
func runStatusVerb(ctx context.Context, c *cli, args []string, verb, summary string,
	call func(*client.Client, context.Context, string) (sandbox.Sandbox, error)) error {
	fs := c.clientFlagSet(verb, "NAME", summary)
	pos, err := fs.parseArgs(args, verb, "NAME")
	if err != nil {
		return err
	}
	sb, err := call(c.client(), ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(sb)
	}
	fmt.Fprintf(c.stdout, "%s is %s\n", sb.Name, sb.Status)
	return nil
}
