package oci_test

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/sandbox"
)

// TestStartWritesNothingInRoot (every runtime): starting a sandbox on the
// default image and running a first command there changes nothing in its
// root, not even a directory's times: the agent's mount point is in the
// image. A start that wrote there would copy, in the sandbox's btrfs
// snapshot, tree blocks that every sandbox of the image shares, at a cost
// that grows with their number.
func TestStartWritesNothingInRoot(t *testing.T) {
	drivertest.RequireRoot(t)
	base := drivertest.BaseRootFS(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			bin := findRuntime(t, rt)
			root := drivertest.SnapshotRootFS(t, base)
			before := rootState(t, root)
			d, spec := startOn(t, rt, bin, "quietroot"+rt, root)
			c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if res, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
				t.Fatalf("Exec(true) = %+v, %v", res, err)
			}
			after := rootState(t, root)
			for _, p := range slices.Sorted(maps.Keys(after)) {
				if b, ok := before[p]; !ok {
					t.Errorf("%s: made by the start (%s)", p, after[p])
				} else if b != after[p] {
					t.Errorf("%s: changed by the start: %s, was %s", p, after[p], b)
				}
			}
			for p := range before {
				if _, ok := after[p]; !ok {
					t.Errorf("%s: removed by the start", p)
				}
			}
		})
	}
}

// rootState describes every file under root (type, mode, owner, size,
// and its change and modification times), by path.
func rootState(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = fmt.Sprintf("mode %o owner %d:%d size %d ctime %d.%09d mtime %d.%09d",
			st.Mode, st.Uid, st.Gid, st.Size, st.Ctim.Sec, st.Ctim.Nsec, st.Mtim.Sec, st.Mtim.Nsec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
