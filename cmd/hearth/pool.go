package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/hearth/hearth/sandbox"
)

// runPool shows the warm pool: per size, the members it keeps and has.
func runPool(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("pool", "",
		"Show the warm pool (operators only), as a table SIZE IMAGE READY STARTING TARGET:\n"+
			"sandboxes started ahead of time, so that a create of that size is a claim.")
	_, err := fs.parseArgs(args, "pool")
	if err != nil {
		return err
	}
	sizes, err := c.client().Pool(ctx)
	if err != nil {
		return err
	}
	if sizes == nil {
		sizes = []sandbox.PoolSize{} // "sizes": [] rather than null
	}
	if c.json {
		return c.printJSON(map[string]any{"sizes": sizes})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "SIZE\tIMAGE\tREADY\tSTARTING\tTARGET")
	for _, ps := range sizes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", ps.Size, ps.Image, ps.Ready, ps.Starting, ps.Target)
	}
	return tw.Flush()
}
