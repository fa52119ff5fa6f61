package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/hearth/hearth/sandbox"
)

// runURL prints the URL of a sandbox's port, or of every port a process in
// it listens on, and makes a port public or private.
func runURL(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("url", "NAME [PORT] [--public | --private]",
		"Print the URL of a sandbox's port: HTTP and WebSockets to it reach that port inside the\n"+
			"sandbox, waking it if it sleeps. Without PORT, list the ports processes listen on.\n"+
			"A port is private (a token of someone who may see the sandbox) unless made --public.")
	public := fs.Bool("public", false, "make PORT's URL answer anyone, without a token")
	private := fs.Bool("private", false, "make PORT's URL need a token again")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return &usageError{verb: "url", msg: "want NAME and at most one PORT"}
	}
	name, ports := pos[0], []int{}
	if len(pos) == 2 {
		port, err := strconv.Atoi(pos[1])
		if err != nil || sandbox.ValidatePort(port) != nil {
			return &usageError{verb: "url", msg: fmt.Sprintf("PORT %q is not a TCP port (1-65535)", pos[1])}
		}
		ports = append(ports, port)
	}
	if (*public || *private) && len(ports) == 0 || *public && *private {
		return &usageError{verb: "url", msg: "--public and --private take one PORT, and not both"}
	}
	cl := c.client()
	if *public || *private {
		sb, err := cl.Get(ctx, name)
		if err != nil {
			return err
		}
		open := slices.DeleteFunc(slices.Clone(sb.PublicPorts), func(p int) bool { return p == ports[0] })
		if *public {
			open = append(open, ports[0])
		}
		if _, err := cl.Update(ctx, name, sandbox.SandboxUpdate{PublicPorts: &open}); err != nil {
			return err
		}
	}
	infos, err := cl.Ports(ctx, name, ports...)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"ports": infos})
	}
	if len(ports) == 1 {
		for _, pi := range infos {
			if pi.Port == ports[0] {
				fmt.Fprintln(c.stdout, pi.URL)
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "PORT\tADDRESS\tACCESS\tURL")
	for _, pi := range infos {
		access := "private"
		if pi.Public {
			access = "public"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", pi.Port, dash(pi.Address), access, pi.URL)
	}
	return tw.Flush()
}
