package lifecycle_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
)

// stepKeys are the build steps' roots the layer store holds.
func (e *env) stepKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	if err := e.lay.Walk(t.Context(), func(info layers.Info) error {
		if strings.HasPrefix(info.Key, "step-") {
			keys = append(keys, info.Key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// cachedKeys are the keys of p's tenant's build cache.
func (e *env) cachedKeys(t *testing.T, p sandbox.Principal) []string {
	t.Helper()
	steps, err := e.db.BuildSteps().List(t.Context(), p.Home())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, st := range steps {
		keys = append(keys, st.Key)
	}
	slices.Sort(keys)
	return keys
}

// TestImageBuildCache: the build cache outlives the daemon (a rebuild
// after a restart runs no step), holds only the steps' roots (a RUN's
// prepared root goes when the build ends), and lets go of a step unused
// for a week at the next collection (a rebuild then runs it again).
func TestImageBuildCache(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	e.importImage(t, a1, "base", ociImage(t, baseConfig, layer(t, accounts)))
	bc := buildContext(t, map[string]string{"hello.txt": "hello\n"})
	log := filepath.Join(t.TempDir(), "runs")
	df := "FROM base\nARG LOG\nCOPY hello.txt /srv/hello.txt\nRUN echo one >> \"$LOG\"\nRUN echo two >> \"$LOG\"\n"
	args := map[string]string{"LOG": log}
	if _, steps, err := e.build(t, a1, "app", df, args, bc); err != nil {
		t.Fatalf("Build = %v", err)
	} else {
		wantCached(t, "the first build", steps, []bool{true, false, false, false})
	}
	cached := e.cachedKeys(t, a1)
	if len(cached) != 3 || !slices.Equal(e.stepKeys(t), cached) {
		t.Fatalf("after a build the layer store holds steps %q, the cache %q; want the three steps' roots, nothing else", e.stepKeys(t), cached)
	}

	svc := e.restart(t)
	if err := svc.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	e.svc = svc
	e.wantKeys(t, "after a restart", cached, nil)
	if _, steps, err := e.build(t, a1, "app", df, args, bc); err != nil {
		t.Fatalf("Build after a restart = %v", err)
	} else {
		wantCached(t, "the build after a restart", steps, []bool{true, true, true, true})
	}
	if b, _ := os.ReadFile(log); string(b) != "one\ntwo\n" {
		t.Errorf("the RUN steps wrote %q; want one run each, before the restart", b)
	}

	// A week and a day later, any collection (here a destroy's) lets the
	// steps go.
	e.clock.Advance(8 * 24 * time.Hour)
	e.createFrom(t, a1, "box", "")
	if err := e.svc.Sandboxes.Destroy(ctx, a1, "box"); err != nil {
		t.Fatal(err)
	}
	if got := e.cachedKeys(t, a1); len(got) != 0 {
		t.Errorf("the cache after a week unused = %q; want it empty", got)
	}
	e.wantKeys(t, "after a week unused", nil, cached)
	if _, steps, err := e.build(t, a1, "app", df, args, bc); err != nil {
		t.Fatalf("Build a week later = %v", err)
	} else {
		wantCached(t, "the build a week later", steps, []bool{true, false, false, false})
	}
}

// TestImageBuildCacheBudget: a tenant's build cache lives in what its disk
// budget leaves: at the end of a build its least recently used steps go
// until sandboxes, images and cache fit, and a create is never refused for
// the cache.
func TestImageBuildCacheBudget(t *testing.T) {
	e := newImageEnv(t)
	const mib = 1 << 20
	limit := sandbox.Sizes()["small"].DiskBytes + 4*mib
	c1 := e.diskTenant(t, "t3", limit)
	e.importImage(t, c1, "base", ociImage(t, baseConfig, layer(t, accounts)))
	bc := buildContext(t, map[string]string{"a": strings.Repeat("a", mib), "b": strings.Repeat("b", mib), "note.txt": "a note\n"})
	if _, _, err := e.build(t, c1, "app", "FROM base\nCOPY a /a\nCOPY b /b\n", nil, bc); err != nil {
		t.Fatalf("Build = %v", err)
	}
	e.wantCacheFits(t, c1, limit)
	before := e.cachedKeys(t, c1)
	if len(before) != 2 {
		t.Fatalf("the cache after a build with room = %q; want both steps", before)
	}
	// A sandbox takes what the cache held: the create is not refused, and
	// the next build (a COPY: no room is left for a RUN's sandbox) trims
	// the cache.
	e.createFrom(t, c1, "box", "")
	if _, _, err := e.build(t, c1, "app2", "FROM base\nCOPY note.txt /note.txt\n", nil, bc); err != nil {
		t.Fatalf("Build with a sandbox = %v", err)
	}
	e.wantCacheFits(t, c1, limit)
	if after := e.cachedKeys(t, c1); len(after) > len(before) {
		t.Errorf("the cache with a sandbox in the budget = %q, before it %q; want steps dropped", after, before)
	}
}

// wantCacheFits wants p's tenant's sandboxes, images and build cache to
// fit in limit bytes, and the layer store to hold no step the cache lost.
func (e *env) wantCacheFits(t *testing.T, p sandbox.Principal, limit int64) {
	t.Helper()
	ctx := t.Context()
	steps, err := e.db.BuildSteps().List(ctx, p.Home())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.svc.Tenancy.Limits(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	images, err := e.db.Images().ImageBytes(ctx, p.Home())
	if err != nil {
		t.Fatal(err)
	}
	var cache int64
	for _, st := range steps {
		cache += st.Size
	}
	held := rep.Budget.Used.DiskBytes + images
	if held+cache > limit {
		t.Errorf("sandboxes and images (%d) and the build cache (%d) hold %d of a %d budget", held, cache, held+cache, limit)
	}
	for _, k := range e.stepKeys(t) {
		if !slices.Contains(e.cachedKeys(t, p), k) {
			t.Errorf("the layer store holds %s, which the cache dropped", k)
		}
	}
}
