package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/rootfs"
	"github.com/hearth/hearth/sandbox"
)

// imageSummary is what `hearth image -h` says images are.
const imageSummary = `Manage your tenant's images, the root filesystems sandboxes are created from
(hearth create --image NAME): pull them from a registry, import or export OCI
archives, make one from a sandbox, build one from a Dockerfile. An image NAME is
a plain name (tools) or a registry reference (127.0.0.1:5000/app:1.0).
'hearth image build' without a NAME builds the daemon's default image on this host.`

func imageOps() []subOp {
	return []subOp{
		{"pull", "REF [--insecure]", "pull an image from a registry, with progress on stderr", runImagePull},
		{"import", "FILE|- --name NAME", "import a docker-archive or OCI archive tarball", runImageImport},
		{"export", "NAME [--output FILE]", "write an image as an OCI archive to stdout or FILE", runImageExport},
		{"create", "NAME --from SANDBOX[@CHECKPOINT]", "make an image from a sandbox's disk, now or at a checkpoint", runImageCreate},
		{"build", "NAME -f DOCKERFILE [--build-arg K=V]... [--network M] [CONTEXT] | [--data-dir DIR]", "build an image from a Dockerfile; without NAME, the default image here", runImageBuild},
		{"list", "", "list the images you can use: NAME DIGEST SIZE SOURCE CURRENT PUBLIC TENANT AGE", runImageList},
		{"inspect", "NAME", "show one image: its digest, source, size and config", runImageInspect},
		{"rm", "NAME", "remove an image, every version of it (tenant admins)", runImageRemove},
		{"public", "NAME [--off]", "make an image public to every tenant, or private again (operators)", runImagePublic},
	}
}

func runImage(ctx context.Context, c *cli, args []string) error {
	return c.runSub(ctx, "image", "...", imageSummary, imageOps(), args)
}

func runImageCreate(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "create")
	from := fs.String("from", "", "the `SANDBOX` whose disk becomes the image, SANDBOX@CHECKPOINT for one of its checkpoints (required)")
	pos, err := fs.parseArgs(args, "image create", "NAME")
	if err != nil {
		return err
	}
	sb, ck, _ := strings.Cut(*from, "@")
	if sb == "" {
		return &usageError{verb: "image create", msg: "missing --from SANDBOX[@CHECKPOINT]"}
	}
	img, err := c.client().Images().Create(ctx, pos[0], sb, ck)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(img)
	}
	fmt.Fprintf(c.stdout, "created image %s from %s\n", img.Name, *from)
	return printImage(c.stdout, img, time.Now())
}

func runImageList(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "list")
	if _, err := fs.parseArgs(args, "image list"); err != nil {
		return err
	}
	list, err := c.client().Images().List(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	return printList(c, "images", list, "NAME\tDIGEST\tSIZE\tSOURCE\tCURRENT\tPUBLIC\tTENANT\tAGE", func(x sandbox.Image) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", x.Name, dash(shortDigest(x.Digest)), formatBytes(x.Size), dash(x.Source),
			yesNo(x.Current), yesNo(x.Public), dash(x.Tenant), formatAge(now.Sub(x.CreatedAt)))
	})
}

func runImageInspect(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "inspect")
	pos, err := fs.parseArgs(args, "image inspect", "NAME")
	if err != nil {
		return err
	}
	img, err := c.client().Images().Get(ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(img)
	}
	return printImage(c.stdout, img, time.Now())
}

func runImageRemove(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "rm")
	pos, err := fs.parseArgs(args, "image rm", "NAME")
	if err != nil {
		return err
	}
	if err := c.client().Images().Remove(ctx, pos[0]); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"deleted": pos[0]})
	}
	fmt.Fprintf(c.stdout, "image %s removed\n", pos[0])
	return nil
}

func runImagePublic(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "public")
	off := fs.Bool("off", false, "make the image private to its tenant again")
	pos, err := fs.parseArgs(args, "image public", "NAME")
	if err != nil {
		return err
	}
	img, err := c.client().Images().SetPublic(ctx, pos[0], !*off)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(img)
	}
	if img.Public {
		fmt.Fprintf(c.stdout, "image %s is public: every tenant may create sandboxes from it\n", img.Name)
	} else {
		fmt.Fprintf(c.stdout, "image %s is private to tenant %s\n", img.Name, img.Tenant)
	}
	return nil
}

// runImageExport writes the image's OCI archive to --output, whole or not
// at all (a temporary file renamed once complete), or to stdout, but
// never to a terminal.
func runImageExport(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", "", imageOps(), "export")
	output := fs.String("output", "", "write the archive to `FILE` instead of stdout")
	pos, err := fs.parseArgs(args, "image export", "NAME")
	if err != nil {
		return err
	}
	cl := c.client()
	if *output == "" {
		if isTerminal(c.stdout) {
			return &usageError{verb: "image export", msg: "refusing to write an archive to a terminal: redirect stdout, e.g. > app.tar, or give --output FILE"}
		}
		return cl.Images().Export(ctx, pos[0], c.stdout)
	}
	f, err := os.CreateTemp(filepath.Dir(*output), "."+filepath.Base(*output)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone once renamed
	err = cl.Images().Export(ctx, pos[0], f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), *output)
	}
	if err != nil || !c.json {
		return err
	}
	return c.printJSON(map[string]any{"exported": pos[0], "output": *output})
}

// runImageBuild builds an image from a Dockerfile on the daemon
// (runImageBuildRemote), or, without a NAME, the daemon's default image
// into this host's image cache ahead of the daemon's first start (which
// would otherwise do it), e.g. while provisioning a host or before a test
// run.
func runImageBuild(ctx context.Context, c *cli, args []string) error {
	fs := c.subFlagSet("image", imageSummary+"\n\nbuild: ", imageOps(), "build")
	dockerfile := fs.String("f", "", "the `DOCKERFILE` (default CONTEXT/Dockerfile; - reads it from stdin)")
	var opts client.BuildOptions
	buildArgs := envFlag{}
	fs.Var(buildArgs, "build-arg", "set the Dockerfile's ARG `K=V` (repeatable)")
	fs.StringVar(&opts.Network, "network", "", "network `MODE` of the RUN steps' sandboxes: none or egress (default: the tenant's)")
	dataDir := fs.String("data-dir", "", "without NAME: the daemon's data `DIR` (default $HEARTH_DATA_DIR, else /var/lib/hearth)")
	cache := fs.String("image-cache", "", "without NAME: where built images are cached (default $HEARTH_IMAGE_CACHE, else DATA-DIR/images)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		if *dataDir != "" || *cache != "" {
			return &usageError{verb: "image build", msg: "--data-dir and --image-cache build the default image, without a NAME"}
		}
		opts.Args = buildArgs
		return runImageBuildRemote(ctx, c, pos, *dockerfile, opts)
	}
	if *dockerfile != "" || len(buildArgs) > 0 || opts.Network != "" {
		return &usageError{verb: "image build", msg: "missing NAME: -f, --build-arg and --network build an image of that name"}
	}
	if *cache == "" {
		*cache = c.getenv("HEARTH_IMAGE_CACHE")
	}
	if *cache == "" {
		*cache = filepath.Join(orDefault(*dataDir, orDefault(c.getenv("HEARTH_DATA_DIR"), "/var/lib/hearth")), "images")
	}
	dir, err := buildDefaultImage(ctx, *cache, c.stderr, slog.New(slog.NewTextHandler(c.stderr, nil)))
	if err != nil {
		return localError("image build", err)
	}
	if c.json {
		return c.printJSON(map[string]any{"image": defaultImage, "dir": dir})
	}
	fmt.Fprintf(c.stderr, "hearth: default image ready in %s\n", dir)
	return nil
}

// localError gives a failure of work done on this host, not through the
// daemon, the words of what failed.
func localError(what string, err error) error {
	var e *sandbox.Error
	if err == nil || errors.As(err, &e) || errors.Is(err, context.Canceled) {
		return err
	}
	return sandbox.Errorf(sandbox.CodeInternal, "%s: %v", what, err).
		WithHint("'hearth %s -h' lists its flags; building the default image needs root and network access", what)
}

// buildDefaultImage builds (once; cached) the default image under cache and
// returns its root filesystem.
func buildDefaultImage(ctx context.Context, cache string, progress io.Writer, log *slog.Logger) (string, error) {
	return rootfs.Build(ctx, rootfs.Options{
		Dir:      filepath.Join(cache, defaultImage),
		Progress: progress,
		Logger:   log.With("component", "image"),
	})
}
