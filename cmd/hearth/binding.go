package main

import (
	"context"
	"fmt"

	"github.com/hearth/hearth/sandbox"
)

// bindingSummary is what `hearth binding -h` says bindings are for.
const bindingSummary = `Bind one of a tenant's secrets to an upstream HTTP(S) API. A sandbox of the tenant
in network mode egress (hearth create --network egress) then calls the upstream at
http://NAME.hearth.internal/PATH: plain HTTP to the daemon's egress gateway on the
sandbox's own link, which speaks HTTP(S) to UPSTREAM/PATH and adds the header
(default "Authorization: Bearer {secret}") with the secret's value on the way out.
The sandbox never sees the value. The secret must exist (hearth secret set).`

func bindingOps() []subOp {
	return []subOp{
		{"set", "NAME --secret S --upstream URL [--header H] [--format F] [--tenant T]", "create or replace a binding (tenant admins)", runBindingSet},
		{"list", "[--tenant T]", "list the bindings: NAME SECRET UPSTREAM HEADER and the URL IN SANDBOX", runBindingList},
		{"rm", "NAME [--tenant T]", "delete a binding; its secret stays (tenant admins)", runBindingRemove},
	}
}

func runBinding(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "binding", "...", bindingSummary, bindingOps(), args)
}

func runBindingSet(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("binding", bindingSummary+"\n\nset: ", bindingOps(), "set")
	tenant := fs.String("tenant", "", "the binding's tenant (default: yours)")
	var b sandbox.Binding
	fs.StringVar(&b.Secret, "secret", "", "the tenant's secret `NAME` whose value the gateway sends (required)")
	fs.StringVar(&b.Upstream, "upstream", "", "the http or https `URL` requests go to, with an optional path prefix (required)")
	fs.StringVar(&b.Header, "header", "", "the header `FIELD` the gateway sets (default "+sandbox.DefaultBindingHeader+")")
	fs.StringVar(&b.Format, "format", "", "the header's `VALUE`, with "+sandbox.SecretPlaceholder+" where the secret goes (default \""+sandbox.DefaultBindingFormat+"\")")
	pos, err := fs.parseArgs(args, "binding set", "NAME")
	if err != nil {
		return err
	}
	switch {
	case b.Secret == "":
		return &usageError{verb: "binding set", msg: "missing --secret"}
	case b.Upstream == "":
		return &usageError{verb: "binding set", msg: "missing --upstream"}
	}
	b.Name = pos[0]
	b, err = c.client().Admin().SetBinding(ctx, *tenant, b)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(b)
	}
	fmt.Fprintf(c.stdout, "binding %s set in tenant %s: http://%s/ goes to %s with %s: %s\n", b.Name, b.Tenant, sandbox.BindingHost(b.Name), b.Upstream, b.Header, b.Format)
	return nil
}

func runBindingList(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("binding", "", bindingOps(), "list")
	tenant := fs.String("tenant", "", "the tenant (default: yours)")
	if _, err := fs.parseArgs(args, "binding list"); err != nil {
		return err
	}
	list, err := c.client().Admin().ListBindings(ctx, *tenant)
	if err != nil {
		return err
	}
	return printList(c, "bindings", list, "NAME\tSECRET\tUPSTREAM\tHEADER\tURL IN SANDBOX", func(x sandbox.Binding) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\thttp://%s", x.Name, x.Secret, x.Upstream, x.Header, sandbox.BindingHost(x.Name))
	})
}

func runBindingRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("binding", "", bindingOps(), "rm")
	tenant := fs.String("tenant", "", "the binding's tenant (default: yours)")
	pos, err := fs.parseArgs(args, "binding rm", "NAME")
	if err != nil {
		return err
	}
	if err := c.client().Admin().DeleteBinding(ctx, *tenant, pos[0]); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"deleted": pos[0]})
	}
	fmt.Fprintf(c.stdout, "binding %s deleted\n", pos[0])
	return nil
}
