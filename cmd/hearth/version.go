package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// runVersion prints the client's version: the module version it was built
// as, the VCS revision when the build recorded one, and the Go version.
func runVersion(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("version", "[--json]", "Print the version of this hearth binary.")
	_, err := fs.parseArgs(args, "version")
	if err != nil {
		return err
	}
	rev := revision()
	if c.json {
		return c.printJSON(map[string]string{"version": version(), "revision": rev, "go": runtime.Version()})
	}
	fmt.Fprintf(c.stdout, "hearth %s", version())
	if rev != "" {
		fmt.Fprintf(c.stdout, " (%s)", rev)
	}
	fmt.Fprintf(c.stdout, " %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// version is the main module's version as the build recorded it: a tag for
// `go install …@vX`, "(devel)" for a build from a checkout.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// revision is the VCS commit the binary was built from, shortened, with
// "+dirty" when the tree had changes; "" when unknown.
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
