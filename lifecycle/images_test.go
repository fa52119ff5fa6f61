package lifecycle_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/dockerfile"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
)

// adminB is tenant t2's admin, who removes t2's images.
var adminB = sandbox.Principal{Tenant: "t2", Agent: "bboss", Role: sandbox.RoleTenantAdmin}

// accounts are the files of an image with a user "app" (1234, its group
// 2345) besides root.
var accounts = map[string]string{
	"etc/passwd": "root:x:0:0:root:/root:/bin/sh\napp:x:1234:2345:app:/home/app:/bin/sh\n",
	"etc/group":  "root:x:0:\napp:x:2345:\n",
}

// baseConfig is the config of the test images: root, no working
// directory (the fake driver runs a build's commands in the step's
// working directory as a host path; "/" is harmless), two variables.
var baseConfig = v1.Config{Env: []string{"PATH=/usr/bin:/bin", "BASE=1"}}

// newImageEnv is newEnv whose node keeps images: package image over the
// env's layer store, spooling into a directory of the test's.
func newImageEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, func(o *envOptions) {
		imgs, err := image.New(image.Options{Layers: o.Layers})
		if err != nil {
			t.Fatal(err)
		}
		o.Images, o.ImageDir = imgs, t.TempDir()
	})
}

// layer is an image layer holding files (path → content).
func layer(t *testing.T, files ...map[string]string) v1.Layer {
	t.Helper()
	all := map[string]string{}
	for _, f := range files {
		maps.Copy(all, f)
	}
	return registry.Layer(t, compression.GZip, all)
}

// ociImage is an image of layers (bottom first) for this host, whose
// config is cfg.
func ociImage(t *testing.T, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	p := registry.HostPlatform()
	cf.OS, cf.Architecture, cf.Config = p.OS, p.Architecture, cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// archive is img as `docker save` writes it.
func archive(t *testing.T, img v1.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tarball.Write(name.MustParseReference("app:1.0"), img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// importImage imports img as p's image called name.
func (e *env) importImage(t *testing.T, p sandbox.Principal, name string, img v1.Image) sandbox.Image {
	t.Helper()
	got, err := e.svc.Images.Import(t.Context(), p, name, bytes.NewReader(archive(t, img)), nil)
	if err != nil {
		t.Fatalf("Import(%s as %s) = %v", name, p.Agent, err)
	}
	return got
}

// createFrom makes p's sandbox name from image and wants it created.
func (e *env) createFrom(t *testing.T, p sandbox.Principal, name, image string) sandbox.Sandbox {
	t.Helper()
	sb, created, err := e.svc.Sandboxes.Create(t.Context(), p, sandbox.CreateRequest{Name: name, Image: image})
	if err != nil || !created {
		t.Fatalf("Create(%s, %s, image %s) = %v, %v; want a new sandbox", p.Agent, name, image, created, err)
	}
	return sb
}

// rootFile reads the file at path (from the root) of the running
// sandbox sb, or says why it cannot.
func (e *env) rootFile(t *testing.T, sb sandbox.Sandbox, path string) string {
	t.Helper()
	spec, ok := e.drv.Spec(sb.ID)
	if !ok {
		t.Fatalf("the driver does not know sandbox %s", sb.Name)
	}
	b, err := os.ReadFile(filepath.Join(spec.RootFS, path))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// held reports whether the layer store holds key.
func (e *env) held(t *testing.T, key string) bool {
	t.Helper()
	_, err := e.lay.Stat(t.Context(), key)
	if err != nil && !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("Stat(%s) = %v", key, err)
	}
	return err == nil
}

// wantKeys wants the layer store to hold every key of kept and none of
// gone.
func (e *env) wantKeys(t *testing.T, what string, kept, gone []string) {
	t.Helper()
	for _, k := range kept {
		if !e.held(t, k) {
			t.Errorf("%s: the layer store lost %s", what, k)
		}
	}
	for _, k := range gone {
		if e.held(t, k) {
			t.Errorf("%s: the layer store still holds %s", what, k)
		}
	}
}

// versions are the versions of p's tenant's image name that List shows,
// by digest, with whether each is current.
func (e *env) versions(t *testing.T, p sandbox.Principal, name string) map[string]bool {
	t.Helper()
	all, err := e.svc.Images.List(t.Context(), p)
	if err != nil {
		t.Fatalf("List(%s) = %v", p.Agent, err)
	}
	got := map[string]bool{}
	for _, img := range all {
		if img.Name == name && img.Tenant == p.Home() {
			got[img.Digest] = img.Current
		}
	}
	return got
}

// wantNotFound wants err to be the not_found of an image called name,
// word for word what a name no image has gets.
func wantNotFound(t *testing.T, call string, err error, name string) {
	t.Helper()
	se := wantCode(t, call, err, sandbox.CodeNotFound)
	if want := fmt.Sprintf("image %q not found", name); se.Message != want || len(se.Details) != 0 {
		t.Errorf("%s = %q %v; want %q, as for a name no image has", call, se.Message, se.Details, want)
	}
}

// TestImageTenantVisibility: a tenant's image is not_found to another
// tenant whatever it is asked for by (its name, the name with the
// owner's tenant or its digest, its layer keys), as a name no image has;
// an operator's public image serves every tenant until it is private
// again; a tenant's own image shadows a public one of its name for that
// tenant only.
func TestImageTenantVisibility(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	tools := e.importImage(t, a1, "tools", ociImage(t, baseConfig, layer(t, accounts, map[string]string{"etc/which": "t1's tools\n"})))
	if got, err := e.svc.Images.Get(ctx, a2, "tools"); err != nil || got.Digest != tools.Digest {
		t.Fatalf("Get(tools) as t1's a2 = %+v, %v; want t1's image", got, err)
	}
	guesses := []string{"tools", "t1/tools", "tools@" + tools.Digest, tools.Key(), tools.Layers[0], "nothing-at-all"}
	for _, guess := range guesses {
		_, err := e.svc.Images.Get(ctx, b1, guess)
		wantNotFound(t, "Get("+guess+") as t2's b1", err, guess)
		_, _, err = e.svc.Sandboxes.Create(ctx, b1, sandbox.CreateRequest{Name: "x", Image: guess})
		wantNotFound(t, "Create(image "+guess+") as t2's b1", err, guess)
		var out bytes.Buffer
		err = e.svc.Images.Export(ctx, b1, guess, &out)
		if wantNotFound(t, "Export("+guess+") as t2's b1", err, guess); out.Len() != 0 {
			t.Errorf("Export(%s) as t2's b1 wrote %d bytes", guess, out.Len())
		}
		if err := e.svc.Images.Remove(ctx, adminB, guess); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Errorf("Remove(%s) as t2's admin = %v; want not_found", guess, err)
		}
	}
	// A layer key is no image's name, for its own tenant either.
	_, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "x", Image: tools.Key()})
	wantNotFound(t, "Create(image "+tools.Key()+") as t1's a1", err, tools.Key())
	if len(e.versions(t, b1, "tools")) != 0 || e.listed(t, b1, "tools") {
		t.Error("t2's List shows t1's image tools")
	}
	if _, err := e.svc.Images.Get(ctx, a1, "tools"); err != nil {
		t.Errorf("Get(tools) as t1's a1 after t2's tries = %v", err)
	}

	// The operators' image: private, then public, then private again.
	base := e.importImage(t, op, "base", ociImage(t, baseConfig, layer(t, accounts, map[string]string{"etc/which": "the operators' base\n"})))
	_, err = e.svc.Images.Get(ctx, a1, "base")
	wantNotFound(t, "Get(base) as t1's a1 before it is public", err, "base")
	if img, err := e.svc.Images.SetPublic(ctx, op, "base", true); err != nil || !img.Public {
		t.Fatalf("SetPublic(base) = %+v, %v", img, err)
	}
	fromPublic := map[sandbox.Principal]sandbox.Sandbox{}
	for _, p := range []sandbox.Principal{a1, b1} {
		if got, err := e.svc.Images.Get(ctx, p, "base"); err != nil || got.Tenant != sandbox.SystemTenant || got.Digest != base.Digest {
			t.Errorf("Get(base) as %s/%s = %+v, %v; want the public one", p.Tenant, p.Agent, got, err)
		}
		sb := e.createFrom(t, p, "pub", "base")
		if got := e.rootFile(t, sb, "etc/which"); got != "the operators' base\n" || sb.ImageDigest != base.Digest {
			t.Errorf("a sandbox of %s from the public base holds %q (version %s)", p.Tenant, got, sb.ImageDigest)
		}
		var out bytes.Buffer
		if err := e.svc.Images.Export(ctx, p, "base", &out); err != nil || out.Len() == 0 {
			t.Errorf("Export(base) as %s = %d bytes, %v", p.Tenant, out.Len(), err)
		}
		if !e.listed(t, p, "base") {
			t.Errorf("%s's List does not show the public base", p.Tenant)
		}
		fromPublic[p] = sb
	}
	// t1's admin may not remove it: to t1 it is not its own.
	if err := e.svc.Images.Remove(ctx, admin, "base"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Remove(base) as t1's admin = %v; want not_found", err)
	}

	// t2's own base shadows the public one, for t2 only.
	own := e.importImage(t, adminB, "base", ociImage(t, baseConfig, layer(t, accounts, map[string]string{"etc/which": "t2's base\n"})))
	for _, c := range []struct {
		p            sandbox.Principal
		name, tenant string
		digest, file string
	}{
		{b1, "own", "t2", own.Digest, "t2's base\n"},
		{a1, "still", sandbox.SystemTenant, base.Digest, "the operators' base\n"},
	} {
		if got, err := e.svc.Images.Get(ctx, c.p, "base"); err != nil || got.Tenant != c.tenant {
			t.Errorf("Get(base) as %s = %+v, %v; want tenant %s's", c.p.Tenant, got, err, c.tenant)
		}
		sb := e.createFrom(t, c.p, c.name, "base")
		if got := e.rootFile(t, sb, "etc/which"); got != c.file || sb.ImageDigest != c.digest {
			t.Errorf("%s's sandbox from base holds %q (version %s); want %q (%s)", c.p.Tenant, got, sb.ImageDigest, c.file, c.digest)
		}
	}

	// Private again: t1 no longer finds it; t2 keeps its own; the
	// sandboxes made from it keep their version.
	if _, err := e.svc.Images.SetPublic(ctx, op, "base", false); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Images.Get(ctx, a1, "base")
	wantNotFound(t, "Get(base) as t1's a1 once private", err, "base")
	_, _, err = e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "late", Image: "base"})
	wantNotFound(t, "Create(image base) as t1's a1 once private", err, "base")
	if e.listed(t, a1, "base") {
		t.Error("t1's List shows the base made private")
	}
	if got, err := e.svc.Images.Get(ctx, b1, "base"); err != nil || got.Tenant != "t2" {
		t.Errorf("Get(base) as t2's b1 once the public one is private = %+v, %v; want its own", got, err)
	}
	if out, _ := e.exec(t, a1, "pub", "cat /etc/hostname 2>/dev/null; echo alive"); !strings.HasSuffix(out, "alive\n") {
		t.Errorf("t1's sandbox from the base made private: exec = %q", out)
	}
	if row := e.row(t, fromPublic[a1].Name); row.ImageDigest != base.Digest || row.ImageKey != base.Key() {
		t.Errorf("t1's sandbox from the base made private records %s %s; want %s %s", row.ImageDigest, row.ImageKey, base.Digest, base.Key())
	}
	// The operators may not remove it while any tenant's sandbox made
	// from it is there, and are told which.
	err = e.svc.Images.Remove(ctx, op, "base")
	if se := wantCode(t, "Remove(base) as the operator", err, sandbox.CodeFailedPrecondition); se.Details["sandbox"] != "t1/"+fromPublic[a1].Name {
		t.Errorf("Remove(base) as the operator = %q %v; want it to name t1/%s", se.Message, se.Details, fromPublic[a1].Name)
	}
}

// listed reports whether p's List shows an image called name.
func (e *env) listed(t *testing.T, p sandbox.Principal, name string) bool {
	t.Helper()
	all, err := e.svc.Images.List(t.Context(), p)
	if err != nil {
		t.Fatalf("List(%s) = %v", p.Agent, err)
	}
	return slices.ContainsFunc(all, func(img sandbox.Image) bool { return img.Name == name })
}

// TestImageVersions: a tag pulled again with new content, or a name
// imported again, is a new current version; a sandbox of the old one
// keeps its version and its root; once no sandbox uses the old version,
// the next image call collects it and the layer keys only it used, and
// the new version's stay.
func TestImageVersions(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	e := newImageEnv(t)
	ctx := t.Context()
	shared := layer(t, accounts)
	ref := reg.Push(t, "app:1.0", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/version": "1\n"})))
	// The registry is on loopback: t1's agents may pull from it once a
	// tenant admin has logged in to it (anonymously).
	if _, err := e.svc.Images.Pull(ctx, a1, ref, lifecycle.PullOptions{}); !sandbox.IsCode(err, sandbox.CodePermissionDenied) {
		t.Fatalf("Pull from loopback without a login = %v; want permission_denied", err)
	}
	if _, err := e.svc.Images.Login(ctx, admin, sandbox.RegistryLogin{Host: reg.Host}, nil); err != nil {
		t.Fatal(err)
	}
	old, err := e.svc.Images.Pull(ctx, a1, ref, lifecycle.PullOptions{})
	if err != nil {
		t.Fatalf("Pull(%s) = %v", ref, err)
	}
	sbOld := e.createFrom(t, a1, "old", ref)
	if sbOld.ImageDigest != old.Digest || sbOld.ImageKey != old.Key() {
		t.Fatalf("a sandbox of %s records %s %s; want %s %s", ref, sbOld.ImageDigest, sbOld.ImageKey, old.Digest, old.Key())
	}
	if again, err := e.svc.Images.Pull(ctx, a1, ref, lifecycle.PullOptions{}); err != nil || again.Digest != old.Digest {
		t.Errorf("Pull(%s) again, unchanged = %+v, %v; want the same version", ref, again, err)
	}
	if got := e.versions(t, a1, ref); len(got) != 1 {
		t.Errorf("versions after pulling the same content twice = %v; want one", got)
	}

	reg.Push(t, "app:1.0", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/version": "2\n"})))
	cur, err := e.svc.Images.Pull(ctx, a1, ref, lifecycle.PullOptions{})
	if err != nil || cur.Digest == old.Digest || !cur.Current {
		t.Fatalf("Pull(%s) of new content = %+v, %v; want a new current version", ref, cur, err)
	}
	if got := e.versions(t, a1, ref); len(got) != 2 || got[old.Digest] || !got[cur.Digest] {
		t.Errorf("versions = %v; want %s (not current) and %s (current)", got, old.Digest, cur.Digest)
	}
	if got, err := e.svc.Images.Get(ctx, a1, ref); err != nil || got.Digest != cur.Digest {
		t.Errorf("Get(%s) = %+v, %v; want the new version", ref, got, err)
	}
	sbNew := e.createFrom(t, a1, "new", ref)
	if got := e.rootFile(t, sbNew, "etc/version"); got != "2\n" || sbNew.ImageDigest != cur.Digest {
		t.Errorf("a new sandbox of %s holds version %q (%s); want 2 (%s)", ref, got, sbNew.ImageDigest, cur.Digest)
	}
	row := e.row(t, "old")
	if row.ImageDigest != old.Digest || row.ImageKey != old.Key() || e.rootFile(t, row, "etc/version") != "1\n" {
		t.Errorf("the old sandbox after the new version: %s %s, etc/version %q; want %s %s, 1",
			row.ImageDigest, row.ImageKey, e.rootFile(t, row, "etc/version"), old.Digest, old.Key())
	}
	if shared := old.Layers[0]; shared != cur.Layers[0] {
		t.Fatalf("the versions' first layers are %s and %s; want one shared key", shared, cur.Layers[0])
	}
	e.wantKeys(t, "with the old version in use", append(old.Layers, cur.Layers...), nil)

	if err := e.svc.Sandboxes.Destroy(ctx, a1, "old"); err != nil {
		t.Fatal(err)
	}
	// The next image call collects what the old version alone held.
	if _, err := e.svc.Images.Pull(ctx, a1, ref, lifecycle.PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.versions(t, a1, ref); len(got) != 1 || !got[cur.Digest] {
		t.Errorf("versions once the old one is unused = %v; want only %s", got, cur.Digest)
	}
	e.wantKeys(t, "once the old version is unused", cur.Layers, old.Layers[1:])
	if out, _ := e.exec(t, a1, "new", "cat /etc/hostname 2>/dev/null; echo alive"); !strings.HasSuffix(out, "alive\n") {
		t.Errorf("the sandbox of the new version: exec = %q", out)
	}

	// An import under a name in use is a new version too; with no
	// sandbox on the old one, the import itself collects it.
	first := e.importImage(t, a1, "tools", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/tools": "1\n"})))
	second := e.importImage(t, a1, "tools", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/tools": "2\n"})))
	if got := e.versions(t, a1, "tools"); second.Digest == first.Digest || len(got) != 1 || !got[second.Digest] {
		t.Errorf("versions of tools after a second import = %v; want only the second, %s", got, second.Digest)
	}
	e.wantKeys(t, "after importing tools again", second.Layers, first.Layers[1:])
}

// TestImageRemove: removal is refused while a sandbox uses any version
// (failed_precondition naming the sandbox), and only a tenant admin may;
// once the sandbox is gone it removes every version and the layers no
// other image uses, and keeps those another image shares.
func TestImageRemove(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	shared := layer(t, accounts)
	app1 := e.importImage(t, a1, "app", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/app": "1\n"})))
	other := e.importImage(t, a1, "other", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/other": "yes\n"})))
	user := e.createFrom(t, a1, "user", "app")
	app2 := e.importImage(t, a1, "app", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/app": "2\n"})))

	// The sandbox uses the old version, not the current one: still refused.
	err := e.svc.Images.Remove(ctx, admin, "app")
	se := wantCode(t, "Remove(app) while a sandbox uses its old version", err, sandbox.CodeFailedPrecondition)
	if !strings.Contains(se.Message, user.Name) || se.Details["sandbox"] != user.Name || se.Hint == "" {
		t.Errorf("Remove(app) in use = %q %v (hint %q); want the message and details to name %s, and a hint", se.Message, se.Details, se.Hint, user.Name)
	}
	if err := e.svc.Images.Remove(ctx, a1, "app"); !sandbox.IsCode(err, sandbox.CodePermissionDenied) {
		t.Errorf("Remove(app) as an agent = %v; want permission_denied", err)
	}
	if got := e.versions(t, a1, "app"); len(got) != 2 {
		t.Errorf("versions of app after refused removals = %v; want both", got)
	}
	e.wantKeys(t, "after refused removals", append(app1.Layers, app2.Layers...), nil)

	if err := e.svc.Sandboxes.Destroy(ctx, a1, "user"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Images.Remove(ctx, admin, "app"); err != nil {
		t.Fatalf("Remove(app) once unused = %v", err)
	}
	_, err = e.svc.Images.Get(ctx, a1, "app")
	wantNotFound(t, "Get(app) after its removal", err, "app")
	if got := e.versions(t, a1, "app"); len(got) != 0 {
		t.Errorf("versions of app after its removal = %v", got)
	}
	e.wantKeys(t, "after removing app", other.Layers, []string{app1.Layers[1], app1.Key(), app2.Layers[1], app2.Key()})
	if sb := e.createFrom(t, a1, "still", "other"); e.rootFile(t, sb, "etc/other") != "yes\n" {
		t.Errorf("a sandbox of other after removing app holds etc/other %q", e.rootFile(t, sb, "etc/other"))
	}
	if err := e.svc.Images.Remove(ctx, admin, "app"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Remove(app) again = %v; want not_found", err)
	}
}

// TestImageRemoveOtherUsers: the sandboxes that count against a removal
// are those made from the image removed: another tenant's sandbox of its
// own image with the same content, or one of the tenant's other image of
// the same content, neither blocks it nor is named to it, and keeps its
// layers.
func TestImageRemoveOtherUsers(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	img := ociImage(t, baseConfig, layer(t, accounts, map[string]string{"etc/app": "same\n"}))
	mine := e.importImage(t, a1, "app", img)
	twin := e.importImage(t, a1, "twin", img)
	theirs := e.importImage(t, b1, "theirs", img)
	if mine.Key() != theirs.Key() || mine.Key() != twin.Key() {
		t.Fatalf("the same content imported thrice has keys %s, %s, %s; want one", mine.Key(), twin.Key(), theirs.Key())
	}
	secret := e.createFrom(t, b1, "secret", "theirs")
	e.createFrom(t, a1, "of-twin", "twin")
	if err := e.svc.Images.Remove(ctx, admin, "app"); err != nil {
		t.Errorf("Remove(app) while other images' sandboxes use the same content = %v; want it removed", err)
		if strings.Contains(err.Error(), secret.Name) {
			t.Errorf("t1's removal names t2's sandbox: %v", err)
		}
	}
	e.wantKeys(t, "after removing app", theirs.Layers, nil)
	if got := e.rootFile(t, e.row(t, secret.Name), "etc/app"); got != "same\n" {
		t.Errorf("t2's sandbox after t1's removal holds %q", got)
	}
	for _, c := range []struct {
		p    sandbox.Principal
		name string
	}{{b1, "theirs"}, {a1, "twin"}} {
		if _, err := e.svc.Images.Get(ctx, c.p, c.name); err != nil {
			t.Errorf("Get(%s) after removing app = %v", c.name, err)
		}
	}
	// Each image's own sandbox still blocks its removal.
	for _, c := range []struct {
		p          sandbox.Principal
		image, ref string
	}{{adminB, "theirs", "agent-b1-secret"}, {admin, "twin", "agent-a1-of-twin"}} {
		err := e.svc.Images.Remove(ctx, c.p, c.image)
		if se := wantCode(t, "Remove("+c.image+")", err, sandbox.CodeFailedPrecondition); se.Details["sandbox"] != c.ref {
			t.Errorf("Remove(%s) = %q %v; want it to name %s", c.image, se.Message, se.Details, c.ref)
		}
	}
}

// TestRecoverCollectsImageLeftovers: a daemon's start removes what a
// killed pull, import or build left in the layer store (a layer being
// unpacked, a top being made, a layer and a build step's root no image
// uses), and keeps the default image, the images in the catalog and
// what the sandboxes use.
func TestRecoverCollectsImageLeftovers(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	shared := layer(t, accounts)
	used := e.importImage(t, a1, "used", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/used": "yes\n"})))
	idle := e.importImage(t, a1, "idle", ociImage(t, baseConfig, shared, layer(t, map[string]string{"etc/idle": "yes\n"})))
	box := e.createFrom(t, a1, "box", "used")
	hex := func(c string) string { return strings.Repeat(c, 64) }
	leftovers := []string{"unpack-" + hex("a"), "imgtmp-" + hex("b"), "layer-" + hex("c"), "img-" + hex("d")}
	for _, key := range leftovers[:2] {
		if _, err := e.lay.Prepare(ctx, key, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range leftovers[2:] {
		if err := e.lay.Import(ctx, key, fstest.MapFS{"etc/leftover": {Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	e.wantKeys(t, "before Recover", leftovers, nil)

	svc := e.restart(t)
	if err := svc.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	e.wantKeys(t, "after Recover", append(append([]string{"default"}, used.Layers...), idle.Layers...), leftovers)
	e.svc = svc
	if out, _ := e.exec(t, a1, "box", `cat "$HOME/../etc/used"`); out != "yes\n" {
		t.Errorf("the sandbox of an image after Recover: cat /etc/used = %q", out)
	}
	e.wantHeld(t, box.ID)
	for _, image := range []string{"used", "idle", ""} {
		e.createFrom(t, a1, "after-"+cmp.Or(image, "default"), image)
	}
}

// diskTenant creates tenant name whose whole budget is limit bytes of
// disk (and all the CPU and memory one could want), and returns its agent
// c1.
func (e *env) diskTenant(t *testing.T, name string, limit int64) sandbox.Principal {
	t.Helper()
	quota, share, all := 10, 100, 100
	if _, err := e.svc.Tenancy.CreateTenant(t.Context(), op, sandbox.Tenant{Name: name,
		Allocation: sandbox.Resources{MilliCPU: 1 << 30, MemoryBytes: 1 << 50, DiskBytes: limit},
		Policy:     sandbox.PolicyOverrides{AgentQuota: &quota, AgentSharePercent: &share, BudgetPercent: &all}}); err != nil {
		t.Fatal(err)
	}
	return sandbox.Principal{Tenant: name, Agent: "c1", Role: sandbox.RoleAgent}
}

// TestImageBudget: a tenant's images count in its disk budget with its
// sandboxes: an image that does not fit in what is left is refused
// (budget_exceeded, with the numbers) and leaves no layer behind, and a
// create counts the bytes of the tenant's images.
func TestImageBudget(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	const kib = 1 << 10
	small := sandbox.Sizes()["small"].DiskBytes
	limit := small + 256*kib
	c1 := e.diskTenant(t, "t3", limit)
	adminC := sandbox.Principal{Tenant: "t3", Agent: "cboss", Role: sandbox.RoleTenantAdmin}
	random := func(size int) v1.Image {
		return ociImage(t, baseConfig, registry.RandomLayer(t, compression.GZip, size))
	}

	a := e.importImage(t, c1, "a", random(128*kib))
	if a.Size < 128*kib {
		t.Fatalf("image a of 128 KiB has Size %d", a.Size)
	}
	e.createFrom(t, c1, "box", "")
	big := random(192 * kib)
	_, err := e.svc.Images.Import(ctx, c1, "b", bytes.NewReader(archive(t, big)), nil)
	se := wantCode(t, "Import(b) over the budget", err, sandbox.CodeBudgetExceeded)
	if se.Details["resource"] != "disk" || se.Details["limit"] != limit || se.Details["used"] != small+a.Size ||
		se.Details["requested"].(int64) <= limit-small-a.Size || se.Hint == "" {
		t.Errorf("Import(b) over the budget = %q %v; want disk, limit %d, used %d, requested over what is left", se.Message, se.Details, limit, small+a.Size)
	}
	if _, err := e.svc.Images.Get(ctx, c1, "b"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Get(b) after its refusal = %v; want not_found", err)
	}
	layers, err := big.Layers()
	if err != nil {
		t.Fatal(err)
	}
	diffID, err := layers[0].DiffID()
	if err != nil {
		t.Fatal(err)
	}
	e.wantKeys(t, "after an image refused over the budget", a.Layers, []string{"layer-" + diffID.Hex})

	// The image's bytes count against a create: with b, the tenant's
	// images and a small sandbox do not fit.
	if err := e.svc.Sandboxes.Destroy(ctx, c1, "box"); err != nil {
		t.Fatal(err)
	}
	b := e.importImage(t, c1, "b", big)
	_, _, err = e.svc.Sandboxes.Create(ctx, c1, sandbox.CreateRequest{Name: "box"})
	wantCode(t, fmt.Sprintf("Create(small) with %d bytes of images", a.Size+b.Size), err, sandbox.CodeBudgetExceeded)
	if err := e.svc.Images.Remove(ctx, adminC, "b"); err != nil {
		t.Fatal(err)
	}
	e.createFrom(t, c1, "box", "")

	// The operators' images count against no tenant.
	if _, err := e.svc.Images.Import(ctx, op, "huge", bytes.NewReader(archive(t, random(512*kib))), nil); err != nil {
		t.Errorf("Import(huge) as the operator = %v", err)
	}
}

// buildContext is a build context directory holding files (path →
// content).
func buildContext(t *testing.T, files map[string]string) *dockerfile.Context {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bc, err := dockerfile.DirContext(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	return bc
}

// build builds p's image name from the Dockerfile df with args in bc,
// and returns its step events with the result.
func (e *env) build(t *testing.T, p sandbox.Principal, name, df string, args map[string]string, bc *dockerfile.Context) (sandbox.Image, []sandbox.ImageProgress, error) {
	t.Helper()
	var steps []sandbox.ImageProgress
	img, err := e.svc.Images.Build(t.Context(), p, lifecycle.BuildRequest{Name: name, Dockerfile: strings.NewReader(df), BuildArgs: args, Context: bc},
		func(ev sandbox.ImageProgress) {
			if ev.Phase == "step" {
				steps = append(steps, ev)
			}
		})
	return img, steps, err
}

// TestImageBuild builds an image twice from a Dockerfile whose last line
// changes: the second build finds every step before it in the cache and
// runs only the last. The image has the config the Dockerfile says, a
// COPY --chown by name is the owner the image's /etc/passwd names, and a
// sandbox made from it runs so. The fake driver runs RUN on the host (as
// the test's user, in the step's working directory as a host path): the
// commands write only to $HOME, inside the root, and to a log of the
// test's, and the WORKDIR is a directory the host has too.
func TestImageBuild(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	e.importImage(t, a1, "base", ociImage(t, baseConfig, layer(t, accounts)))
	bc := buildContext(t, map[string]string{"hello.txt": "hello from the context\n"})
	log, wd := filepath.Join(t.TempDir(), "runs"), t.TempDir()
	args := map[string]string{"LOG": log, "WD": wd}
	dockerfileEnding := func(last string) string {
		return `FROM base
ARG LOG
ENV GREETING=hello
COPY --chown=app hello.txt /srv/hello.txt
RUN echo "$GREETING" > "${HOME:?}/greeting" && echo first >> "$LOG"
USER app
LABEL team=infra
CMD ["serve", "--port", "8080"]
ARG WD
WORKDIR $WD
RUN echo ` + last + ` >> "$LOG"
`
	}
	first, steps, err := e.build(t, a1, "app", dockerfileEnding("last-1"), args, bc)
	if err != nil {
		t.Fatalf("Build(app) = %v", err)
	}
	// Only the steps that change no root count as cached the first time.
	wantCached(t, "the first build", steps, []bool{true, true, false, false, true, true, true, true, false, false})
	img, steps, err := e.build(t, a1, "app", dockerfileEnding("last-2"), args, bc)
	if err != nil {
		t.Fatalf("Build(app) again = %v", err)
	}
	wantCached(t, "the build with its last line changed", steps, []bool{true, true, true, true, true, true, true, true, true, false})
	if b, err := os.ReadFile(log); string(b) != "first\nlast-1\nlast-2\n" {
		t.Errorf("the RUN steps that ran wrote %q, %v; want first, last-1, then only last-2", b, err)
	}
	if got := e.versions(t, a1, "app"); img.Digest == first.Digest || len(got) != 1 || !got[img.Digest] {
		t.Errorf("versions of app after the rebuild = %v; want only the new one, %s", got, img.Digest)
	}

	cfg := img.Config
	if img.Name != "app" || img.Tenant != "t1" || img.Source != sandbox.ImageSourceBuild || !img.Current ||
		!slices.Contains(cfg.Env, "GREETING=hello") || !slices.Contains(cfg.Env, "BASE=1") || slices.ContainsFunc(cfg.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "LOG=") || strings.HasPrefix(kv, "WD=")
	}) || cfg.WorkingDir != wd || cfg.User != "app" || cfg.UID != 1234 || cfg.GID != 2345 || cfg.Home != "/home/app" ||
		!slices.Equal(cfg.Cmd, []string{"serve", "--port", "8080"}) || !maps.Equal(cfg.Labels, map[string]string{"team": "infra"}) {
		t.Errorf("the built image = %+v; want what the Dockerfile says", img)
	}
	info, err := e.lay.Stat(ctx, img.Key())
	if err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(info.Path, "srv/hello.txt"), "hello from the context\n", 1234, 2345)
	wantFile(t, filepath.Join(info.Path, "root/greeting"), "hello\n", 0, 0)

	sb := e.createFrom(t, a1, "svc", "app")
	spec, _ := e.drv.Spec(sb.ID)
	if spec.UID != 1234 || spec.GID != 2345 || spec.Home != "/home/app" || spec.WorkDir != wd || !slices.Contains(spec.Env, "GREETING=hello") {
		t.Errorf("a sandbox of the built image runs with %+v; want its config %+v", spec, cfg)
	}
	if out, _ := e.exec(t, a1, "svc", `echo "$GREETING"`); out != "hello\n" {
		t.Errorf("echo $GREETING in a sandbox of the built image = %q", out)
	}
	e.wantOnly(t, a1, sb.Name)
}

// wantCached wants steps to be one step event per step, in order, with
// Cached as cached says.
func wantCached(t *testing.T, what string, steps []sandbox.ImageProgress, cached []bool) {
	t.Helper()
	var got []bool
	for i, ev := range steps {
		if ev.Step != i+1 {
			t.Errorf("%s: step event %d is for step %d (%q)", what, i+1, ev.Step, ev.Text)
		}
		got = append(got, ev.Cached)
	}
	if !slices.Equal(got, cached) {
		t.Errorf("%s: the steps' Cached = %v; want %v", what, got, cached)
	}
}

// wantFile wants the file at path to hold content and be owned by uid
// and gid.
func wantFile(t *testing.T, path, content string, uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(path)
	fi, serr := os.Stat(path)
	if err != nil || serr != nil || string(b) != content {
		t.Errorf("%s holds %q (%v, %v); want %q", path, b, err, serr, content)
		return
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("%s is owned by %d:%d; want %d:%d", path, st.Uid, st.Gid, uid, gid)
	}
}

// wantOnly wants p to have exactly the sandboxes names (stored names).
func (e *env) wantOnly(t *testing.T, p sandbox.Principal, names ...string) {
	t.Helper()
	sbs, err := e.svc.Sandboxes.List(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sb := range sbs {
		got = append(got, sb.Name)
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Errorf("%s's sandboxes = %q; want %q", p.Agent, got, names)
	}
}

// TestImageBuildErrors: a failed build says which step of which line
// failed and why (a RUN's exit code and the end of its output), records
// no image and leaves no sandbox behind.
func TestImageBuildErrors(t *testing.T) {
	e := newImageEnv(t)
	e.importImage(t, a1, "base", ociImage(t, baseConfig, layer(t, accounts)))
	bc := buildContext(t, map[string]string{"hello.txt": "hello\n"})
	for _, tt := range []struct {
		name, dockerfile string
		p                sandbox.Principal
		code             sandbox.Code
		says, not        []string
		details          map[string]any
	}{{
		name:       "a RUN that fails",
		dockerfile: "FROM base\nENV A=head B=tail\nRUN echo \"$A-mark\"; head -c 3000 /dev/zero | tr '\\0' x; echo; echo \"$B-mark\"; exit 7\n",
		p:          a1, code: sandbox.CodeFailedPrecondition,
		says:    []string{`step 2/2 (line 3): RUN echo "$A-mark"`, "exit code 7", "tail-mark"},
		not:     []string{"head-mark"},
		details: map[string]any{"exit_code": 7},
	}, {
		name:       "a COPY --chown to a user the image does not have",
		dockerfile: "FROM base\nRUN true\nCOPY --chown=nobody-here hello.txt /x\n",
		p:          a1, code: sandbox.CodeInvalidArgument,
		says: []string{"step 2/2 (line 3): COPY --chown=nobody-here", "nobody-here"},
	}, {
		name:       "FROM another tenant's image",
		dockerfile: "FROM base\nRUN true\n",
		p:          b1, code: sandbox.CodeNotFound,
		says: []string{`image "base" not found`},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := e.build(t, tt.p, "bad", tt.dockerfile, nil, bc)
			se := wantCode(t, "Build", err, tt.code)
			for _, s := range tt.says {
				if !strings.Contains(se.Message, s) {
					t.Errorf("Build = %q; want it to say %q", se.Message, s)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(se.Message, s) {
					t.Errorf("Build = %q; want no %q in it", se.Message, s)
				}
			}
			for k, v := range tt.details {
				if se.Details[k] != v {
					t.Errorf("Build's details = %v; want %s: %v", se.Details, k, v)
				}
			}
			if _, err := e.svc.Images.Get(t.Context(), tt.p, "bad"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
				t.Errorf("Get(bad) after a failed build = %v; want not_found", err)
			}
			e.wantOnly(t, tt.p)
		})
	}
}

// TestImageFromSandbox: an image made from a live sandbox holds its disk
// now, and the checkpoint taken for it is gone afterwards; one made from
// a named checkpoint holds that checkpoint's content, not what was
// written since, and leaves the checkpoint. Both run as the sandbox's
// image does, count the bytes the sandbox wrote, and outlive the
// sandbox. Another tenant's sandbox is not_found, as one that does not
// exist, and is left untouched.
func TestImageFromSandbox(t *testing.T) {
	e := newImageEnv(t)
	ctx := t.Context()
	base := e.importImage(t, a1, "base", ociImage(t, v1.Config{Env: baseConfig.Env, User: "app"}, layer(t, accounts)))
	box := e.createFrom(t, a1, "box", "base")
	home := e.drv.Home(box.ID)
	const blob = 96 << 10
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(home, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("blob", strings.Repeat("b", blob))
	write("notes", "before")
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, a1, "box", sandbox.CheckpointRequest{Label: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	write("notes", "after")

	for _, c := range []struct {
		p        sandbox.Principal
		ref, ck  string
		notFound string
	}{
		{b1, "t1/" + box.Name, "", "t1/agent-a1-nope"},
		{b1, "t1/" + box.Name, ck.ID, "t1/agent-a1-nope"},
	} {
		_, err := e.svc.Images.FromSandbox(ctx, c.p, "x", c.ref, c.ck)
		se := wantCode(t, "FromSandbox("+c.ref+"@"+c.ck+") as t2's b1", err, sandbox.CodeNotFound)
		_, err = e.svc.Images.FromSandbox(ctx, c.p, "x", c.notFound, c.ck)
		if nothing := wantCode(t, "FromSandbox("+c.notFound+")", err, sandbox.CodeNotFound); strings.ReplaceAll(se.Message, c.ref, "REF") != strings.ReplaceAll(nothing.Message, c.notFound, "REF") {
			t.Errorf("FromSandbox(%s) as t2's b1 = %q; want what a sandbox that does not exist gets, %q", c.ref, se.Message, nothing.Message)
		}
	}
	if e.listed(t, b1, "x") {
		t.Error("t2 has an image x from t1's sandbox")
	}
	e.wantCheckpoints(t, box, ck.ID)

	now, err := e.svc.Images.FromSandbox(ctx, a1, "now", "box", "")
	if err != nil {
		t.Fatalf("FromSandbox(now, box) = %v", err)
	}
	if now.Source != sandbox.ImageSourceSandbox || now.Ref != "t1/"+box.Name || now.Config.User != "app" || now.Config.UID != 1234 || !slices.Contains(now.Config.Env, "BASE=1") {
		t.Errorf("the image from box = %+v; want its source, and box's image's config", now)
	}
	e.wantCheckpoints(t, box, ck.ID) // the one taken for the image is gone
	then, err := e.svc.Images.FromSandbox(ctx, a1, "then", "box", ck.ID)
	if err != nil || then.Ref != "t1/"+box.Name+"@"+ck.ID {
		t.Fatalf("FromSandbox(then, box, %s) = %+v, %v", ck.ID, then, err)
	}
	e.wantCheckpoints(t, box, ck.ID)
	for _, img := range []sandbox.Image{now, then} {
		if img.Size < base.Size+blob {
			t.Errorf("image %s from box has Size %d; want at least its image's %d and the %d bytes box wrote", img.Name, img.Size, base.Size, blob)
		}
	}

	if err := e.svc.Sandboxes.Destroy(ctx, a1, "box"); err != nil {
		t.Fatal(err)
	}
	for image, notes := range map[string]string{"now": "after", "then": "before"} {
		sb := e.createFrom(t, a1, "from-"+image, image)
		if got := e.rootFile(t, sb, "home/app/notes"); got != notes {
			t.Errorf("notes in a sandbox of image %s = %q; want %q", image, got, notes)
		}
		if got := e.rootFile(t, sb, "home/app/blob"); len(got) != blob {
			t.Errorf("blob in a sandbox of image %s holds %d bytes; want %d", image, len(got), blob)
		}
		if spec, _ := e.drv.Spec(sb.ID); spec.UID != 1234 || spec.GID != 2345 || spec.Home != "/home/app" {
			t.Errorf("a sandbox of image %s runs as %d:%d in %s; want app's 1234:2345 in /home/app", image, spec.UID, spec.GID, spec.Home)
		}
	}
}

// wantCheckpoints wants sb to have exactly the checkpoints ids, and the
// layer store to hold a snapshot for each and for no other of sb's.
func (e *env) wantCheckpoints(t *testing.T, sb sandbox.Sandbox, ids ...string) {
	t.Helper()
	cks, err := e.svc.Checkpoints.ListCheckpoints(t.Context(), a1, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	var got, keys []string
	for _, c := range cks {
		got = append(got, c.ID)
	}
	if err := e.lay.Walk(t.Context(), func(info layers.Info) error {
		if strings.HasPrefix(info.Key, "ck-") {
			keys = append(keys, strings.TrimPrefix(info.Key, "ck-"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ids) || !slices.Equal(keys, ids) {
		t.Errorf("%s has checkpoints %q and the layer store %q; want %q", sb.Name, got, keys, ids)
	}
}
