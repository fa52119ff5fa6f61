package lifecycle

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Progress receives an image call's progress events; nil discards them.
type Progress = func(sandbox.ImageProgress)

// PullOptions adjust a pull. The zero value pulls over TLS (plain HTTP
// only to a loopback registry) with the tenant's logins.
type PullOptions struct {
	// Insecure allows plain HTTP or an unverified certificate for the
	// reference's registry host, for this pull only. A host the tenant has
	// a login for that does not allow it is refused (failed_precondition):
	// its password is never sent where the login said it must not go.
	Insecure bool
	// Progress receives the pull's progress events; nil discards them.
	Progress Progress
}

// Pull pulls ref from its registry into p's tenant's catalog as the image
// named by its normalized reference, with the tenant's registry logins. A
// ref whose image is there already adds nothing but the version check: a
// tag that now names new content adds a version and makes it current.
func (s *Images) Pull(ctx context.Context, p sandbox.Principal, ref string, opts PullOptions) (sandbox.Image, error) {
	if err := sandbox.ValidateImageName(ref); err != nil {
		return sandbox.Image{}, err
	}
	regs, err := s.registries(ctx, p.Home())
	if err == nil {
		err = internalRegistry(p, regs, ref)
	}
	if err == nil && opts.Insecure {
		err = insecureFor(regs, ref)
	}
	if err != nil {
		return sandbox.Image{}, err
	}
	defer s.storing(ctx)()
	release, err := s.transferSlot(ctx, p)
	if err != nil {
		return sandbox.Image{}, err
	}
	defer release()
	room := s.room(ctx, p)
	img, err := s.opts.Node.PullImage(ctx, node.PullRequest{Ref: ref, Registries: regs, MaxBytes: room.left(), Progress: opts.Progress,
		PublicOnly: p.Role != sandbox.RoleOperator})
	if err != nil {
		return sandbox.Image{}, pullError(p, ref, err, room)
	}
	img.Source, img.Ref = sandbox.ImageSourceRegistry, ref
	return s.record(ctx, p, img, opts.Progress)
}

// transferSlot waits in the heavy queue for a slot for p's pull or
// import, a transfer (see job), with p's deadline: call it after storing
// (the lock order of heavy.go). The caller calls release once the node's
// call returns.
func (s *Images) transferSlot(ctx context.Context, p sandbox.Principal) (release func(), err error) {
	return s.heavy.acquire(ctx, job{tenant: p.Home(), transfer: true})
}

// internalRegistry refuses a pull by p, not an operator, from a registry
// on the host's own or a private network (localhost, or an IP literal
// that is loopback, private or link-local) unless p's tenant has a login
// for it: the daemon, root on the host, reaches those addresses for the
// caller, and only a tenant admin's login (or an operator) says the
// tenant may have it do so. A name that resolves to such an address is
// caught when the node dials it (node.PullRequest.PublicOnly), as is a
// token service or a redirect there.
func internalRegistry(p sandbox.Principal, regs map[string]node.Registry, ref string) error {
	host := sandbox.RegistryHost(ref)
	if host == "" || p.Role == sandbox.RoleOperator {
		return nil
	}
	if _, ok := regs[host]; ok {
		return nil
	}
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	}
	addr, err := netip.ParseAddr(strings.Trim(h, "[]"))
	if h != "localhost" && (err != nil || !(addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() || addr.IsUnspecified())) {
		return nil
	}
	return sandbox.Errorf(sandbox.CodePermissionDenied, "registry %s is on the host's own or a private network: a pull from it needs the tenant's login for it", host).
		WithHint("ask a tenant admin to run `hearth registry login %s --username U --password-stdin` (or an operator to pull it and make it public)", host).With("registry", host)
}

// insecureFor marks the registry host of ref Insecure in regs, a pull's
// registries: invalid_argument when ref names no host, failed_precondition
// when the tenant's login for it requires TLS.
func insecureFor(regs map[string]node.Registry, ref string) error {
	if !sandbox.IsReference(ref) {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "an insecure pull needs a reference that names its registry, not %q", ref).
			WithHint("write the registry's host[:port] first, e.g. registry.internal:5000/app:1.0")
	}
	host, _, _ := strings.Cut(ref, "/")
	r, ok := regs[host]
	if ok && !r.Insecure {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "the login for registry %s requires TLS", host).
			WithHint("log in again with `hearth registry login %s --insecure` to allow plain HTTP for it, or pull without --insecure", host).With("registry", host)
	}
	r.Insecure = true
	regs[host] = r
	return nil
}

// Import stores the image in the archive r (docker-archive or OCI
// archive) in p's tenant's catalog as name.
func (s *Images) Import(ctx context.Context, p sandbox.Principal, name string, r io.Reader, progress Progress) (sandbox.Image, error) {
	if err := sandbox.ValidateImageName(name); err != nil {
		return sandbox.Image{}, err
	}
	defer s.storing(ctx)()
	release, err := s.transferSlot(ctx, p)
	if err != nil {
		return sandbox.Image{}, err
	}
	defer release()
	room := s.room(ctx, p)
	img, err := s.opts.Node.ImportImage(ctx, node.ImportRequest{Archive: r, MaxBytes: room.left(), Progress: progress})
	var se *sandbox.Error
	switch {
	case err == nil:
	case errors.As(err, &se):
		return sandbox.Image{}, overBudget(p, sandbox.Errorf(se.Code, "import %s: %s", name, se.Message).WithHint("%s", se.Hint), room)
	default:
		return sandbox.Image{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "import %s: %v", name, err).
			WithHint("give a docker-archive (docker save) or an OCI archive (skopeo copy … oci-archive:FILE) tarball")
	}
	img.Ref, img.Name, img.Source = img.Name, name, sandbox.ImageSourceImport
	return s.record(ctx, p, img, progress)
}

// FromSandbox makes the image name in p's tenant's catalog from the disk
// of the sandbox ref p may reach: from its checkpoint ck when ck is not
// "", else from a checkpoint taken now (live; it is deleted afterwards).
// The image runs as the sandbox's image does (its user, env and working
// directory), and owns its content: the sandbox may go. Its size, within
// the tenant's budget, is its source image's and what the sandbox had
// written at the checkpoint.
func (s *Images) FromSandbox(ctx context.Context, p sandbox.Principal, name, ref, ck string) (sandbox.Image, error) {
	if err := sandbox.ValidateImageName(name); err != nil {
		return sandbox.Image{}, err
	}
	sb, err := s.access(p).get(ctx, ref)
	if err != nil {
		return sandbox.Image{}, err
	}
	var from sandbox.Checkpoint
	if ck == "" {
		if from, err = s.checkpoints.Checkpoint(ctx, p, ref, sandbox.CheckpointRequest{Label: "image " + name}); err != nil {
			return sandbox.Image{}, err
		}
		defer func() {
			if err := s.checkpoints.DeleteCheckpoint(context.WithoutCancel(ctx), p, ref, from.ID); err != nil {
				s.log.Error("delete the checkpoint an image was made from", "sandbox", sb.Name, "checkpoint", from.ID, "err", err)
			}
		}()
	} else if from, err = s.access(p).checkpoint(ctx, sb, ck); err != nil {
		return sandbox.Image{}, err
	}
	cfg := sb.ImageConfig
	if cfg.Home == "" {
		cfg = node.DefaultConfig
	}
	defer s.storing(ctx)()
	digest := newDigest()
	key, err := node.TopKey(digest)
	if err != nil {
		return sandbox.Image{}, s.internal("name an image", err)
	}
	img, err := s.opts.Node.CommitImage(ctx, from.ID, key, cfg)
	if err != nil {
		return sandbox.Image{}, s.internal("make an image from a checkpoint", err)
	}
	img.Digest = digest
	img.Name, img.Source, img.Ref = name, sandbox.ImageSourceSandbox, sandbox.Ref(sb.Tenant, sb.Name)+"@"+from.ID
	if ck == "" {
		img.Ref = sandbox.Ref(sb.Tenant, sb.Name)
	}
	img.Size = max(img.Size, s.sizeOf(ctx, sb)+from.SizeBytes)
	return s.record(ctx, p, img, nil)
}

// sizeOf is the size of the image version sb was made from: its
// tenant's, or the system tenant's (a public one); 0 for none (the
// default image from before image versions).
func (s *Images) sizeOf(ctx context.Context, sb sandbox.Sandbox) int64 {
	for _, tenant := range []string{sb.Tenant, sandbox.SystemTenant} {
		if img, err := s.opts.Store.Images().Version(ctx, tenant, sb.Image, sb.ImageDigest); err == nil {
			return img.Size
		}
	}
	return 0
}

// Export writes p's image name (its current version) to w as an OCI
// archive. An error before anything was written is the caller's to
// report; one after leaves w with a truncated archive.
func (s *Images) Export(ctx context.Context, p sandbox.Principal, name string, w io.Writer) error {
	img, err := s.resolve(ctx, p, name)
	if err != nil {
		return err
	}
	if err := s.opts.Node.ExportImage(ctx, img, w); err != nil {
		return s.internal("export image", err)
	}
	return nil
}

// newDigest is the identity of an image version made from a sandbox or
// built: not a hash of its content (which would cost a read of the whole
// root) but unique, in the digest's form.
func newDigest() string {
	var b [32]byte
	rand.Read(b[:])
	sum := sha256.Sum256(b[:])
	return "sha256:" + hex.EncodeToString(sum[:])
}

// record enters the version img, which the node has stored, into p's
// tenant's catalog as the current version of its name, within the
// tenant's disk budget (counting every image version it holds), and
// the end of the caller's storing call collects what the version it
// replaces leaves unused. A version refused leaves its layers to the
// same collection: only those another image holds stay.
func (s *Images) record(ctx context.Context, p sandbox.Principal, img sandbox.Image, progress Progress) (sandbox.Image, error) {
	tenant := p.Home()
	unlock := s.pulls.lock(sandbox.Ref(tenant, img.Name))
	defer unlock()
	refuse := func(err error) (sandbox.Image, error) {
		s.collect(ctx, img.Layers)
		return sandbox.Image{}, err
	}
	if err := s.withinBudget(ctx, p, img); err != nil {
		return refuse(err)
	}
	img.Tenant, img.Current, img.CreatedAt = tenant, true, s.now().UTC()
	if old, err := s.opts.Store.Images().Version(ctx, tenant, img.Name, img.Digest); err == nil {
		img.Public, img.CreatedAt = old.Public, old.CreatedAt
	} else if !errors.Is(err, store.ErrNotFound) {
		return refuse(s.internal("get image version", err))
	}
	if err := s.opts.Store.Images().Put(ctx, img); err != nil {
		return refuse(s.internal("put image", err))
	}
	if progress != nil {
		progress(sandbox.ImageProgress{Phase: "done", Text: img.Name + "@" + img.Digest, Layers: len(img.Layers)})
	}
	s.log.Info("image stored", "tenant", tenant, "image", img.Name, "digest", img.Digest, "source", img.Source, "bytes", img.Size)
	return img, nil
}

// withinBudget fails with budget_exceeded when p's tenant's image versions
// and sandboxes, with img, would hold more disk than its budget allows.
// Operators and tenants with no limits are not counted.
func (s *Images) withinBudget(ctx context.Context, p sandbox.Principal, img sandbox.Image) error {
	if p.Role == sandbox.RoleOperator {
		return nil
	}
	limit, used, err := s.adm.diskBudget(ctx, p)
	if err != nil || limit <= 0 {
		return err
	}
	if used+img.Size > limit {
		return sandbox.Errorf(sandbox.CodeBudgetExceeded, "budget exceeded: tenant %s's images and sandboxes would hold %d of its %d bytes of disk", p.Home(), used+img.Size, limit).
			WithHint("remove an image or a sandbox, or ask an operator to raise the tenant's allocation").
			With("resource", "disk").With("limit", limit).With("used", used).With("requested", img.Size)
	}
	return nil
}

// room is what p's tenant may still store of images: its disk budget and
// what its sandboxes and images hold of it (limit 0: no bound of the
// tenant's, for an operator, a tenant with no limit, or when it cannot be
// told; record checks the budget again).
type room struct{ limit, used int64 }

func (s *Images) room(ctx context.Context, p sandbox.Principal) room {
	if p.Role == sandbox.RoleOperator {
		return room{}
	}
	limit, used, err := s.adm.diskBudget(ctx, p)
	if err != nil || limit <= 0 {
		return room{}
	}
	return room{limit: limit, used: used}
}

// left is the bytes a pull or an import may take (0: no bound).
func (r room) left() int64 {
	if r.limit <= 0 {
		return 0
	}
	return max(1, r.limit-r.used)
}

// overBudget is se, a refusal of an image for p's tenant, as the
// budget_exceeded it is when the limit it met was the tenant's room; its
// details' requested is then a lower bound (the refusal came before the
// whole image was read).
func overBudget(p sandbox.Principal, se *sandbox.Error, r room) error {
	if se.Code != sandbox.CodeTooLarge || r.limit <= 0 {
		return se
	}
	return sandbox.Errorf(sandbox.CodeBudgetExceeded, "budget exceeded: the image is larger than the %d bytes of disk tenant %s's budget leaves (%s)", r.left(), p.Home(), se.Message).
		WithHint("remove an image or a sandbox, or ask an operator to raise the tenant's allocation").
		With("resource", "disk").With("limit", r.limit).With("used", r.used).With("requested", r.left()+1)
}

// pullError is the sandbox.Error of p's failed pull of ref, with room as
// overBudget takes it.
func pullError(p sandbox.Principal, ref string, err error, room room) error {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return overBudget(p, se, room)
	}
	msg := fmt.Sprintf("pull %s: %v", ref, err)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return sandbox.Errorf(sandbox.CodeUnavailable, "%s", msg).WithHint("retry: the layers downloaded so far are kept")
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "%s", msg).WithHint("check the registry is reachable (loopback registries speak plain HTTP; others need TLS unless logged in with --insecure), then retry")
}
