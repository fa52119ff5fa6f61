package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

const topSummary = `Show what your sandboxes use: CPU (100% is one core busy), memory now and
at its peak against the limit, disk against its cap, network bytes in and
out, and processes. On a terminal the table refreshes every --interval until
Ctrl-C; elsewhere, and with --json (the sandboxes' usage objects, as
GET /v1/sandboxes/NAME/usage answers), it is printed once.`

// runTop shows the caller's sandboxes' usage.
func runTop(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("top", "[--sort cpu|memory] [--interval D]", topSummary)
	sortBy := fs.String("sort", "cpu", "order by `cpu` or `memory`, the largest first")
	interval := fs.Duration("interval", 2*time.Second, "refresh every `D` on a terminal")
	if _, err := fs.parseArgs(args, "top"); err != nil {
		return err
	}
	if *sortBy != "cpu" && *sortBy != "memory" {
		return &usageError{verb: "top", msg: "--sort takes cpu or memory"}
	}
	if *interval < 100*time.Millisecond {
		return &usageError{verb: "top", msg: "--interval must be at least 100ms"}
	}
	cl := c.client()
	live := !c.json && isTerminal(c.stdout)
	for {
		usages, err := usageOfAll(ctx, cl)
		if err != nil {
			return err
		}
		sortUsage(usages, *sortBy)
		if c.json {
			return c.printJSON(map[string]any{"sandboxes": usages})
		}
		if live {
			io.WriteString(c.stdout, "\x1b[H\x1b[2J") // home, clear
		}
		printTop(c.stdout, usages)
		if !live {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
}

// usageOfAll is the usage of every sandbox the caller sees, a few asked
// at a time; one that went meanwhile is left out.
func usageOfAll(ctx context.Context, cl *client.Client) ([]sandbox.Usage, error) {
	list, err := cl.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Usage, len(list))
	errs := make([]error, len(list))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, sb := range list {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = cl.Usage(ctx, sandbox.Ref(sb.Tenant, sb.Name), time.Time{})
			out[i].Sandbox = sandbox.Ref(sb.Tenant, sb.Name)
		})
	}
	wg.Wait()
	var kept []sandbox.Usage
	for i, err := range errs {
		switch {
		case err == nil:
			kept = append(kept, out[i])
		case sandbox.IsCode(err, sandbox.CodeNotFound):
		default:
			return nil, err
		}
	}
	return kept, nil
}

// sortUsage orders usages by by (cpu or memory), the largest first, then
// by name.
func sortUsage(usages []sandbox.Usage, by string) {
	slices.SortStableFunc(usages, func(a, b sandbox.Usage) int {
		var c int
		if by == "memory" {
			c = cmp.Compare(b.MemoryBytes, a.MemoryBytes)
		} else {
			c = cmp.Compare(b.CPUCores, a.CPUCores)
		}
		return cmp.Or(c, cmp.Compare(a.Sandbox, b.Sandbox))
	})
}

// printTop prints usages as a table.
func printTop(w io.Writer, usages []sandbox.Usage) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tSTATUS\tCPU\tMEMORY\tPEAK\tDISK\tNET IN\tNET OUT\tPROCS")
	for _, u := range usages {
		procs := "-"
		if u.Processes >= 0 && u.Status == sandbox.StatusRunning {
			procs = fmt.Sprint(u.Processes)
		}
		disk := formatBytes(u.DiskBytes)
		if u.LimitDiskBytes > 0 {
			disk += " / " + formatBytes(u.LimitDiskBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f%%\t%s / %s\t%s\t%s\t%s\t%s\t%s\n", u.Sandbox, u.Status, u.CPUCores*100,
			formatBytes(u.MemoryBytes), formatBytes(u.LimitMemoryBytes), formatBytes(u.MemoryPeakBytes), disk,
			formatBytes(int64(u.NetRxBytes)), formatBytes(int64(u.NetTxBytes)), procs)
	}
	tw.Flush()
}
