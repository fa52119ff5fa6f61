package layertar_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hearth/hearth/image/layertar"
)

// checkHostile fails t (going on, to check the rest) unless err is an
// *Error for the entry path that matches ErrHostile.
func checkHostile(t *testing.T, err error, path string) {
	t.Helper()
	var le *layertar.Error
	if !errors.Is(err, layertar.ErrHostile) || !errors.As(err, &le) {
		t.Errorf("Apply = %v, want an *Error matching ErrHostile", err)
		return
	}
	if le.Path != path || le.Reason == "" {
		t.Errorf("Error{Path: %q, Reason: %q}, want Path %q and a reason", le.Path, le.Reason, path)
	}
}

// hostileLayers try to reach outside the root or past the limits.
var hostileLayers = []struct {
	name  string
	lower func(fx *fixture) []ent
	layer func(fx *fixture) []byte
	lim   layertar.Limits
	path  string // the entry refused
}{
	{name: "dotdot climbs out", layer: layer(reg("../escape", "x", 0o644)), path: "../escape"},
	{name: "dotdot deep", layer: layer(reg("a/../../escape", "x", 0o644)), path: "a/../../escape"},
	{name: "dotdot that stays inside", layer: layer(reg("a/../b", "x", 0o644)), path: "a/../b"},
	{name: "dotdot directory", layer: layer(dir("../", 0o777)), path: "../"},
	{name: "absolute dotdot", layer: layer(reg("/../escape", "x", 0o644)), path: "/../escape"},
	{
		name:  "write through a lower symlink to outside",
		lower: func(fx *fixture) []ent { return []ent{sym("a", fx.outside)} },
		layer: layer(reg("a/pwned", "x", 0o644)), path: "a/pwned",
	},
	{
		name: "write through a symlink of the same layer",
		layer: func(fx *fixture) []byte {
			return makeTar(fx.tb, sym("a", fx.outside), dir("a/d", 0o777), reg("a/d/pwned", "x", 0o644))
		},
		path: "a/d",
	},
	{
		name:  "write through a symlink to an outside file",
		lower: func(fx *fixture) []ent { return []ent{sym("f", fx.outside+"/keep")} },
		layer: layer(reg("f/x", "x", 0o644)), path: "f/x",
	},
	{
		name:  "write through a relative symlink to outside",
		lower: func(fx *fixture) []ent { return []ent{sym("up", "../outside")} },
		layer: layer(reg("up/keep", "overwritten", 0o644)), path: "up/keep",
	},
	{name: "hard link dotdot", layer: layer(hardlink("l", "../outside/keep")), path: "l"},
	{
		name:  "hard link to an absolute outside path",
		layer: func(fx *fixture) []byte { return makeTar(fx.tb, hardlink("l", fx.outside+"/keep")) }, path: "l",
	},
	{
		name:  "hard link through a symlink to outside",
		lower: func(fx *fixture) []ent { return []ent{sym("s", fx.outside)} },
		layer: layer(hardlink("l", "s/keep")), path: "l",
	},
	{
		name:  "hard link through a symlink inside",
		lower: func(*fixture) []ent { return []ent{reg("d/f", "f", 0o644), sym("s", "d")} },
		layer: layer(hardlink("l", "s/f")), path: "l",
	},
	{
		name:  "hard link to a symlink",
		lower: func(fx *fixture) []ent { return []ent{sym("s", fx.outside+"/keep")} },
		layer: layer(hardlink("l", "s")), path: "l",
	},
	{
		name:  "hard link to a directory",
		lower: func(*fixture) []ent { return []ent{dir("d", 0o755)} },
		layer: layer(hardlink("l", "d")), path: "l",
	},
	{name: "hard link to the root", layer: layer(hardlink("l", "/")), path: "l"},
	{name: "hard link to nothing", layer: layer(hardlink("l", "missing")), path: "l"},
	{name: "file as the root", layer: layer(reg(".", "x", 0o644)), path: "."},
	{name: "symlink as the root", layer: layer(sym("./", "/")), path: "./"},
	{name: "empty symlink target", layer: layer(sym("s", "")), path: "s"},
	{name: "whiteout of nothing", layer: layer(whiteout("d/.wh.")), path: "d/.wh."},
	{name: "whiteout of the parent", layer: layer(whiteout("d/.wh...")), path: "d/.wh..."},
	{name: "name too long", layer: layer(reg(strings.Repeat("a/", 2100)+"f", "x", 0o644)), path: strings.Repeat("a/", 2100) + "f"},
	{name: "owner out of range", layer: layer(owner(reg("f", "x", 0o644), 1<<33, 0)), path: "f"},
	{name: "file over MaxFileSize", layer: layer(reg("big", strings.Repeat("x", 2048), 0o644)), lim: layertar.Limits{MaxFileSize: 1024}, path: "big"},
	{name: "layer over MaxBytes", layer: layer(reg("big", strings.Repeat("x", 64<<10), 0o644)), lim: layertar.Limits{MaxBytes: 16 << 10}, path: "big"},
	{name: "more than MaxEntries", layer: layer(manyDirs(11)...), lim: layertar.Limits{MaxEntries: 10}, path: "d10"},
	{name: "absurd size", layer: func(fx *fixture) []byte { return headerOnly(fx.tb, 1<<62) }, path: "huge"},
	{name: "negative size", layer: func(fx *fixture) []byte { return withSize(headerOnly(fx.tb, 1), -1) }, path: ""},
	{name: "corrupt header", layer: func(*fixture) []byte { return bytes.Repeat([]byte{'x'}, 1024) }, path: ""},
}

// TestApplyHostile applies each of hostileLayers, onto a lower layer when
// it needs one, and checks the refusal and that nothing outside the root
// changed.
func TestApplyHostile(t *testing.T) {
	for _, tt := range hostileLayers {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t)
			if tt.lower != nil {
				fx.mustApply(t, tt.lower(fx)...)
			}
			_, err := fx.apply(t, tt.layer(fx), tt.lim)
			checkHostile(t, err, tt.path)
			fx.checkOutside(t)
		})
	}
}

// insideLayers aim at the outside but are valid: TestApplyNeverLeavesRoot
// applies each.
var insideLayers = []struct {
	name  string
	lower func(fx *fixture) []ent
	layer func(fx *fixture) []ent
	check func(t *testing.T, fx *fixture)
}{
	{
		name: "absolute names are the root's",
		layer: func(fx *fixture) []ent {
			return []ent{reg("/etc/abs", "a", 0o644), reg(fx.outside+"/keep", "inside", 0o644)}
		},
		check: func(t *testing.T, fx *fixture) {
			if readFile(t, fx.path("etc/abs")) != "a" || readFile(t, fx.path(fx.outside+"/keep")) != "inside" {
				t.Error("absolute names were not put under the root")
			}
		},
	},
	{
		name:  "a climbing symlink is clamped at the root",
		lower: func(*fixture) []ent { return []ent{sym("up", "../../../../..")} },
		layer: func(*fixture) []ent { return []ent{reg("up/x", "x", 0o644)} },
		check: func(t *testing.T, fx *fixture) {
			if readFile(t, fx.path("x")) != "x" {
				t.Error("up/x did not land at the root's x")
			}
		},
	},
	{
		name:  "a file replaces a symlink to an outside file",
		lower: func(fx *fixture) []ent { return []ent{sym("f", fx.outside+"/keep")} },
		layer: func(*fixture) []ent { return []ent{owner(reg("f", "new", 0o4777), 99, 99)} },
		check: func(t *testing.T, fx *fixture) {
			checkMode(t, fx.path("f"), 0o104777)
		},
	},
	{
		name:  "a directory replaces a symlink to an outside directory",
		lower: func(fx *fixture) []ent { return []ent{sym("d", fx.outside)} },
		layer: func(*fixture) []ent { return []ent{owner(dir("d", 0o777), 99, 99), reg("d/keep", "x", 0o644)} },
		check: func(t *testing.T, fx *fixture) { checkMode(t, fx.path("d"), 0o40777) },
	},
	{
		name:  "a hard link replaces a symlink to an outside file",
		lower: func(fx *fixture) []ent { return []ent{reg("t", "t", 0o644), sym("l", fx.outside+"/keep")} },
		layer: func(*fixture) []ent { return []ent{hardlink("l", "t")} },
		check: func(t *testing.T, fx *fixture) {
			if lstat(t, fx.path("l")).Ino != lstat(t, fx.path("t")).Ino {
				t.Error("l is not a link to t")
			}
		},
	},
	{
		name:  "a symlink replaces a symlink to outside",
		lower: func(fx *fixture) []ent { return []ent{sym("l", fx.outside)} },
		layer: func(fx *fixture) []ent { return []ent{sym("l", fx.outside+"/dir")} },
	},
	{
		name:  "whiteouts through a symlink to outside",
		lower: func(fx *fixture) []ent { return []ent{sym("s", fx.outside), sym("s2", fx.outside)} },
		layer: func(*fixture) []ent {
			return []ent{whiteout("s/.wh.keep"), whiteout("s/dir/.wh..wh..opq"), whiteout("s2/.wh..wh..opq"), whiteout(".wh.s")}
		},
		check: func(t *testing.T, fx *fixture) {
			if exists(fx.path("s")) || !exists(fx.path("s2")) {
				t.Error(".wh.s did not remove the link s alone")
			}
		},
	},
	{
		name:  "a whiteout of a relative symlink climbing out",
		lower: func(*fixture) []ent { return []ent{sym("up", "../outside")} },
		layer: func(*fixture) []ent { return []ent{whiteout("up/.wh.keep"), whiteout("up/.wh..wh..opq")} },
	},
	{
		name: "device nodes named after outside paths",
		layer: func(fx *fixture) []ent {
			return []ent{{h: tar.Header{Typeflag: tar.TypeBlock, Name: fx.outside + "/dev", Devmajor: 8}}}
		},
		check: func(t *testing.T, fx *fixture) {
			if exists(fx.path(fx.outside)) {
				t.Error("a skipped device node created its directory")
			}
		},
	},
}

// TestApplyNeverLeavesRoot applies each of insideLayers and checks that it
// was applied inside the root and that nothing outside changed.
func TestApplyNeverLeavesRoot(t *testing.T) {
	for _, tt := range insideLayers {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t)
			if tt.lower != nil {
				fx.mustApply(t, tt.lower(fx)...)
			}
			fx.mustApply(t, tt.layer(fx)...)
			if tt.check != nil {
				tt.check(t, fx)
			}
			fx.checkOutside(t)
		})
	}
}

// TestApplyDecompressionBomb applies a gzip stream of a few hundred KiB
// that inflates to 64 MiB: Apply stops at MaxBytes, having written no
// more than that.
func TestApplyDecompressionBomb(t *testing.T) {
	fx := newFixture(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(makeTar(t, reg("bomb", strings.Repeat("A", 64<<20), 0o644)))
	must(t, err)
	must(t, zw.Close())
	zr, err := gzip.NewReader(&gz)
	must(t, err)
	const limit = 4 << 20
	st, err := layertar.Apply(context.Background(), fx.f, zr, layertar.Limits{MaxBytes: limit})
	checkHostile(t, err, "bomb")
	if st.Bytes > limit {
		t.Errorf("Stats.Bytes = %d, want at most MaxBytes %d", st.Bytes, limit)
	}
	if s := lstat(t, fx.path("bomb")); s.Blocks*512 > limit+(1<<20) {
		t.Errorf("bomb takes %d bytes on disk, want at most about %d", s.Blocks*512, limit)
	}
	fx.checkOutside(t)
}

// layer returns a layer function for ents.
func layer(ents ...ent) func(*fixture) []byte {
	return func(fx *fixture) []byte { return makeTar(fx.tb, ents...) }
}

func owner(e ent, uid, gid int) ent {
	e.h.Uid, e.h.Gid = uid, gid
	return e
}

func manyDirs(n int) []ent {
	var ents []ent
	for i := range n {
		ents = append(ents, dir(fmt.Sprintf("d%d", i), 0o755))
	}
	return ents
}

// headerOnly returns a tar holding only the header of the file "huge" of
// the given size, its content missing.
func headerOnly(t testing.TB, size int64) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "huge", Size: size, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withSize returns the one-header tar b with its size field set to size
// (base-256) and its checksum fixed.
func withSize(b []byte, size int64) []byte {
	b = bytes.Clone(b)
	field := b[124:136]
	for i := len(field) - 1; i >= 0; i-- {
		field[i] = byte(size)
		size >>= 8
	}
	field[0] |= 0x80
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b[:512] {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return append(b, make([]byte, 1024)...)
}
