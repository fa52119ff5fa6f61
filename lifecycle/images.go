package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Images keeps the tenants' image catalogs: pulls, imports, exports,
// images made from sandboxes and built from Dockerfiles, listing,
// removal, and the collection of the layers no image uses any more. An
// image is its tenant's: only that tenant sees and uses it, unless an
// operator made it public. It is safe for concurrent use.
type Images struct {
	*core
	adm         *admission
	checkpoints *Checkpoints
	sandboxes   *Sandboxes
	processes   *Processes
	// gc keeps the collection of unused layers (which takes it for
	// writing, without waiting) apart from the calls that store layers
	// (which hold it for reading until their version is recorded), so
	// that nothing collects a layer a call has found stored and is about
	// to record. A collection that finds it taken leaves its candidates
	// in pending, for the next one.
	gc      sync.RWMutex
	mu      sync.Mutex
	pending []string
	// catalog keeps the deletion of image versions (held for writing:
	// a removal, the collection of versions no sandbox uses) apart from
	// creates (held for reading from resolving their image to inserting
	// their row), so that no version goes between a create's choice of
	// it and its row naming it.
	catalog sync.RWMutex
	// peers fetches and sends images between the store's nodes.
	peers peerImages
	// pulls serializes the stores of one tenant's image name.
	pulls keyedMutex
}

func imageNotFound(name string) error {
	return sandbox.Errorf(sandbox.CodeNotFound, "image %q not found", name).
		WithHint("`hearth image list` shows the images you can use; `hearth image pull REF` pulls one")
}

// resolve returns the current version of the image p names (see
// access.image).
func (s *Images) resolve(ctx context.Context, p sandbox.Principal, name string) (sandbox.Image, error) {
	if name == "" {
		return sandbox.Image{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "no image named").WithHint("name an image; `hearth image list` shows them")
	}
	return s.access(p).image(ctx, name)
}

// own returns every version of the image name of p's tenant, current
// first: what p may change (remove, make public). An operator's is the
// system tenant's. Another tenant's image, public or not, is not_found.
func (s *Images) own(ctx context.Context, p sandbox.Principal, name string, manage bool) ([]sandbox.Image, error) {
	if err := sandbox.ValidateImageName(name); err != nil {
		return nil, err
	}
	if manage && p.Role == sandbox.RoleAgent {
		return nil, sandbox.Errorf(sandbox.CodePermissionDenied, "only a tenant admin or an operator may remove or publish images").WithHint("ask a tenant admin")
	}
	all, err := s.opts.Store.Images().List(ctx, p.Home())
	if err != nil {
		return nil, s.internal("list images", err)
	}
	var versions []sandbox.Image
	for _, img := range all {
		if img.Name == name {
			versions = append(versions, img)
		}
	}
	if len(versions) == 0 {
		return nil, imageNotFound(name)
	}
	slices.SortStableFunc(versions, func(a, b sandbox.Image) int {
		switch {
		case a.Current == b.Current:
			return b.CreatedAt.Compare(a.CreatedAt)
		case a.Current:
			return -1
		}
		return 1
	})
	return versions, nil
}

// Get returns the current version of the image p names (its tenant's, or
// a public one).
func (s *Images) Get(ctx context.Context, p sandbox.Principal, name string) (sandbox.Image, error) {
	return s.resolve(ctx, p, name)
}

// List returns the images p sees: every version of its tenant's, then the
// current versions of other tenants' public images.
func (s *Images) List(ctx context.Context, p sandbox.Principal) ([]sandbox.Image, error) {
	own, err := s.opts.Store.Images().List(ctx, p.Home())
	if err != nil {
		return nil, s.internal("list images", err)
	}
	public, err := s.opts.Store.Images().ListPublic(ctx)
	if err != nil {
		return nil, s.internal("list public images", err)
	}
	for _, img := range public {
		if img.Tenant != p.Home() {
			own = append(own, img)
		}
	}
	return own, nil
}

// SetPublic makes p's tenant's image name (every version) public or
// private again. Only an operator may.
func (s *Images) SetPublic(ctx context.Context, p sandbox.Principal, name string, public bool) (sandbox.Image, error) {
	if p.Role != sandbox.RoleOperator {
		return sandbox.Image{}, sandbox.Errorf(sandbox.CodePermissionDenied, "only an operator may make an image public").WithHint("ask an operator")
	}
	versions, err := s.own(ctx, p, name, true)
	if err != nil {
		return sandbox.Image{}, err
	}
	if err := s.opts.Store.Images().SetPublic(ctx, p.Home(), name, public); err != nil {
		return sandbox.Image{}, s.internal("set image public", err)
	}
	img := versions[0]
	img.Public = public
	return img, nil
}

// Remove removes every version of p's tenant's image name, unless a
// sandbox made from one (see users; and so its checkpoints) is there:
// then failed_precondition names one. The layers no image uses any more
// go with it.
func (s *Images) Remove(ctx context.Context, p sandbox.Principal, name string) error {
	s.catalog.Lock()
	defer s.catalog.Unlock()
	versions, err := s.own(ctx, p, name, true)
	if err != nil {
		return err
	}
	users, err := s.users(ctx, versions)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		ref := p.RefOf(users[0].Tenant, users[0].Name)
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "image %q is in use by sandbox %q", name, ref).
			WithHint("destroy the sandboxes made from it (and their checkpoints go with them), then remove it").With("sandbox", ref)
	}
	for _, v := range versions {
		if err := s.opts.Store.Images().Delete(ctx, v.Tenant, v.Name, v.Digest); err != nil && !errors.Is(err, store.ErrNotFound) {
			return s.internal("delete image", err)
		}
	}
	s.collect(ctx, keysOf(versions))
	return nil
}

// users are the sandboxes made from versions (every version of one
// tenant's image name), oldest first: those with a version's layer key
// that were created by that name, in that tenant or, for the system
// tenant's images (which may be public), in any. A sandbox of another
// image with the same content (another tenant's import of the same
// archive, a build under another name) has the same key but is not one:
// it neither blocks the removal nor is named to its caller, and the
// collection keeps the layers its own image still holds.
func (s *Images) users(ctx context.Context, versions []sandbox.Image) ([]sandbox.Sandbox, error) {
	keys := make([]string, 0, len(versions))
	for _, v := range versions {
		keys = append(keys, v.Key())
	}
	all, err := s.opts.Store.Sandboxes().UsingImage(ctx, keys, 0)
	if err != nil {
		return nil, s.internal("find the image's users", err)
	}
	img := versions[0]
	return slices.DeleteFunc(all, func(sb sandbox.Sandbox) bool {
		return sb.Image != img.Name || sb.Tenant != img.Tenant && img.Tenant != sandbox.SystemTenant
	}), nil
}

// collect removes what no image needs any more (see collectLocked),
// starting from the layer keys of candidates and those pending; while a
// call stores layers it only adds candidates to pending, and the end of
// that call collects them (see stored).
func (s *Images) collect(ctx context.Context, candidates []string) {
	s.mu.Lock()
	s.pending = append(s.pending, candidates...)
	if !s.gc.TryLock() {
		s.mu.Unlock()
		return
	}
	candidates, s.pending = s.pending, nil
	s.mu.Unlock()
	defer s.gc.Unlock()
	s.collectLocked(ctx, candidates)
}

// storing marks a call that stores layers until the returned func, which
// then collects what is pending.
func (s *Images) storing(ctx context.Context) (done func()) {
	s.gc.RLock()
	return func() {
		s.gc.RUnlock()
		s.collect(context.WithoutCancel(ctx), nil)
	}
}

// dropUnused deletes the version img, not current, if no sandbox uses
// its layer key, and reports whether it did.
func (s *Images) dropUnused(ctx context.Context, img sandbox.Image) bool {
	s.catalog.Lock()
	defer s.catalog.Unlock()
	users, err := s.opts.Store.Sandboxes().UsingImage(ctx, []string{img.Key()}, 1)
	if err != nil || len(users) > 0 {
		return false
	}
	return s.opts.Store.Images().Delete(ctx, img.Tenant, img.Name, img.Digest) == nil
}

// collectLocked, with s.gc held for writing, deletes the versions that are
// not current and that no sandbox uses and the build cache's expired
// steps, then removes from the node the layer keys among candidates (the
// node's own at Recover, those of versions just deleted otherwise) and of
// what it deleted that no version and no cached step left uses. Failures
// are logged: the next collection retries.
func (s *Images) collectLocked(ctx context.Context, candidates []string) {
	all, err := s.opts.Store.Images().All(ctx)
	if err != nil {
		s.log.Error("image collection: list images", "err", err)
		return
	}
	used, expired, err := s.cachedSteps(ctx)
	if err != nil {
		s.log.Error("image collection: list the build cache", "err", err)
		return
	}
	candidates = append(candidates, expired...)
	for _, img := range all {
		if !img.Current && s.dropUnused(ctx, img) {
			candidates = append(candidates, img.Layers...)
			continue
		}
		for _, k := range img.Layers {
			used[k] = true
		}
	}
	var unused []string
	for _, k := range candidates {
		if !used[k] && !slices.Contains(unused, k) {
			unused = append(unused, k)
		}
	}
	if len(unused) == 0 {
		return
	}
	if err := s.opts.Node.RemoveImageKeys(ctx, unused); err != nil {
		s.log.Error("image collection: remove layers", "keys", len(unused), "err", err)
		return
	}
	s.log.Info("image collection", "removed", len(unused))
}

// buildCacheTTL is how long the build cache keeps a step no build has
// used since.
const buildCacheTTL = 7 * 24 * time.Hour

// cachedSteps deletes the build cache's steps unused for buildCacheTTL and
// returns the keys of those it keeps (as a set) and of those it deleted.
func (s *Images) cachedSteps(ctx context.Context) (keep map[string]bool, expired []string, err error) {
	steps, err := s.opts.Store.BuildSteps().All(ctx)
	if err != nil {
		return nil, nil, err
	}
	keep = map[string]bool{}
	cutoff := s.now().Add(-buildCacheTTL)
	for _, st := range steps {
		if st.UsedAt.Before(cutoff) && s.opts.Store.BuildSteps().Delete(ctx, st.Tenant, st.Key) == nil {
			expired = append(expired, st.Key)
			continue
		}
		keep[st.Key] = true
	}
	return keep, expired, nil
}

// trimBuildCache deletes p's tenant's least recently used build steps
// while its sandboxes, images and build cache together exceed its disk
// budget, then collects them: the cache holds what the budget leaves at
// the end of each build, and is not counted when a create or a pull asks
// for room. A tenant with no budget (or an operator) keeps its steps for
// buildCacheTTL.
func (s *Images) trimBuildCache(ctx context.Context, p sandbox.Principal) {
	r := s.room(ctx, p)
	if r.limit <= 0 {
		return
	}
	steps, err := s.opts.Store.BuildSteps().List(ctx, p.Home())
	if err != nil {
		s.log.Error("image build: list the build cache", "tenant", p.Home(), "err", err)
		return
	}
	var total int64
	for _, st := range steps {
		total += st.Size
	}
	var drop []string
	for _, st := range steps {
		if r.used+total <= r.limit {
			break
		}
		if err := s.opts.Store.BuildSteps().Delete(ctx, st.Tenant, st.Key); err == nil {
			drop = append(drop, st.Key)
			total -= st.Size
		}
	}
	s.collect(ctx, drop)
}

// keysOf is every layer key of imgs.
func keysOf(imgs []sandbox.Image) []string {
	var keys []string
	for _, img := range imgs {
		keys = append(keys, img.Layers...)
	}
	return keys
}

// SetDefault records img, which the node holds, as the current version of
// the default image (Options.DefaultImage): the system tenant's, public.
// A version recorded already only becomes current again; the one it
// replaces stays for the sandboxes made from it, and goes with the last.
func (s *Images) SetDefault(ctx context.Context, img sandbox.Image) error {
	img.Name, img.Tenant, img.Public, img.Current = s.opts.DefaultImage, sandbox.SystemTenant, true, true
	img.Source = sandbox.ImageSourceDefault
	if cur, err := s.opts.Store.Images().Get(ctx, img.Tenant, img.Name); err == nil && cur.Digest == img.Digest {
		return nil
	}
	img.CreatedAt = s.now().UTC()
	if old, err := s.opts.Store.Images().Version(ctx, img.Tenant, img.Name, img.Digest); err == nil {
		img.CreatedAt = old.CreatedAt
	}
	if err := s.opts.Store.Images().Put(ctx, img); err != nil {
		return fmt.Errorf("lifecycle: record the default image: %w", err)
	}
	s.log.Info("default image version", "digest", img.Digest)
	return nil
}
