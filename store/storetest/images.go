package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// digest returns a digest made of c.
func digest(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

// newImage returns tenant's image name of digest, every field set,
// created at created.
func newImage(tenant, name, dg string, created time.Time) sandbox.Image {
	return sandbox.Image{
		Name:      name,
		Tenant:    tenant,
		Digest:    dg,
		Source:    sandbox.ImageSourceRegistry,
		Ref:       "127.0.0.1:5000/" + name + ":1.0",
		Config:    fullImageConfig(),
		Size:      300 << 20,
		Layers:    []string{"sha256-base-" + dg[7:15], "sha256-top-" + dg[7:15]},
		CreatedAt: created,
	}
}

// mustPutImage puts img or fails the test.
func mustPutImage(t *testing.T, s store.Store, img sandbox.Image) {
	t.Helper()
	if err := s.Images().Put(t.Context(), img); err != nil {
		t.Fatalf("Images.Put(%s/%s@%s) = %v, want nil", img.Tenant, img.Name, img.Digest, err)
	}
}

// checkImage reports every way got differs from want, CreatedAt compared
// as an instant in UTC.
func checkImage(t *testing.T, what string, got, want sandbox.Image) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	got.CreatedAt, want.CreatedAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s (time aside) =\n\t%+v\nwant\n\t%+v", what, got, want)
	}
}

// current returns img marked current or not.
func current(img sandbox.Image, c bool) sandbox.Image {
	img.Current = c
	return img
}

// versions renders imgs as tenant/name@digest-letter, "*" marking the
// current one, for failure messages and comparisons.
func versions(imgs []sandbox.Image) []string {
	out := []string{}
	for _, img := range imgs {
		v := fmt.Sprintf("%s/%s@%c", img.Tenant, img.Name, img.Digest[len(img.Digest)-1])
		if img.Current {
			v += "*"
		}
		out = append(out, v)
	}
	return out
}

// listImages lists tenant's image versions or fails the test.
func listImages(t *testing.T, s store.Store, tenant string) []sandbox.Image {
	t.Helper()
	list, err := s.Images().List(t.Context(), tenant)
	if err != nil || list == nil {
		t.Fatalf("Images.List(%q) = %#v, %v; want a list", tenant, list, err)
	}
	return list
}

// testImageRoundTrip: every field of a version comes back from Get,
// Version, List and All, Current set, and a zero config stays zero.
func testImageRoundTrip(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	full := newImage("acme", "127.0.0.1:5000/app:1.2", digest('a'), t0)
	full.Public = true
	full.Current = false // ignored: a put version is current
	bare := sandbox.Image{Tenant: "acme", Name: "bare", Digest: digest('b'), Layers: []string{"only"}, CreatedAt: at(time.Second)}
	for _, img := range []sandbox.Image{full, bare} {
		mustPutImage(t, s, img)
	}
	for _, img := range []sandbox.Image{full, bare} {
		want := current(img, true)
		got, err := s.Images().Get(ctx, img.Tenant, img.Name)
		if err != nil {
			t.Fatalf("Images.Get(%s) = %v", img.Name, err)
		}
		checkImage(t, "Images.Get("+img.Name+")", got, want)
		got, err = s.Images().Version(ctx, img.Tenant, img.Name, img.Digest)
		if err != nil {
			t.Fatalf("Images.Version(%s) = %v", img.Name, err)
		}
		checkImage(t, "Images.Version("+img.Name+")", got, want)
	}
	list := listImages(t, s, "acme")
	if len(list) != 2 {
		t.Fatalf("Images.List(acme) = %q, want both", versions(list))
	}
	checkImage(t, "Images.List(acme)[0]", list[0], current(full, true))
	checkImage(t, "Images.List(acme)[1]", list[1], current(bare, true))
	all, err := s.Images().All(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("Images.All = %q, %v; want both", versions(all), err)
	}
	checkImage(t, "Images.All[0]", all[0], current(full, true))
}

// testImagePutErrors: a version without tenant, name, digest or layers,
// or with an empty layer key, is refused and leaves nothing.
func testImagePutErrors(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	mustPutImage(t, s, newImage("acme", "tools", digest('1'), t0))
	for name, edit := range map[string]func(*sandbox.Image){
		"tenant":    func(img *sandbox.Image) { img.Tenant = "" },
		"name":      func(img *sandbox.Image) { img.Name = "" },
		"digest":    func(img *sandbox.Image) { img.Digest = "" },
		"layers":    func(img *sandbox.Image) { img.Layers = nil },
		"layer key": func(img *sandbox.Image) { img.Layers = []string{"base", ""} },
	} {
		img := newImage("acme", "tools", digest('2'), at(time.Second))
		edit(&img)
		if err := s.Images().Put(ctx, img); err == nil {
			t.Errorf("Images.Put with an empty %s = nil error", name)
		}
	}
	if got := versions(listImages(t, s, "acme")); !reflect.DeepEqual(got, []string{"acme/tools@1*"}) {
		t.Errorf("Images.List(acme) after refused puts = %q, want the first version alone, current", got)
	}
	if all, err := s.Images().All(ctx); err != nil || len(all) != 1 {
		t.Errorf("Images.All after refused puts = %q, %v; want one", versions(all), err)
	}
}

// testImageCurrent: a new version becomes current and the older stops
// being; putting an existing version again makes it current, takes its
// Public and keeps the rest as first stored.
func testImageCurrent(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	v1 := newImage("acme", "tools", digest('1'), t0)
	v2 := newImage("acme", "tools", digest('2'), at(time.Minute))
	v2.Source, v2.Ref = sandbox.ImageSourceBuild, "Dockerfile"
	mustPutImage(t, s, v1)
	mustPutImage(t, s, v2)
	got, err := s.Images().Get(ctx, "acme", "tools")
	if err != nil {
		t.Fatalf("Images.Get(tools) after a second version = %v", err)
	}
	checkImage(t, "Images.Get(tools) after a second version", got, current(v2, true))
	if got, err := s.Images().Version(ctx, "acme", "tools", v1.Digest); err != nil || got.Current {
		t.Errorf("Images.Version(v1) after v2 = current %v, %v; want not current", got.Current, err)
	}

	// v1 again, as a re-pull of the first digest: current again, Public
	// taken, everything else as first stored.
	again := newImage("acme", "tools", digest('1'), at(time.Hour))
	again.Public, again.Layers, again.Size, again.Ref = true, []string{"other-layer"}, 1, "elsewhere"
	mustPutImage(t, s, again)
	want := current(v1, true)
	want.Public = true
	got, err = s.Images().Get(ctx, "acme", "tools")
	if err != nil {
		t.Fatalf("Images.Get(tools) after v1 again = %v", err)
	}
	checkImage(t, "Images.Get(tools) after v1 again", got, want)
	list := listImages(t, s, "acme")
	if got := versions(list); !reflect.DeepEqual(got, []string{"acme/tools@1*", "acme/tools@2"}) {
		t.Errorf("Images.List(acme) after v1 again = %q, want v1 (current) then v2", got)
	}
	checkImage(t, "Images.List(acme)[1]", list[1], current(v2, false))

	// The same version twice changes nothing.
	mustPutImage(t, s, again)
	if got := versions(listImages(t, s, "acme")); !reflect.DeepEqual(got, []string{"acme/tools@1*", "acme/tools@2"}) {
		t.Errorf("Images.List(acme) after v1 a third time = %q, want it unchanged", got)
	}
}

// testImageCurrentRace: readers that look up a name while its current
// version switches back and forth always find exactly one current
// version: the switch is atomic.
func testImageCurrentRace(t *testing.T, open OpenFunc) {
	const switches, readers = 40, 4
	s := openStore(t, open)
	ctx := t.Context()
	vs := []sandbox.Image{newImage("acme", "tools", digest('1'), t0), newImage("acme", "tools", digest('2'), at(time.Second))}
	mustPutImage(t, s, vs[0])
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.Images().Get(ctx, "acme", "tools"); err != nil {
					t.Errorf("reader %d: Images.Get(tools) during a switch = %v, want a current version", r, err)
					return
				}
				list, err := s.Images().List(ctx, "acme")
				if err != nil {
					t.Errorf("reader %d: Images.List = %v", r, err)
					return
				}
				if n := strings.Count(strings.Join(versions(list), " "), "*"); n != 1 {
					t.Errorf("reader %d: Images.List during a switch = %q, want exactly one current", r, versions(list))
					return
				}
			}
		})
	}
	for i := range switches {
		if err := s.Images().Put(ctx, vs[(i+1)%2]); err != nil {
			t.Errorf("Images.Put switch %d = %v", i, err)
			break
		}
	}
	close(done)
	wg.Wait()
	got, err := s.Images().Get(ctx, "acme", "tools")
	if err != nil || got.Digest != vs[switches%2].Digest {
		t.Errorf("Images.Get(tools) after %d switches = %s, %v; want %s", switches, got.Digest, err, vs[switches%2].Digest)
	}
}

// testImageTenants: a name is a tenant's own; another tenant's image of
// the same name is another image, neither found nor switched nor listed.
func testImageTenants(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	ours := newImage("acme", "tools", digest('1'), t0)
	theirs := newImage("globex", "tools", digest('2'), at(time.Second))
	theirs.Public = true
	mustPutImage(t, s, ours)
	mustPutImage(t, s, theirs)
	for _, img := range []sandbox.Image{ours, theirs} {
		got, err := s.Images().Get(ctx, img.Tenant, "tools")
		if err != nil {
			t.Fatalf("Images.Get(%s, tools) = %v", img.Tenant, err)
		}
		checkImage(t, "Images.Get("+img.Tenant+", tools)", got, current(img, true))
	}
	for _, q := range [][3]string{{"acme", "tools", theirs.Digest}, {"globex", "tools", ours.Digest}, {"initech", "tools", ours.Digest}} {
		if _, err := s.Images().Version(ctx, q[0], q[1], q[2]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Images.Version(%s, %s, another tenant's digest) = %v, want ErrNotFound", q[0], q[1], err)
		}
	}
	if _, err := s.Images().Get(ctx, "initech", "tools"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Images.Get(initech, tools) = %v, want ErrNotFound (a public image of another tenant is not its)", err)
	}
	if got := versions(listImages(t, s, "acme")); !reflect.DeepEqual(got, []string{"acme/tools@1*"}) {
		t.Errorf("Images.List(acme) = %q, want acme's alone", got)
	}
	if got := listImages(t, s, "initech"); len(got) != 0 {
		t.Errorf("Images.List(initech) = %q, want none", versions(got))
	}
	if err := s.Images().SetPublic(ctx, "initech", "tools", true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Images.SetPublic(initech, tools) = %v, want ErrNotFound", err)
	}
	if err := s.Images().Delete(ctx, "acme", "tools", theirs.Digest); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Images.Delete(acme, tools, globex's digest) = %v, want ErrNotFound", err)
	}
	if got := versions(listImages(t, s, "globex")); !reflect.DeepEqual(got, []string{"globex/tools@2*"}) {
		t.Errorf("Images.List(globex) after acme's calls = %q, want globex's untouched", got)
	}
}

// testImagePublic: ListPublic has the current version of every public
// image of every tenant, by tenant and name; SetPublic sets every version.
func testImagePublic(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	sys := newImage(sandbox.SystemTenant, "default", digest('d'), t0)
	sys.Source, sys.Public = sandbox.ImageSourceDefault, true
	old := newImage("globex", "node", digest('1'), at(time.Second))
	old.Public = true
	cur := newImage("globex", "node", digest('2'), at(2*time.Second))
	cur.Public = true
	mine := newImage("acme", "zeta", digest('3'), at(3*time.Second))
	mine.Public = true
	private := newImage("acme", "alpha", digest('4'), at(4*time.Second))
	for _, img := range []sandbox.Image{sys, old, cur, mine, private} {
		mustPutImage(t, s, img)
	}
	listPublic := func(what string, want []string) []sandbox.Image {
		t.Helper()
		got, err := s.Images().ListPublic(ctx)
		if err != nil || got == nil {
			t.Fatalf("Images.ListPublic %s = %#v, %v", what, got, err)
		}
		if !reflect.DeepEqual(versions(got), want) {
			t.Errorf("Images.ListPublic %s = %q, want %q", what, versions(got), want)
		}
		return got
	}
	got := listPublic("", []string{"acme/zeta@3*", "globex/node@2*", "system/default@d*"})
	if len(got) == 3 {
		checkImage(t, "Images.ListPublic()[1]", got[1], current(cur, true))
	}

	if err := s.Images().SetPublic(ctx, "globex", "node", false); err != nil {
		t.Fatalf("Images.SetPublic(globex, node, false) = %v", err)
	}
	listPublic("after node went private", []string{"acme/zeta@3*", "system/default@d*"})
	for _, dg := range []string{old.Digest, cur.Digest} {
		if v, err := s.Images().Version(ctx, "globex", "node", dg); err != nil || v.Public {
			t.Errorf("Images.Version(globex, node, %s).Public after SetPublic(false) = %v, %v; want false", dg, v.Public, err)
		}
	}
	if err := s.Images().SetPublic(ctx, "acme", "alpha", true); err != nil {
		t.Fatalf("Images.SetPublic(acme, alpha, true) = %v", err)
	}
	if err := s.Images().SetPublic(ctx, "acme", "alpha", true); err != nil {
		t.Errorf("Images.SetPublic(acme, alpha, true) twice = %v, want nil", err)
	}
	listPublic("after alpha went public", []string{"acme/alpha@4*", "acme/zeta@3*", "system/default@d*"})

	// A public name without a current version lists nothing.
	if err := s.Images().Delete(ctx, "acme", "zeta", mine.Digest); err != nil {
		t.Fatal(err)
	}
	listPublic("after zeta's only version went", []string{"acme/alpha@4*", "system/default@d*"})
	if err := s.Images().SetPublic(ctx, "acme", "zeta", true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Images.SetPublic(a name with no version) = %v, want ErrNotFound", err)
	}
}

// testImageDelete: one version goes, the others stay; the current one
// leaves its name without a current version until the next Put.
func testImageDelete(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	v1 := newImage("acme", "tools", digest('1'), t0)
	v2 := newImage("acme", "tools", digest('2'), at(time.Second))
	v3 := newImage("acme", "tools", digest('3'), at(2*time.Second))
	other := newImage("acme", "other", digest('1'), at(3*time.Second)) // the same digest under another name
	for _, img := range []sandbox.Image{v1, v2, v3, other} {
		mustPutImage(t, s, img)
	}
	if err := s.Images().Delete(ctx, "acme", "tools", v1.Digest); err != nil {
		t.Fatalf("Images.Delete(v1, not current) = %v", err)
	}
	if got := versions(listImages(t, s, "acme")); !reflect.DeepEqual(got, []string{"acme/other@1*", "acme/tools@2", "acme/tools@3*"}) {
		t.Errorf("Images.List(acme) after deleting v1 = %q", got)
	}
	if err := s.Images().Delete(ctx, "acme", "tools", v3.Digest); err != nil {
		t.Fatalf("Images.Delete(v3, current) = %v", err)
	}
	if _, err := s.Images().Get(ctx, "acme", "tools"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Images.Get(tools) after its current version went = %v, want ErrNotFound (no fallback)", err)
	}
	if got, err := s.Images().Version(ctx, "acme", "tools", v2.Digest); err != nil || got.Current {
		t.Errorf("Images.Version(v2) after the current version went = current %v, %v; want kept, not current", got.Current, err)
	}
	for _, dg := range []string{v1.Digest, v3.Digest, digest('9')} {
		if err := s.Images().Delete(ctx, "acme", "tools", dg); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Images.Delete(tools, %s) = %v, want ErrNotFound", dg, err)
		}
		if _, err := s.Images().Version(ctx, "acme", "tools", dg); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Images.Version(tools, %s) = %v, want ErrNotFound", dg, err)
		}
	}
	mustPutImage(t, s, v2)
	if got, err := s.Images().Get(ctx, "acme", "tools"); err != nil || got.Digest != v2.Digest {
		t.Errorf("Images.Get(tools) after v2 is put again = %s, %v; want v2", got.Digest, err)
	}
	if got, err := s.Images().Get(ctx, "acme", "other"); err != nil || got.Digest != other.Digest {
		t.Errorf("Images.Get(other) = %s, %v; want untouched", got.Digest, err)
	}
}

// testImageList: List has every version of the tenant's images by name and
// then age, All every version of every tenant by tenant, name and age.
func testImageList(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	// Put out of every order: a name's versions are listed oldest first
	// though the newest (the current) was put first.
	for _, img := range []sandbox.Image{
		newImage("globex", "app", digest('5'), at(5*time.Second)),
		newImage("acme", "tools", digest('2'), at(2*time.Second)),
		newImage("acme", "tools", digest('1'), at(time.Second)),
		newImage("acme", "app", digest('3'), at(3*time.Second)),
		newImage("acme", "tools", digest('4'), t0),
	} {
		mustPutImage(t, s, img)
	}
	if got, want := versions(listImages(t, s, "acme")), []string{"acme/app@3*", "acme/tools@4*", "acme/tools@1", "acme/tools@2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Images.List(acme) = %q, want %q", got, want)
	}
	all, err := s.Images().All(ctx)
	if err != nil {
		t.Fatalf("Images.All = %v", err)
	}
	if got, want := versions(all), []string{"acme/app@3*", "acme/tools@4*", "acme/tools@1", "acme/tools@2", "globex/app@5*"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Images.All = %q, want %q", got, want)
	}
	for _, img := range all {
		if len(img.Layers) != 2 {
			t.Errorf("Images.All: %s has layers %q, want its two", img.Digest, img.Layers)
		}
	}
	if _, err := s.Images().Get(ctx, "acme", "nosuch"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Images.Get(nosuch) = %v, want ErrNotFound", err)
	}
}

// testImageBytes: ImageBytes sums Size over every version of the tenant's
// images, current or not, and of no other tenant's.
func testImageBytes(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	bytesOf := func(tenant string, want int64) {
		t.Helper()
		if got, err := s.Images().ImageBytes(ctx, tenant); err != nil || got != want {
			t.Errorf("Images.ImageBytes(%s) = %d, %v; want %d", tenant, got, err, want)
		}
	}
	bytesOf("acme", 0)
	sizes := map[string]int64{digest('1'): 5 << 30, digest('2'): 3 << 30, digest('3'): 7}
	for i, dg := range []string{digest('1'), digest('2')} {
		img := newImage("acme", "tools", dg, at(time.Duration(i)*time.Second))
		img.Size = sizes[dg]
		mustPutImage(t, s, img)
	}
	app := newImage("acme", "app", digest('3'), at(time.Minute))
	app.Size = sizes[digest('3')]
	mustPutImage(t, s, app)
	mustPutImage(t, s, newImage("globex", "tools", digest('1'), t0))
	bytesOf("acme", 8<<30+7)
	if err := s.Images().Delete(ctx, "acme", "tools", digest('1')); err != nil {
		t.Fatal(err)
	}
	bytesOf("acme", 3<<30+7)
	bytesOf("globex", 300<<20)
	bytesOf("initech", 0)
}
