package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// runGone lists why the caller's sandboxes went.
func runGone(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("gone", "", "List why the sandboxes you could see went (destroyed, reaped when their TTL ended, a create undone), the newest first, with the status they had before; the daemon keeps each record for 7 days.")
	if _, err := fs.parseArgs(args, "gone"); err != nil {
		return err
	}
	gone, err := c.client().Gone(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"gone": append([]sandbox.Gone{}, gone...)})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tOWNER\tGONE\tWHY\tSTATUS BEFORE")
	for _, g := range gone {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sandbox.Ref(g.Tenant, g.Name), g.Owner, g.At.Local().Format(time.DateTime), g.Reason, g.Last)
	}
	return tw.Flush()
}
