package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// The image ops that store an image and report progress as they go:
// pull, import, build. With --json their stdout is the daemon's progress
// stream as it came (docs/API.md, "Progress streams"): one JSON object a
// line, each event, then {"image": {...}}; otherwise progress goes to
// stderr (one line a step, or, on a terminal, a line redrawn as bytes
// arrive) and the image to stdout as `hearth image inspect` shows it.

func runImagePull(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "pull")
	insecure := fs.Bool("insecure", false, "speak to the registry over plain HTTP or without verifying its certificate, for this pull")
	public := publicFlag(fs)
	pos, err := fs.parseArgs(args, "image pull", "REF")
	if err != nil {
		return err
	}
	out := c.progressOut()
	img, err := c.client().Images().Pull(ctx, pos[0], client.PullOptions{Insecure: *insecure, Progress: out.event})
	img, err = c.publish(ctx, *public, img, err)
	return c.imageStored(out, "pulled", img, err)
}

// runImageImport streams the archive FILE, or stdin for "-" (but not a
// terminal), to the daemon.
func runImageImport(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "import")
	name := fs.String("name", "", "the image's `NAME` (required)")
	public := publicFlag(fs)
	pos, err := fs.parseArgs(args, "image import", "FILE")
	if err != nil {
		return err
	}
	if *name == "" {
		return &usageError{verb: "image import", msg: "missing --name NAME"}
	}
	archive := c.stdin
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		archive = f
	} else if isTerminal(c.stdin) {
		return &usageError{verb: "image import", msg: "refusing to read an archive from a terminal: give FILE, or pipe the archive in, e.g. docker save app | hearth image import - --name app"}
	}
	out := c.progressOut()
	img, err := c.client().Images().Import(ctx, *name, archive, out.event)
	img, err = c.publish(ctx, *public, img, err)
	return c.imageStored(out, "imported", img, err)
}

// maxDockerfile bounds the Dockerfile the CLI reads: it is sent whole
// before the context.
const maxDockerfile = 1 << 20

// runImageBuildRemote is `hearth image build NAME [-f DOCKERFILE]
// [--build-arg K=V]... [--network M] [CONTEXT]`: it sends the Dockerfile,
// the build arguments and a tar archive of the CONTEXT
// directory (".", every file of it: the daemon applies .dockerignore) to
// the daemon, which builds the image.
func runImageBuildRemote(ctx context.Context, c *cli, pos []string, dockerfile string, opts client.BuildOptions) error {
	if len(pos) > 2 {
		return &usageError{verb: "image build", msg: fmt.Sprintf("unexpected argument %q", pos[2])}
	}
	dir := "."
	if len(pos) == 2 {
		dir = pos[1]
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return &usageError{verb: "image build", msg: fmt.Sprintf("the build context %q is not a directory", dir)}
	}
	df, err := c.readDockerfile(orDefault(dockerfile, filepath.Join(dir, "Dockerfile")))
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(dir, pw)) }()
	defer pr.Close()
	out := c.progressOut()
	opts.Progress = out.event
	img, err := c.client().Images().Build(ctx, pos[0], bytes.NewReader(df), pr, opts)
	return c.imageStored(out, "built", img, err)
}

// readDockerfile reads the Dockerfile at path, or stdin for "-", at most
// maxDockerfile bytes.
func (c *cli) readDockerfile(path string) ([]byte, error) {
	r := c.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &usageError{verb: "image build", msg: fmt.Sprintf("cannot read the Dockerfile: %v", err)}
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDockerfile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the Dockerfile %s: %w", path, err)
	case len(b) > maxDockerfile:
		return nil, &usageError{verb: "image build", msg: fmt.Sprintf("the Dockerfile %s is larger than %s", path, formatBytes(maxDockerfile))}
	}
	return b, nil
}

// progressSink is where an image op's progress goes: JSON lines on
// stdout (--json) or a progressPrinter on stderr.
type progressSink struct {
	enc     *json.Encoder    // --json: stdout
	printer *progressPrinter // otherwise: stderr
}

// progressOut returns the progress sink of the op being run.
func (c *cli) progressOut() *progressSink {
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetEscapeHTML(false)
		return &progressSink{enc: enc}
	}
	return &progressSink{printer: &progressPrinter{w: c.stderr, tty: isTerminal(c.stderr)}}
}

func (s *progressSink) event(ev sandbox.ImageProgress) {
	if s.enc != nil {
		s.enc.Encode(ev)
		return
	}
	s.printer.event(ev)
}

// publicFlag is --public, on the verbs that store an image.
func publicFlag(fs *flagSet) *bool {
	return fs.Bool("public", false, "make the image public: every tenant sees and uses it (operators only)")
}

// publish makes img, which an op stored (or failed to: err), public when
// asked.
func (c *cli) publish(ctx context.Context, public bool, img sandbox.Image, err error) (sandbox.Image, error) {
	if err != nil || !public {
		return img, err
	}
	return c.client().Images().SetPublic(ctx, img.Name, true)
}

// imageStored ends an op that stored img (or failed with err), whose
// progress went to out: "<done> NAME" and the image, or the last line of
// the JSON stream.
func (c *cli) imageStored(out *progressSink, done string, img sandbox.Image, err error) error {
	if out.printer != nil {
		out.printer.end()
	}
	if err != nil {
		return err
	}
	if out.enc != nil {
		return out.enc.Encode(map[string]any{"image": img})
	}
	fmt.Fprintf(c.stdout, "%s image %s\n", done, img.Name)
	return printImage(c.stdout, img, time.Now())
}

// progressPrinter writes an image op's progress for a person: a line for
// each step done (resolved, a layer downloaded or found cached, a layer
// unpacked, a build step, the end) and, on a terminal, the bytes of the
// layer downloading in a line redrawn in place.
type progressPrinter struct {
	w   io.Writer
	tty bool
	// open: a redrawn line is on the terminal, without its newline.
	open bool
}

func (p *progressPrinter) event(ev sandbox.ImageProgress) {
	text, step := describeProgress(ev)
	switch {
	case text == "":
	case p.tty && !step:
		fmt.Fprintf(p.w, "\r\x1b[K%s", text)
		p.open = true
	case p.tty:
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", text)
		p.open = false
	case step:
		fmt.Fprintln(p.w, text)
	}
}

// end ends a redrawn line, if one is open.
func (p *progressPrinter) end() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}

// describeProgress says ev in words; step is false for an event within a
// step (a layer's bytes so far), which only a terminal shows.
func describeProgress(ev sandbox.ImageProgress) (text string, step bool) {
	layer := shortDigest(ev.Layer)
	cached := ""
	if ev.Cached {
		cached = " (cached)"
	}
	switch ev.Phase {
	case "resolve":
		return "resolving " + ev.Text, true
	case "layer":
		switch {
		case ev.Cached:
			return fmt.Sprintf("layer %s: already here (%s)", layer, formatBytes(ev.Total)), true
		case ev.Total > 0 && ev.Bytes >= ev.Total:
			return fmt.Sprintf("layer %s: downloaded %s", layer, formatBytes(ev.Total)), true
		}
		return fmt.Sprintf("layer %s: %s of %s", layer, formatBytes(ev.Bytes), formatBytes(ev.Total)), false
	case "unpack":
		return fmt.Sprintf("layer %s: unpacked %s%s", layer, formatBytes(ev.Bytes), cached), true
	case "step":
		return fmt.Sprintf("step %d: %s%s", ev.Step, ev.Text, cached), true
	case "done":
		return fmt.Sprintf("stored %s (%d layers)", ev.Text, ev.Layers), true
	}
	return ev.Phase + " " + ev.Text, true
}

// shortDigest is the first 12 hex digits of a digest ("sha256:…").
func shortDigest(d string) string {
	if i := len("sha256:"); len(d) > i+12 && d[:i] == "sha256:" {
		return d[i : i+12]
	}
	return d
}
