package dockerfile

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/hearth/hearth/sandbox"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// Step kinds (Step.Kind).
const (
	// KindRun execs Step.Argv in the build sandbox, with Step.Env, as
	// Step.User, in Step.WorkDir (made first if missing, as Docker does).
	KindRun = "run"
	// KindCopy unpacks each of Step.Copies into the root (see Copy).
	KindCopy = "copy"
	// KindWorkdir sets the working directory and makes the directory,
	// Step.WorkDir, if missing (mkdir -p, owned by root, mode 0755).
	KindWorkdir = "workdir"
	// KindConfig changes only the image's config (ENV, USER, LABEL, ARG,
	// CMD, ENTRYPOINT, SHELL, EXPOSE, VOLUME, STOPSIGNAL, MAINTAINER).
	KindConfig = "config"
)

// DefaultPath is the PATH a base image without one gets, as Docker gives.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Plan is what a Dockerfile asks of its base image: the steps to apply in
// order and the config the image ends with.
type Plan struct {
	// From is the base image (File.From); BaseDigest its digest, as given
	// to Resolve ("" for Scratch).
	From       string `json:"from"`
	BaseDigest string `json:"base_digest,omitempty"`
	Steps      []Step `json:"steps"`
	// Config is the image's config after the last step: the base image's,
	// changed by ENV, WORKDIR, USER, CMD, ENTRYPOINT and LABEL. When a
	// USER changes the user, UID, GID and Home are zero and are to be
	// resolved against the built root's /etc/passwd, as for any image
	// stored.
	Config sandbox.ImageConfig `json:"config"`
	// ExposedPorts ("80/tcp"), Volumes, StopSignal and Maintainer are
	// recorded for a caller that keeps a full OCI config: a hearth
	// sandbox uses none of them.
	ExposedPorts []string `json:"exposed_ports,omitempty"`
	Volumes      []string `json:"volumes,omitempty"`
	StopSignal   string   `json:"stop_signal,omitempty"`
	Maintainer   string   `json:"maintainer,omitempty"`
	// Warnings are File.Warnings.
	Warnings []string `json:"warnings,omitempty"`
}

// Step is one instruction after FROM.
type Step struct {
	// Line and Instruction locate it for messages ("step 3/7 (line 5):
	// RUN make").
	Line        int    `json:"line"`
	Instruction string `json:"instruction"`
	// Kind is KindRun, KindCopy, KindWorkdir or KindConfig.
	Kind string `json:"kind"`
	// Expanded is the instruction after variable expansion, in a
	// canonical form (the keyword, flags as --name="value", every word
	// quoted as in Go): what the cache key covers of it.
	Expanded string `json:"expanded"`
	// Argv is what a run step execs (a shell form is the SHELL, by
	// default /bin/sh -c, and the command).
	Argv []string `json:"argv,omitempty"`
	// Env is the environment in effect: for a run step the config's Env
	// and the ARGs in effect (an ENV of the same name wins), for the other
	// kinds the config's Env before the step.
	Env []string `json:"env,omitempty"`
	// WorkDir is the working directory in effect (after a WORKDIR step,
	// the new one); "/" if none is set.
	WorkDir string `json:"workdir"`
	// User is the user in effect ("" is root), as the image names it.
	User string `json:"user,omitempty"`

	// Sources are a copy step's sources as expanded: paths in the build
	// context, relative to its root, cleaned, possibly with glob patterns.
	Sources []string `json:"sources,omitempty"`
	// Dest is where a copy step copies to: absolute (a relative one is
	// joined to the WORKDIR); it ends in "/" when it names a directory.
	Dest string `json:"dest,omitempty"`
	// Unpack: an ADD, which unpacks a source that is a local tar archive.
	Unpack bool `json:"unpack,omitempty"`
	// Chown and Chmod are the --chown and --chmod of a copy step.
	Chown *Owner  `json:"chown,omitempty"`
	Chmod *uint32 `json:"chmod,omitempty"`
	// Copies are a copy step's sources as found in the context: filled
	// by Resolve.
	Copies []Copy `json:"copies,omitempty"`

	// Key is the step's cache key, filled by Resolve: equal keys mean
	// equal roots after the step (see Resolve).
	Key string `json:"key,omitempty"`
}

// Owner is a --chown=user[:group] as expanded. Parse fills UID and GID
// when they are numbers; a name is for the executor to resolve against
// the root's /etc/passwd and /etc/group at that step (a user without a
// group means the user's primary group, or for a number the same number,
// as Docker does) before Copy.WriteTar.
type Owner struct {
	User  string `json:"user"`
	Group string `json:"group,omitempty"`
	UID   int    `json:"uid"` // -1 until known
	GID   int    `json:"gid"` // -1 until known
}

// Resolved reports whether o's UID and GID are known.
func (o *Owner) Resolved() bool { return o.UID >= 0 && o.GID >= 0 }

// String is o as written: "user" or "user:group".
func (o *Owner) String() string {
	if o.Group == "" {
		return o.User
	}
	return o.User + ":" + o.Group
}

// planner carries the state of a Plan being made.
type planner struct {
	f           *File
	p           *Plan
	lex         *shell.Lex
	args        *argSet
	shell       []string
	cmdSet      bool
	userChanged bool
}

// Plan expands f's instructions against base, the base image's config
// (the zero ImageConfig for Scratch), and returns the steps. Every
// refusal is an *Error naming the line: a COPY source that leaves the
// context (ErrEscapes), ADD of a URL (ErrUnsupported), a variable that
// cannot be expanded, a bad --chown or --chmod.
func (f *File) Plan(base sandbox.ImageConfig) (*Plan, error) {
	p := &Plan{From: f.From, Config: cloneConfig(base), Warnings: slices.Clone(f.Warnings)}
	if _, ok := lookupEnv(p.Config.Env, "PATH"); !ok {
		p.Config.Env = append(p.Config.Env, "PATH="+DefaultPath)
	}
	pl := &planner{f: f, p: p, lex: shell.NewLex(f.escape), args: &argSet{}, shell: []string{"/bin/sh", "-c"}}
	for _, in := range f.instructions {
		st := Step{Line: in.line, Instruction: in.text, WorkDir: pl.workdir(), User: p.Config.User, Env: slices.Clone(p.Config.Env)}
		if err := pl.dispatch(in, &st); err != nil {
			return nil, err
		}
		p.Steps = append(p.Steps, st)
	}
	if pl.userChanged {
		p.Config.UID, p.Config.GID, p.Config.Home = 0, 0, ""
	}
	return p, nil
}

// dispatch fills st from in.
func (pl *planner) dispatch(in *instruction, st *Step) error {
	switch in.cmd {
	case "run":
		return pl.run(in, st)
	case "copy", "add":
		return pl.copy(in, st)
	case "workdir":
		return pl.workdirStep(in, st)
	case "env", "label":
		return pl.pairs(in, st)
	case "arg":
		return pl.arg(in, st)
	case "user":
		return pl.user(in, st)
	case "cmd", "entrypoint", "shell":
		return pl.command(in, st)
	default: // expose, volume, stopsignal, maintainer
		return pl.metadata(in, st)
	}
}

// workdir is the working directory in effect, "/" if none.
func (pl *planner) workdir() string {
	if pl.p.Config.WorkingDir == "" {
		return "/"
	}
	return pl.p.Config.WorkingDir
}

// env is what variables expand with: the ARGs in effect and the config's
// Env, which wins over an ARG of the same name.
func (pl *planner) env() shell.EnvGetter {
	return shell.EnvsFromSlice(append(pl.args.pairs(), pl.p.Config.Env...))
}

// runEnv is a run step's environment: the config's Env and the ARGs in
// effect that no ENV overrides.
func (pl *planner) runEnv() []string {
	env := slices.Clone(pl.p.Config.Env)
	for _, kv := range pl.args.pairs() {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := lookupEnv(env, name); !ok {
			env = append(env, kv)
		}
	}
	return env
}

// lookupEnv finds name in env ("K=V" entries).
func lookupEnv(env []string, name string) (string, bool) {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v, true
		}
	}
	return "", false
}

// setEnv sets name in env, in place if present.
func setEnv(env []string, name, value string) []string {
	for i, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			env[i] = name + "=" + value
			return env
		}
	}
	return append(env, name+"="+value)
}

// cloneConfig deep-copies c.
func cloneConfig(c sandbox.ImageConfig) sandbox.ImageConfig {
	c.Env = slices.Clone(c.Env)
	c.Entrypoint = slices.Clone(c.Entrypoint)
	c.Cmd = slices.Clone(c.Cmd)
	c.Labels = maps.Clone(c.Labels)
	return c
}

// canonical is a Step's Expanded: the keyword, then flags as
// --name=value and every word Go-quoted (invalid UTF-8 as \x escapes), so
// that different instructions never read alike.
func canonical(keyword string, flags []string, words ...string) string {
	var b strings.Builder
	b.WriteString(keyword)
	for i := 0; i+1 < len(flags); i += 2 {
		b.WriteString(" --" + flags[i] + "=" + strconv.Quote(flags[i+1]))
	}
	for _, w := range words {
		b.WriteString(" " + strconv.Quote(w))
	}
	return b.String()
}
