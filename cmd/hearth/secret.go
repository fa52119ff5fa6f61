package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/hearth/hearth/sandbox"
)

// listFlag collects the values of a repeated flag (--secret, --label).
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

func secretOps() []subOp {
	return []subOp{
		{"set", "NAME [--tenant T] < VALUE", "store a secret, its value read from stdin (tenant admins)", runSecretSet},
		{"list", "[--tenant T]", "list the secrets you can use: NAME CREATED UPDATED (never values)", runSecretList},
		{"rm", "NAME [--tenant T]", "delete a secret (tenant admins)", runSecretRemove},
	}
}

func runSecret(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "secret", "...", "Manage a tenant's secrets. `hearth exec --secret NAME` gives one to a single command,\nin $NAME, and scrubs it from the output; it is never written to the sandbox's disk.", secretOps(), args)
}

func runSecretSet(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("secret", "", secretOps(), "set")
	tenant := fs.String("tenant", "", "the secret's tenant (default: yours)")
	pos, err := fs.parseArgs(args, "secret set", "NAME")
	if err != nil {
		return err
	}
	// The value comes from stdin, never from the command line, where it
	// would be seen in the process list and the shell's history.
	b, err := io.ReadAll(io.LimitReader(c.stdin, sandbox.MaxSecretLen+2))
	if err != nil {
		return err
	}
	value := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	info, err := c.client().Admin().SetSecret(ctx, *tenant, pos[0], value)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(info)
	}
	fmt.Fprintf(c.stdout, "secret %s set in tenant %s\n", info.Name, info.Tenant)
	return nil
}

func runSecretList(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("secret", "", secretOps(), "list")
	tenant := fs.String("tenant", "", "the tenant (default: yours)")
	if _, err := fs.parseArgs(args, "secret list"); err != nil {
		return err
	}
	list, err := c.client().Admin().ListSecrets(ctx, *tenant)
	if err != nil {
		return err
	}
	return printList(c, "secrets", list, "NAME\tCREATED\tUPDATED", func(x sandbox.SecretInfo) string {
		return fmt.Sprintf("%s\t%s\t%s", x.Name, formatTime(x.CreatedAt), formatTime(x.UpdatedAt))
	})
}

func runSecretRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("secret", "", secretOps(), "rm")
	tenant := fs.String("tenant", "", "the secret's tenant (default: yours)")
	pos, err := fs.parseArgs(args, "secret rm", "NAME")
	if err != nil {
		return err
	}
	if err := c.client().Admin().DeleteSecret(ctx, *tenant, pos[0]); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"deleted": pos[0]})
	}
	fmt.Fprintf(c.stdout, "secret %s deleted\n", pos[0])
	return nil
}
