package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/hearth/hearth/rootfs"
)

// runImage is `hearth image build`: it builds the default image into the
// image cache ahead of the daemon's first start (which would otherwise do
// it), e.g. while provisioning a host or before a test run.
func runImage(ctx context.Context, args []string, env func(string) string, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "build" {
		return &usageError{verb: "image", msg: "usage: hearth image build [--data-dir DIR] [--image-cache DIR]"}
	}
	fl := flag.NewFlagSet("hearth image build", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dataDir := fl.String("data-dir", orDefault(env("HEARTH_DATA_DIR"), "/var/lib/hearth"), "the daemon's data dir")
	cache := fl.String("image-cache", env("HEARTH_IMAGE_CACHE"), "where built images are cached (default: <data-dir>/images)")
	if err := fl.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{verb: "image", msg: err.Error()}
	}
	if *cache == "" {
		*cache = filepath.Join(*dataDir, "images")
	}
	dir, err := buildDefaultImage(ctx, *cache, stderr, slog.New(slog.NewTextHandler(stderr, nil)))
	if err == nil {
		fmt.Fprintf(stderr, "hearth: default image ready in %s\n", dir)
	}
	return err
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
