package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hearth/hearth/sandbox"
)

// registrySummary is what `hearth registry -h` says logins are for.
const registrySummary = `Manage your tenant's registry logins: the credentials the daemon uses to pull
from a registry (hearth image pull HOST/REPO:TAG). The password or token is read
from stdin, kept sealed by the daemon, and never shown again.`

func registryOps() []subOp {
	return []subOp{
		{"login", "HOST --username U --password-stdin [--ca-file F] [--insecure]", "store or replace the login for HOST (tenant admins)", runRegistryLogin},
		{"list", "", "list the logins: HOST USERNAME INSECURE CA UPDATED (never passwords)", runRegistryList},
		{"rm", "HOST", "remove the login for HOST (tenant admins)", runRegistryRemove},
	}
}

func runRegistry(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "registry", "...", registrySummary, registryOps(), args)
}

func runRegistryLogin(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("registry", registrySummary+"\n\nlogin: ", registryOps(), "login")
	var login sandbox.RegistryLogin
	fs.StringVar(&login.Username, "username", "", "the registry `USER` (none: an anonymous registry the tenant trusts)")
	stdin := fs.Bool("password-stdin", false, "read the password or token from stdin (required with --username: never on the command line)")
	caFile := fs.String("ca-file", "", "a PEM `FILE` of certificate authorities to trust for HOST, besides the system's")
	fs.BoolVar(&login.Insecure, "insecure", false, "allow plain HTTP or an unverified certificate for HOST")
	pos, err := fs.parseArgs(args, "registry login", "HOST")
	if err != nil {
		return err
	}
	switch {
	case login.Username == "" && *stdin:
		return &usageError{verb: "registry login", msg: "--password-stdin needs --username"}
	case login.Username != "" && !*stdin:
		return &usageError{verb: "registry login", msg: "missing --password-stdin: the password is read from stdin, e.g. echo \"$TOKEN\" | hearth registry login HOST --username U --password-stdin"}
	}
	if *caFile != "" {
		b, err := os.ReadFile(*caFile)
		if err != nil {
			return &usageError{verb: "registry login", msg: fmt.Sprintf("cannot read --ca-file: %v", err)}
		}
		login.CA = string(b)
	}
	// As for secrets: never from the command line, where the process list
	// and the shell's history would keep it.
	var password string
	if *stdin {
		b, err := io.ReadAll(io.LimitReader(c.stdin, sandbox.MaxSecretLen+2))
		if err != nil {
			return err
		}
		password = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	}
	login.Host = pos[0]
	login, err = c.client().Admin().RegistryLogin(ctx, login, password)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(login)
	}
	who := login.Username
	if who == "" {
		who = "anonymous"
	}
	fmt.Fprintf(c.stdout, "logged in to %s as %s for tenant %s\n", login.Host, who, login.Tenant)
	return nil
}

func runRegistryList(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("registry", "", registryOps(), "list")
	if _, err := fs.parseArgs(args, "registry list"); err != nil {
		return err
	}
	list, err := c.client().Admin().RegistryLogins(ctx)
	if err != nil {
		return err
	}
	return printList(c, "registries", list, "HOST\tUSERNAME\tINSECURE\tCA\tUPDATED", func(x sandbox.RegistryLogin) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", x.Host, x.Username, yesNo(x.Insecure), yesNo(x.CA != ""), formatTime(x.UpdatedAt))
	})
}

func runRegistryRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("registry", "", registryOps(), "rm")
	pos, err := fs.parseArgs(args, "registry rm", "HOST")
	if err != nil {
		return err
	}
	if err := c.client().Admin().RegistryLogout(ctx, pos[0]); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"deleted": pos[0]})
	}
	fmt.Fprintf(c.stdout, "registry login for %s removed\n", pos[0])
	return nil
}
