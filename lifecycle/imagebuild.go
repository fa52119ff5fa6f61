package lifecycle

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"strings"
	"time"

	"github.com/hearth/hearth/image/dockerfile"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// BuildRequest is a build of an image from a Dockerfile.
type BuildRequest struct {
	// Name is the image built, in the caller's tenant.
	Name string
	// Dockerfile is its text, BuildArgs its --build-arg values.
	Dockerfile io.Reader
	BuildArgs  map[string]string
	// Context is the build context the door opened (a directory, or a
	// tarball it spooled); the caller closes it.
	Context *dockerfile.Context
	// Network is the network mode of the sandboxes RUN steps run in ("":
	// the tenant's default), within the tenant's policy as any create.
	Network string
}

// buildOutputTail is how much of a failed RUN's output its error quotes.
const buildOutputTail = 2048

// Build builds req.Name from req's Dockerfile: FROM an image p may use
// (a registry reference it does not have yet is pulled first), then each
// step on the root the one before left. A RUN runs in a sandbox of p's,
// made from that root, under its guardrails and network policy, and
// destroyed after; COPY, ADD and WORKDIR are applied to the root on the
// node. Each step's root is kept under its cache key (the hash of its
// inputs, scoped to the tenant) and recorded in the tenant's build cache
// (store.BuildSteps), so a rebuild runs again only from the first step
// whose inputs changed, also after a restart; see trimBuildCache and
// buildCacheTTL for how long the cache keeps a step. Errors name the step,
// its line and, for a failed RUN, its exit code and output's tail.
func (s *Images) Build(ctx context.Context, p sandbox.Principal, req BuildRequest, progress Progress) (sandbox.Image, error) {
	if err := sandbox.ValidateImageName(req.Name); err != nil {
		return sandbox.Image{}, err
	}
	if req.Context == nil {
		return sandbox.Image{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "a build needs a context").WithHint("send the build context as a tarball")
	}
	f, err := dockerfile.Parse(req.Dockerfile, req.BuildArgs)
	if err != nil {
		return sandbox.Image{}, buildError(err)
	}
	base, err := s.buildBase(ctx, p, f.From, progress)
	if err != nil {
		return sandbox.Image{}, err
	}
	plan, err := f.Plan(base.Config)
	if err != nil {
		return sandbox.Image{}, buildError(err)
	}
	if err := plan.Resolve(req.Context, baseDigest(base)); err != nil {
		return sandbox.Image{}, buildError(err)
	}
	defer s.trimBuildCache(context.WithoutCancel(ctx), p)
	defer s.storing(ctx)()
	b := &build{s: s, p: p, req: req, plan: plan, progress: progress, cur: base}
	var img sandbox.Image
	for i := range plan.Steps {
		if err := b.step(ctx, i); err != nil {
			return sandbox.Image{}, err
		}
	}
	digest := b.digest(len(plan.Steps) - 1)
	key, err := node.TopKey(digest)
	if err == nil {
		img, err = s.opts.Node.ApplyImage(ctx, b.cur.Key(), key, nil, plan.Config)
	}
	if err != nil {
		return sandbox.Image{}, b.fail(len(plan.Steps)-1, "store the image", err)
	}
	img.Digest, img.Name, img.Source, img.Ref = digest, req.Name, sandbox.ImageSourceBuild, "Dockerfile FROM "+f.From
	img.Size += b.cur.Size
	return s.record(ctx, p, img, progress)
}

// buildBase is the image a build's FROM names, pulled first when it is a
// registry reference p's tenant does not have. FROM scratch is refused:
// a build's RUN needs the base's shell.
func (s *Images) buildBase(ctx context.Context, p sandbox.Principal, from string, progress Progress) (sandbox.Image, error) {
	if from == dockerfile.Scratch {
		return sandbox.Image{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "FROM scratch is not supported").WithHint("build FROM an image with a shell")
	}
	base, err := s.access(p).image(ctx, from)
	if sandbox.IsCode(err, sandbox.CodeNotFound) && sandbox.IsReference(from) {
		return s.Pull(ctx, p, from, PullOptions{Progress: progress})
	}
	return base, err
}

// baseDigest is what a build's cache keys start from: the base version's
// digest (its layer key for a default image from before versions).
func baseDigest(img sandbox.Image) string {
	if img.Digest != "" {
		return img.Digest
	}
	sum := sha256.Sum256([]byte(img.Key()))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// buildError is the invalid_argument of a Dockerfile or context refused.
func buildError(err error) error {
	return sandbox.Errorf(sandbox.CodeInvalidArgument, "%v", err).WithHint("fix the Dockerfile or the build context, then build again")
}

// build is one Build's state: the root so far (cur, an image version
// whose top is the last step's).
type build struct {
	s        *Images
	p        sandbox.Principal
	req      BuildRequest
	plan     *dockerfile.Plan
	progress Progress
	cur      sandbox.Image
}

// digest is step i's root's version: its cache key, scoped to the tenant.
func (b *build) digest(i int) string {
	key := b.plan.BaseDigest
	if i >= 0 {
		key = b.plan.Steps[i].Key
	}
	sum := sha256.Sum256([]byte(b.p.Home() + "\x00" + key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// label is step i as messages name it.
func (b *build) label(i int) string {
	st := b.plan.Steps[i]
	return fmt.Sprintf("step %d/%d (line %d): %s", i+1, len(b.plan.Steps), st.Line, st.Instruction)
}

// fail is the error of step i failing at what: a sandbox.Error keeps its
// code and details (a RUN's exit_code) and gains the step's label.
func (b *build) fail(i int, what string, err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) {
		out := sandbox.Errorf(se.Code, "%s: %s: %s", b.label(i), what, se.Message).WithHint("%s", cmp.Or(se.Hint, "fix the step, then build again"))
		out.Details = maps.Clone(se.Details)
		return out
	}
	if i < 0 {
		return b.s.internal(what, err)
	}
	return sandbox.Errorf(sandbox.CodeInvalidArgument, "%s: %s: %v", b.label(i), what, err).WithHint("fix the step, then build again")
}

func (b *build) say(ev sandbox.ImageProgress) {
	if b.progress != nil {
		b.progress(ev)
	}
}

// stepConfig is the config the root runs under at step i: the base's,
// with the step's environment, working directory and user.
func (b *build) stepConfig(i int) sandbox.ImageConfig {
	st := b.plan.Steps[i]
	cfg := b.plan.Config
	cfg.Env, cfg.WorkingDir, cfg.User = st.Env, st.WorkDir, st.User
	return cfg
}

// step runs step i on b.cur, or finds its root in the cache.
func (b *build) step(ctx context.Context, i int) error {
	st := b.plan.Steps[i]
	key, err := node.StepKey(b.digest(i))
	if err != nil {
		return b.fail(-1, "name a step", err)
	}
	cached, err := b.s.opts.Node.HasImage(ctx, key)
	if err != nil {
		return b.fail(i, "look up the cache", err)
	}
	b.say(sandbox.ImageProgress{Phase: "step", Step: i + 1, Text: b.label(i), Cached: cached || st.Kind == dockerfile.KindConfig})
	var img sandbox.Image
	switch {
	case cached:
		img, err = b.s.opts.Node.ApplyImage(ctx, b.cur.Key(), key, nil, b.stepConfig(i))
	case st.Kind == dockerfile.KindConfig:
		return nil // the config is the plan's; the root is unchanged
	case st.Kind == dockerfile.KindWorkdir:
		img, err = b.s.opts.Node.ApplyImage(ctx, b.cur.Key(), key, nil, b.stepConfig(i))
	case st.Kind == dockerfile.KindCopy:
		img, err = b.copy(ctx, i, key)
	case st.Kind == dockerfile.KindRun:
		img, err = b.run(ctx, i, key)
	default:
		err = fmt.Errorf("unknown step kind %q", st.Kind)
	}
	if err != nil {
		return b.fail(i, st.Kind, err)
	}
	b.remember(ctx, key, img.Size)
	img.Size += b.cur.Size // what the step wrote, on what the root held
	b.cur = img
	return nil
}

// remember records key, a step's root that wrote size bytes, in the
// tenant's build cache, made or reused now. A failure is logged: the
// root then goes with the next collection, and a later build runs the
// step again.
func (b *build) remember(ctx context.Context, key string, size int64) {
	now := b.s.now().UTC()
	step := store.BuildStep{Tenant: b.p.Home(), Key: key, Size: size, CreatedAt: now, UsedAt: now}
	if err := b.s.opts.Store.BuildSteps().Put(ctx, step); err != nil {
		b.s.log.Error("image build: record a step in the build cache", "key", key, "err", err)
	}
}

// copy applies step i's copies onto the root, their owner resolved
// against it when --chown names one by name.
func (b *build) copy(ctx context.Context, i int, key string) (sandbox.Image, error) {
	st := b.plan.Steps[i]
	if o := st.Chown; o != nil && !o.Resolved() {
		uid, gid, err := b.s.opts.Node.ResolveUser(ctx, b.cur.Key(), o.String())
		if err != nil {
			return sandbox.Image{}, err
		}
		o.UID, o.GID = uid, gid
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeCopies(pw, st.Copies, b.req.Context)) }()
	img, err := b.s.opts.Node.ApplyImage(ctx, b.cur.Key(), key, pr, b.stepConfig(i))
	pr.CloseWithError(errors.New("the copy ended"))
	return img, err
}

// writeCopies writes copies as one layer tar: each Copy's tar with its
// names under its destination.
func writeCopies(w io.Writer, copies []dockerfile.Copy, bc *dockerfile.Context) error {
	tw := tar.NewWriter(w)
	for _, c := range copies {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(c.WriteTar(pw, bc)) }()
		err := rebase(tw, tar.NewReader(pr), strings.TrimPrefix(path.Clean(c.Dest), "/"))
		pr.CloseWithError(errors.New("the copy ended"))
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// rebase copies the entries of tr to tw with their names (and hard
// links' targets) under dir.
func rebase(tw *tar.Writer, tr *tar.Reader, dir string) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		h.Name = path.Join(dir, h.Name)
		if h.Typeflag == tar.TypeLink {
			h.Linkname = path.Join(dir, h.Linkname)
		}
		if h.Name == "" || h.Name == "." {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// run runs step i's command in a sandbox of the caller's made from the
// root (with the step's working directory made and its user resolved),
// then keeps the sandbox's root as the step's and destroys the sandbox.
func (b *build) run(ctx context.Context, i int, key string) (sandbox.Image, error) {
	st := b.plan.Steps[i]
	sum := sha256.Sum256([]byte(key + "\x00run"))
	prepKey, err := node.StepKey("sha256:" + hex.EncodeToString(sum[:]))
	if err != nil {
		return sandbox.Image{}, err
	}
	prep, err := b.s.opts.Node.ApplyImage(ctx, b.cur.Key(), prepKey, nil, b.stepConfig(i))
	if err != nil {
		return sandbox.Image{}, err
	}
	// The prepared root is the step's sandbox's parent only: it goes once
	// the build ends (its collection waits for that).
	defer b.s.collect(context.WithoutCancel(ctx), []string{prepKey})
	prep.Name = b.req.Name
	// A daemon killed mid-build leaves this sandbox: its life is short.
	req := sandbox.CreateRequest{Name: "build-" + newID()[1:9], Network: b.req.Network, Labels: []string{"image-build"}, TTL: sandbox.Duration(time.Hour)}
	sb, _, err := b.s.sandboxes.create(ctx, b.p, req, origin{image: &prep}, "building image "+b.req.Name)
	if err != nil {
		return sandbox.Image{}, err
	}
	defer func() {
		if err := b.s.sandboxes.Destroy(context.WithoutCancel(ctx), b.p, sandbox.Ref(sb.Tenant, sb.Name)); err != nil {
			b.s.log.Error("image build: destroy its sandbox", "sandbox", sb.Name, "err", err)
		}
	}()
	ref := sandbox.Ref(sb.Tenant, sb.Name)
	out := &tailWriter{max: buildOutputTail, say: func(text string) { b.say(sandbox.ImageProgress{Phase: "output", Step: i + 1, Text: text}) }}
	res, err := b.s.processes.Exec(ctx, b.p, ref, sandbox.ExecRequest{Argv: st.Argv, Cwd: st.WorkDir}, nil, out, out)
	if err != nil {
		return sandbox.Image{}, err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return sandbox.Image{}, sandbox.Errorf(sandbox.CodeFailedPrecondition, "exit code %d; output ends with:\n%s", res.ExitCode, out.tail()).
			With("exit_code", res.ExitCode)
	}
	ck, err := b.s.checkpoints.Checkpoint(ctx, b.p, ref, sandbox.CheckpointRequest{Label: "image build step"})
	if err != nil {
		return sandbox.Image{}, err
	}
	return b.s.opts.Node.CommitImage(ctx, ck.ID, key, b.stepConfig(i))
}

// tailWriter passes what a build's command writes to say, and keeps the
// last max bytes of it for an error.
type tailWriter struct {
	max int
	say func(string)
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.say(string(p))
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tailWriter) tail() string { return strings.TrimRight(string(w.buf), "\n") }
