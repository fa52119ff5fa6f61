package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// runCreate creates a sandbox, or resumes the one of that name: create is
// idempotent by name, and says which happened.
func runCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("create", "[NAME] [--image I] [--size S] [--ttl D] [--network none|egress] [--label L]...",
		"Create a sandbox, or resume the existing one with that name. Without a NAME\nthe daemon picks one. The daemon may prefix the name with its creator.")
	var req sandbox.CreateRequest
	fs.StringVar(&req.Image, "image", "", "root filesystem `IMAGE`: an image's name, or a registry reference pulled first if need be (default: the daemon's)")
	fs.StringVar(&req.Size, "size", "", "`SIZE` preset: small, medium or large (default: the daemon's)")
	ttl := fs.Duration("ttl", 0, "destroy the sandbox after `D`, e.g. 2h (default: the daemon's)")
	fs.StringVar(&req.Network, "network", "", "network `MODE`: none (loopback only) or egress (outbound, never to private networks; default: the tenant's)")
	var labels listFlag
	fs.Var(&labels, "label", "tag the sandbox with `L` (repeatable)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return &usageError{verb: "create", msg: fmt.Sprintf("unexpected argument %q", pos[1])}
	}
	if len(pos) == 1 {
		req.Name = pos[0]
	}
	if *ttl < 0 {
		return &usageError{verb: "create", msg: "--ttl must not be negative"}
	}
	req.TTL, req.Labels = sandbox.Duration(*ttl), labels

	cl := c.client()
	if req.Image, err = c.pullMissing(ctx, cl, req.Image); err != nil {
		return err
	}
	sb, created, err := cl.Create(ctx, req)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(sb)
	}
	if created {
		fmt.Fprintf(c.stdout, "created sandbox %s\n", sb.Name)
	} else {
		fmt.Fprintf(c.stdout, "resumed existing sandbox %s\n", sb.Name)
	}
	return printSandbox(c.stdout, sb, time.Now())
}

// pullMissing returns the name to create a sandbox from image: image
// itself, unless it reads as a registry reference (HOST[:PORT]/REPO…)
// that names none of the caller's images yet; that one is pulled first,
// its progress on stderr whatever the output, and its stored name is the
// answer.
func (c *cli) pullMissing(ctx context.Context, cl *client.Client, image string) (string, error) {
	if !sandbox.IsReference(image) {
		return image, nil
	}
	_, err := cl.Images().Get(ctx, image)
	if !sandbox.IsCode(err, sandbox.CodeNotFound) {
		return image, err
	}
	fmt.Fprintf(c.stderr, "image %s is not here yet: pulling it\n", image)
	pp := &progressPrinter{w: c.stderr, tty: isTerminal(c.stderr)}
	img, err := cl.Images().Pull(ctx, image, client.PullOptions{Progress: pp.event})
	pp.end()
	return img.Name, err
}
