package main

import (
	"context"
	"fmt"

	"github.com/hearth/hearth/sandbox"
)

// runCheckpoint takes a checkpoint of a sandbox, live, or with --delete
// deletes one.
func runCheckpoint(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("checkpoint", "NAME [--label LABEL] [--memory] | NAME --delete ID",
		"Save the current content of a sandbox's disk as a checkpoint, without stopping it;\n"+
			"'hearth restore' goes back to it and 'hearth fork' starts a new sandbox from it.\n"+
			"With --delete, delete checkpoint ID instead.")
	label := fs.String("label", "", "a `LABEL` to recognize the checkpoint by, e.g. \"before migration\"")
	del := fs.String("delete", "", "delete checkpoint `ID` instead of taking one")
	memory := fs.Bool("memory", false, "save the processes' memory too (gVisor): a restore resumes them where they were")
	sleep := fs.Bool("sleep", false, "leave the sandbox asleep at the checkpoint (with --memory its processes stop where the checkpoint holds them)")
	pos, err := fs.parseArgs(args, "checkpoint", "NAME")
	if err != nil {
		return err
	}
	if *del != "" && (*label != "" || *memory || *sleep) {
		return &usageError{verb: "checkpoint", msg: "--label, --memory and --sleep do not go with --delete"}
	}
	cl := c.client()
	if *del != "" {
		if err := cl.DeleteCheckpoint(ctx, pos[0], *del); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(map[string]string{"deleted": *del})
		}
		fmt.Fprintf(c.stdout, "deleted checkpoint %s of %s\n", *del, pos[0])
		return nil
	}
	cp, err := cl.Checkpoint(ctx, pos[0], sandbox.CheckpointRequest{Label: *label, Memory: *memory, Sleep: *sleep})
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(cp)
	}
	fmt.Fprintf(c.stdout, "took checkpoint %s of %s\n", cp.ID, cp.Sandbox)
	return printCheckpoint(c.stdout, cp)
}
