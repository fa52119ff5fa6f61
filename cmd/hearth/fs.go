package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/hearth/hearth/sandbox"
)

func fsOps() []subOp {
	return []subOp{
		{"read", "NAME PATH", "write the file's content to stdout", runFSRead},
		{"write", "NAME PATH [--mode 0644] [--parents]", "write stdin to the file", runFSWrite},
		{"ls", "NAME PATH", "list a directory: MODE OWNER SIZE MTIME NAME", runFSList},
		{"stat", "NAME PATH", "show one file's metadata", runFSStat},
		{"mkdir", "NAME PATH", "create a directory and any missing parents", runFSMkdir},
		{"rm", "NAME PATH [-r]", "remove a file, or with -r a directory tree", runFSRemove},
		{"mv", "NAME FROM TO", "rename or move a file", runFSMove},
		{"chmod", "NAME MODE PATH", "change a file's permission bits (octal MODE, e.g. 0755)", runFSChmod},
	}
}

// runFS dispatches `hearth fs <op>`. Paths are inside the sandbox; relative
// ones are relative to the sandbox user's home.
func runFS(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "fs", "NAME ...", "Read, write and manage files in a sandbox, as the sandbox user.", fsOps(), args)
}

// fsFlagSet starts the flags of one fs op.
func (c *cli) fsFlagSet(op string) *flagSet {
	return c.subFlagSet("fs", "Inside a sandbox: ", fsOps(), op)
}

func runFSRead(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("read")
	pos, err := fs.parseArgs(args, "fs read", "NAME", "PATH")
	if err != nil {
		return err
	}
	cl := c.client()
	if !c.json {
		return cl.ReadFile(ctx, pos[0], pos[1], c.stdout)
	}
	var buf bytes.Buffer
	if err := cl.ReadFile(ctx, pos[0], pos[1], &buf); err != nil {
		return err
	}
	out := map[string]any{"path": pos[1]}
	textOrBase64(out, "content", buf.Bytes())
	return c.printJSON(out)
}

func runFSWrite(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("write")
	mode := fs.String("mode", "", "permission bits in octal `MODE`, e.g. 0755 (default: 0644 for a new file; an existing file keeps its mode)")
	parents := fs.Bool("parents", false, "create missing parent directories")
	pos, err := fs.parseArgs(args, "fs write", "NAME", "PATH")
	if err != nil {
		return err
	}
	req := sandbox.WriteRequest{Path: pos[1], Parents: *parents}
	if *mode != "" {
		m, err := sandbox.ParseMode(*mode)
		if err != nil {
			return &usageError{verb: "fs write", msg: err.Error()}
		}
		req.Mode, req.SetMode = m, true
	}
	cl := c.client()
	fi, err := cl.WriteFile(ctx, pos[0], req, c.stdin)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(fi)
	}
	fmt.Fprintf(c.stdout, "wrote %s (%d bytes, %s)\n", fi.Path, fi.Size, sandbox.FormatMode(fi.Mode))
	return nil
}

func runFSList(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("ls")
	pos, err := fs.parseArgs(args, "fs ls", "NAME", "PATH")
	if err != nil {
		return err
	}
	cl := c.client()
	entries, err := cl.ListDir(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []sandbox.FileInfo{}
	}
	if c.json {
		return c.printJSON(map[string]any{"entries": entries})
	}
	return printFileTable(c.stdout, entries)
}

func runFSStat(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("stat")
	pos, err := fs.parseArgs(args, "fs stat", "NAME", "PATH")
	if err != nil {
		return err
	}
	cl := c.client()
	fi, err := cl.Stat(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(fi)
	}
	return printFileInfo(c.stdout, fi)
}

func runFSMkdir(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("mkdir")
	pos, err := fs.parseArgs(args, "fs mkdir", "NAME", "PATH")
	if err != nil {
		return err
	}
	cl := c.client()
	fi, err := cl.Mkdir(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(fi)
	}
	fmt.Fprintf(c.stdout, "created %s\n", fi.Path)
	return nil
}

func runFSRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("rm")
	recursive := fs.Bool("r", false, "remove a directory and everything in it")
	pos, err := fs.parseArgs(args, "fs rm", "NAME", "PATH")
	if err != nil {
		return err
	}
	cl := c.client()
	if err := cl.Remove(ctx, pos[0], pos[1], *recursive); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]string{"removed": pos[1]})
	}
	fmt.Fprintf(c.stdout, "removed %s\n", pos[1])
	return nil
}

func runFSMove(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("mv")
	pos, err := fs.parseArgs(args, "fs mv", "NAME", "FROM", "TO")
	if err != nil {
		return err
	}
	cl := c.client()
	fi, err := cl.Rename(ctx, pos[0], pos[1], pos[2])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(fi)
	}
	fmt.Fprintf(c.stdout, "moved %s -> %s\n", pos[1], fi.Path)
	return nil
}

func runFSChmod(ctx context.Context, c *cli, args []string) error {
	fs := c.fsFlagSet("chmod")
	pos, err := fs.parseArgs(args, "fs chmod", "NAME", "MODE", "PATH")
	if err != nil {
		return err
	}
	mode, err := sandbox.ParseMode(pos[1])
	if err != nil {
		return &usageError{verb: "fs chmod", msg: err.Error()}
	}
	cl := c.client()
	fi, err := cl.Chmod(ctx, pos[0], pos[2], mode)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(fi)
	}
	fmt.Fprintf(c.stdout, "%s %s\n", formatMode(fi.Type, fi.Mode), fi.Path)
	return nil
}
