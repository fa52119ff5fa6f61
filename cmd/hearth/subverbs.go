package main

import (
	"context"
	"fmt"
)

// subOp is one operation of a verb that has several (fs, tenant, agent,
// token): `hearth <verb> <op> ...`.
type subOp struct {
	name, args, summary string
	run                 func(ctx context.Context, c *cli, args []string) error
}

// runSub dispatches `hearth <verb> <op>` to the op named by args[0], or
// prints the verb's usage (to stdout for -h, to stderr with a usage error
// when the op is missing).
func (c *cli) runSub(ctx context.Context, verb, args, summary string, ops []subOp, argv []string) error {
	if len(argv) == 0 || argv[0] == "-h" || argv[0] == "-help" || argv[0] == "--help" {
		w := c.stdout
		if len(argv) == 0 {
			w = c.stderr
		}
		fmt.Fprintf(w, "Usage: hearth %s <op> %s [--json]\n\n%s\n\nOps:\n", verb, args, summary)
		for _, op := range ops {
			fmt.Fprintf(w, "  %-7s %-40s %s\n", op.name, op.args, op.summary)
		}
		fmt.Fprintf(w, "\nRun 'hearth %s <op> -h' for an op's flags.\n", verb)
		if len(argv) == 0 {
			return &usageError{verb: verb, msg: "missing " + verb + " op"}
		}
		return nil
	}
	for _, op := range ops {
		if op.name == argv[0] {
			return op.run(ctx, c, argv[1:])
		}
	}
	return &usageError{verb: verb, msg: fmt.Sprintf("unknown %s op %q", verb, argv[0])}
}

// subFlagSet starts the flags of op, one of verb's ops, whose summary is
// shown after prefix.
func (c *cli) subFlagSet(verb, prefix string, ops []subOp, op string) *flagSet {
	for _, o := range ops {
		if o.name == op {
			return c.clientFlagSet(verb+" "+op, o.args, prefix+o.summary+".")
		}
	}
	panic("hearth: unknown " + verb + " op " + op) // a bug in the caller, not an input
}
