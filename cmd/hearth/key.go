package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/secrets"
)

// The key verb: the sealing key of a deployment whose daemons share a
// store, each given the same file with hearth serve --key-file.

func keyOps() []subOp {
	return []subOp{
		{"create", "FILE [--force]", "write a new sealing key to FILE, mode 0600, for hearth serve --key-file", runKeyCreate},
	}
}

func runKey(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "key", "...", "Manage the sealing key of daemons that share a store. It seals tenants' secrets and the keys of\nmemory checkpoints; every daemon of one store needs a copy of the same key file (hearth serve --key-file).", keyOps(), args)
}

// runKeyCreate writes a new key to FILE (see secrets.CreateKey): it
// refuses an existing FILE unless --force, since replacing a key loses
// what the old one sealed. It works on the local disk alone, not through
// the daemon.
func runKeyCreate(ctx context.Context, c *cli, args []string) error {
	fl := c.flagSet("key create", keyOps()[0].args, "Write a new random sealing key to FILE (mode 0600, atomically). Give every daemon\nof one store a copy: hearth serve --key-file FILE.")
	force := fl.Bool("force", false, "replace FILE if it exists: what the old key sealed no longer opens")
	pos, err := fl.parseArgs(args, "key create", "FILE")
	if err != nil {
		return err
	}
	path := pos[0]
	if err := secrets.CreateKey(path, *force); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return sandbox.Errorf(sandbox.CodeAlreadyExists, "key file %s exists", path).
				WithHint("keep it, or give --force to replace it (what the old key sealed no longer opens)")
		}
		return err
	}
	if c.json {
		return c.printJSON(map[string]string{"key_file": path})
	}
	fmt.Fprintf(c.stdout, "key file %s: a new sealing key (mode 0600); give every daemon of the store a copy: hearth serve --key-file %s\n", path, path)
	return nil
}
