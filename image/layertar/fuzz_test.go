package layertar_test

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/hearth/hearth/image/layertar"
)

// FuzzApply applies arbitrary bytes as a layer onto a root that already
// holds a lower layer with links aimed outside it, and checks that nothing
// outside the root was created, changed or removed: not beside the root
// (links climbing with ".."), nor at the top of the host's tree (absolute
// links). Errors are expected; escapes and panics are not.
func FuzzApply(f *testing.F) {
	f.Add(makeTar(f, dir("etc", 0o755), reg("etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0o644), sym("bin", "usr/bin"), hardlink("etc/pw", "etc/passwd")))
	f.Add(makeTar(f, sym("a", "/"), reg("a/layertar-escape", "x", 0o644), dir("a/layertar-escape-dir", 0o777)))
	f.Add(makeTar(f, sym("up", "../../.."), dir("up/x", 0o777), reg("up/x/y", "y", 0o4755), reg("up2/../../z", "z", 0o644)))
	f.Add(makeTar(f, hardlink("l", "../outside/keep"), hardlink("m", "lower-up/keep"), reg("lower-up/keep", "over", 0o644)))
	f.Add(makeTar(f, whiteout("lower-up/.wh..wh..opq"), whiteout("lower-abs/.wh.keep"), whiteout(".wh.lower-up"), dir("lower-up", 0o700)))
	lower := makeTar(f, sym("lower-up", "../outside"), sym("lower-abs", "/tmp"), dir("d", 0o755), reg("d/f", "f", 0o644))
	top := hostRoot(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		fx := newFixture(t)
		if _, err := fx.apply(t, lower, layertar.Limits{}); err != nil {
			t.Fatalf("Apply of the lower layer: %v", err)
		}
		fx.apply(t, b, layertar.Limits{MaxBytes: 1 << 20, MaxFileSize: 1 << 20, MaxEntries: 64})
		fx.checkOutside(t)
		for _, n := range hostRoot(t) {
			// Other programs may add names at /; one the layer holds is its.
			if !slices.Contains(top, n) && bytes.Contains(b, []byte(n)) {
				t.Errorf("/%s was created", n)
			}
		}
	})
}

// hostRoot returns the names at the top of the host's tree.
func hostRoot(t testing.TB) []string {
	t.Helper()
	des, err := os.ReadDir("/")
	must(t, err)
	var ns []string
	for _, d := range des {
		ns = append(ns, d.Name())
	}
	return ns
}
