package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/hearth/hearth/sandbox"
)

// runEgress shows or changes a sandbox's own egress policy; a running
// sandbox gets a change at once.
func runEgress(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("egress", "NAME [--allow DEST]... [--deny DEST]... [--clear]",
		"Show or change where an egress sandbox may connect, on top of its tenant's policy: never to\n"+
			"a --deny destination, and, with --allow, only to those. A destination is an IPv4 network or\n"+
			"address (203.0.113.0/24, 203.0.113.7) or a domain name (api.example.com; *.example.com for\n"+
			"every name below it). A denied name does not resolve in the sandbox, and the addresses it\n"+
			"resolved to before are refused; with names in --allow, no other name resolves and connections\n"+
			"go only to what the allowed names resolved to (and to allowed networks).\n"+
			"The new lists replace the old; a running sandbox gets them at once.")
	var allow, deny listFlag
	fs.Var(&allow, "allow", "let the sandbox reach only `DEST` (repeatable)")
	fs.Var(&deny, "deny", "keep the sandbox from `DEST` (repeatable)")
	clear := fs.Bool("clear", false, "drop the sandbox's own lists (its tenant's policy stays)")
	pos, err := fs.parseArgs(args, "egress", "NAME")
	if err != nil {
		return err
	}
	cl := c.client()
	var sb sandbox.Sandbox
	switch {
	case *clear && (len(allow) > 0 || len(deny) > 0):
		return &usageError{verb: "egress", msg: "--clear takes no --allow or --deny"}
	case *clear || len(allow) > 0 || len(deny) > 0:
		sb, err = cl.Update(ctx, pos[0], sandbox.SandboxUpdate{Egress: &sandbox.EgressPolicy{Allow: allow, Deny: deny}})
	default:
		sb, err = cl.Get(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(sb.Egress)
	}
	fmt.Fprintf(c.stdout, "network: %s\nallow:   %s\ndeny:    %s\n", sb.Network, listOrAny(sb.Egress.Allow), listOrNone(sb.Egress.Deny))
	return nil
}

func listOrAny(l []string) string {
	if len(l) == 0 {
		return "anywhere not blocked (and the tenant's list, if it has one)"
	}
	return strings.Join(l, ", ")
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ", ")
}
