package image_test

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// node is what two trees are compared on, for one path.
type node struct {
	Type     string // "dir", "file", "symlink", or another kind
	Mode     uint32 // permission bits with setuid, setgid and sticky
	UID, GID uint32
	Size     int64  // files only
	Hash     string // files only: sha256 of the content
	Target   string // symlinks only
	Nlink    uint64 // files only
	MTime    int64  // non-directories: nanoseconds since the epoch
	Xattrs   string // every extended attribute, sorted, "name=value;…"
}

func (n node) String() string {
	s := fmt.Sprintf("%s %04o %d:%d", n.Type, n.Mode, n.UID, n.GID)
	switch n.Type {
	case "file":
		s += fmt.Sprintf(" size %d sha256 %.12s nlink %d", n.Size, n.Hash, n.Nlink)
	case "symlink":
		s += " -> " + n.Target
	}
	if n.MTime != 0 {
		s += fmt.Sprintf(" mtime %d", n.MTime)
	}
	if n.Xattrs != "" {
		s += " xattrs " + n.Xattrs
	}
	return s
}

// tree is a directory tree as compared: each path ("/" for the root, then
// "/etc", …) and its node, and the groups of paths that are one file
// (hard links), each sorted, the groups sorted.
type tree struct {
	nodes map[string]node
	links [][]string
}

// readTree reads the tree under root, following no link. The trees read
// are the tests' own, so plain path calls are fine here.
func readTree(t testing.TB, root string) tree {
	t.Helper()
	tr := tree{nodes: map[string]node{}}
	inodes := map[uint64][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.Clean("/" + rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
		if n.Xattrs, err = xattrsOf(p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n.Type = "dir"
		case unix.S_IFREG:
			n.Type, n.Size, n.Nlink = "file", st.Size, st.Nlink
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n.Hash = fmt.Sprintf("%x", sha256.Sum256(b))
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		case unix.S_IFLNK:
			n.Type = "symlink"
			if n.Target, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFCHR:
			n.Type = fmt.Sprintf("chardev %d", st.Rdev)
		case unix.S_IFBLK:
			n.Type = fmt.Sprintf("blockdev %d", st.Rdev)
		case unix.S_IFIFO:
			n.Type = "fifo"
		default:
			n.Type = fmt.Sprintf("type %o", st.Mode&unix.S_IFMT)
		}
		if n.Type != "dir" {
			n.MTime = st.Mtim.Nano()
		}
		tr.nodes[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("reading the tree %s: %v", root, err)
	}
	for _, g := range inodes {
		slices.Sort(g)
		tr.links = append(tr.links, g)
	}
	slices.SortFunc(tr.links, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return tr
}

// xattrsOf lists the extended attributes of p (not followed), with their
// values.
func xattrsOf(p string) (string, error) {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		return "", err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(p, buf); err != nil {
		return "", err
	}
	// The first call's size is an upper bound: overlayfs counts there the
	// names it keeps to itself (trusted.overlay.*), and lists none of them.
	names := strings.Split(strings.TrimSuffix(string(buf[:size]), "\x00"), "\x00")
	slices.Sort(names)
	var out []string
	for _, name := range names {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		n, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			return "", fmt.Errorf("getxattr %s: %w", name, err)
		}
		out = append(out, fmt.Sprintf("%s=%q", name, v[:n]))
	}
	return strings.Join(out, ";"), nil
}

// diffTrees lists how got differs from want, one line a difference, in
// path order.
func diffTrees(got, want tree) []string {
	var diffs []string
	for _, p := range slices.Sorted(maps.Keys(want.nodes)) {
		g, ok := got.nodes[p]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: missing, want %v", p, want.nodes[p]))
		case g != want.nodes[p]:
			diffs = append(diffs, fmt.Sprintf("%s: %v, want %v", p, g, want.nodes[p]))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got.nodes)) {
		if _, ok := want.nodes[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %v, want nothing there", p, got.nodes[p]))
		}
	}
	if !slices.EqualFunc(got.links, want.links, slices.Equal) {
		diffs = append(diffs, fmt.Sprintf("hard link groups %v, want %v", got.links, want.links))
	}
	return diffs
}

// sameTree fails t with the differences of got (what) from want.
func sameTree(t testing.TB, what string, got, want tree) {
	t.Helper()
	diffs := diffTrees(got, want)
	if len(diffs) > 40 {
		diffs = append(diffs[:40], fmt.Sprintf("… and %d more", len(diffs)-40))
	}
	if len(diffs) > 0 {
		t.Errorf("%s differs (%d paths compared):\n%s", what, len(want.nodes), strings.Join(diffs, "\n"))
	}
}

// without is tr less the paths given, which must be there with the nodes
// given; it fails t for each that is not.
func (tr tree) without(t testing.TB, extra map[string]node) tree {
	t.Helper()
	out := tree{nodes: maps.Clone(tr.nodes), links: tr.links}
	for p, want := range extra {
		got, ok := out.nodes[p]
		want.MTime = got.MTime // made when the top was: any time
		switch {
		case !ok:
			t.Errorf("%s: missing, want %v", p, want)
		case got != want:
			t.Errorf("%s: %v, want %v", p, got, want)
		}
		delete(out.nodes, p)
	}
	return out
}
