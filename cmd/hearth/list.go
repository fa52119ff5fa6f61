package main

import (
	"context"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// runList lists the sandboxes the caller can see: its own, its tenant's
// for a tenant admin, every one for an operator.
func runList(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("list", "", "List the sandboxes you can see, as a table NAME STATUS SIZE RUNTIME AGE OWNER TENANT.\n"+
		"Names are unique within a tenant; an operator reaches another tenant's sandbox as TENANT/NAME.")
	_, err := fs.parseArgs(args, "list")
	if err != nil {
		return err
	}
	cl := c.client()
	sbs, err := cl.List(ctx)
	if err != nil {
		return err
	}
	if sbs == nil {
		sbs = []sandbox.Sandbox{} // "sandboxes": [] rather than null
	}
	if c.json {
		return c.printJSON(map[string]any{"sandboxes": sbs})
	}
	return printSandboxTable(c.stdout, sbs, time.Now())
}
