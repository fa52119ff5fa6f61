package dockerfile

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// run plans a RUN: its command is not expanded (the shell does that, with
// the ARGs and ENVs in its environment).
func (pl *planner) run(in *instruction, st *Step) error {
	argv, err := pl.argv(in)
	if err != nil {
		return err
	}
	if len(argv) == 0 {
		return lineErrorf(in, "%w: RUN needs a command", ErrSyntax)
	}
	st.Kind, st.Argv, st.Env = KindRun, argv, pl.runEnv()
	st.Expanded = canonical("RUN", nil, argv...)
	return nil
}

// argv is the command of a RUN, CMD or ENTRYPOINT: the exec form's words,
// or the shell form's command after the SHELL.
func (pl *planner) argv(in *instruction) ([]string, error) {
	if in.json {
		return slices.Clone(in.args), nil
	}
	script := strings.Join(in.args, " ")
	if len(in.heredocs) > 0 {
		var err error
		if script, err = heredocScript(script, in.heredocs); err != nil {
			return nil, lineError(in, err)
		}
	}
	return append(slices.Clone(pl.shell), script), nil
}

// heredocScript is the script a shell-form RUN with inline documents
// runs. A RUN that is one document alone (RUN <<EOF) runs the document's
// text; otherwise the line and its documents go to the shell, which reads
// the documents itself, as BuildKit does.
func heredocScript(line string, docs []parser.Heredoc) (string, error) {
	if bare, _ := parser.ParseHeredoc(line); bare != nil && len(docs) == 1 {
		text := docs[0].Content
		if docs[0].Chomp {
			text = parser.ChompHeredocContent(text)
		}
		if strings.HasPrefix(text, "#!") {
			return "", fmt.Errorf("a RUN inline document with #! is %w: start it with the interpreter (RUN python3 <<EOF)", ErrUnsupported)
		}
		return text, nil
	}
	var b strings.Builder
	b.WriteString(line)
	for _, d := range docs {
		b.WriteString("\n" + d.Content + d.Name)
	}
	return b.String(), nil
}

// urlSource matches a source that is a URL or a git remote.
var urlSource = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://|git@)`)

// copy plans a COPY or ADD: sources and destination expanded, checked to
// stay in the context, the destination made absolute.
func (pl *planner) copy(in *instruction, st *Step) error {
	kw := strings.ToUpper(in.cmd)
	env := pl.env()
	words := make([]string, len(in.args))
	for i, a := range in.args {
		w, err := expandWord(pl.lex, a, env)
		if err != nil {
			return lineError(in, err)
		}
		if w == "" {
			return lineErrorf(in, "%w: %q expands to nothing", ErrSyntax, a)
		}
		words[i] = w
	}
	srcs, rawDest := words[:len(words)-1], words[len(words)-1]
	for _, s := range srcs {
		if urlSource.MatchString(s) {
			return lineErrorf(in, "%s of a URL (%s) is %w: a build reads nothing from the network itself; fetch it in a RUN, under the sandbox's network policy", kw, s, ErrUnsupported)
		}
		p, err := contextPath(s)
		if err != nil {
			return lineError(in, err)
		}
		st.Sources = append(st.Sources, p)
	}
	st.Dest = destPath(rawDest, pl.workdir())
	if len(srcs) > 1 && !strings.HasSuffix(st.Dest, "/") {
		return lineErrorf(in, "%w: %s of more than one source needs a destination directory ending in /", ErrSyntax, kw)
	}
	if err := pl.copyFlags(in, st, env); err != nil {
		return err
	}
	st.Kind, st.Unpack = KindCopy, in.cmd == "add"
	var flags []string
	if st.Chown != nil {
		flags = append(flags, "chown", st.Chown.String())
	}
	if st.Chmod != nil {
		flags = append(flags, "chmod", fmt.Sprintf("%04o", *st.Chmod))
	}
	st.Expanded = canonical(kw, flags, append(slices.Clone(st.Sources), st.Dest)...)
	return nil
}

// copyFlags reads --chown and --chmod, expanded.
func (pl *planner) copyFlags(in *instruction, st *Step, env shell.EnvGetter) error {
	if v, ok := in.flagValue("chown"); ok {
		w, err := expandWord(pl.lex, v, env)
		if err != nil {
			return lineError(in, err)
		}
		if st.Chown, err = parseOwner(w); err != nil {
			return lineError(in, err)
		}
	}
	if v, ok := in.flagValue("chmod"); ok {
		w, err := expandWord(pl.lex, v, env)
		if err != nil {
			return lineError(in, err)
		}
		m, err := strconv.ParseUint(w, 8, 32)
		if err != nil || m > 0o7777 {
			return lineErrorf(in, "--chmod=%s is %w: give an octal mode, 0000 to 7777", w, ErrUnsupported)
		}
		mode := uint32(m)
		st.Chmod = &mode
	}
	return nil
}

// parseOwner reads a --chown value, user[:group].
func parseOwner(s string) (*Owner, error) {
	user, group, hasGroup := strings.Cut(s, ":")
	if user == "" || (hasGroup && group == "") || strings.ContainsAny(s, " \t/") || strings.Count(s, ":") > 1 {
		return nil, fmt.Errorf("%w: --chown=%s: give user[:group], by name or number", ErrSyntax, s)
	}
	o := &Owner{User: user, Group: group, UID: -1, GID: -1}
	if n, err := strconv.ParseUint(user, 10, 31); err == nil {
		o.UID = int(n)
		if !hasGroup {
			o.GID = o.UID
		}
	}
	if n, err := strconv.ParseUint(group, 10, 31); err == nil {
		o.GID = int(n)
	}
	return o, nil
}

// contextPath cleans a COPY source into a path relative to the context's
// root; an absolute source is relative to the root, as Docker has it, and
// one that climbs out of it is ErrEscapes.
func contextPath(src string) (string, error) {
	p := path.Clean(src)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("source %s %w", src, ErrEscapes)
	}
	p = strings.TrimLeft(p, "/")
	if p == "" {
		p = "."
	}
	return p, nil
}

// destPath makes a COPY destination absolute (relative to workdir) and
// clean, ending in "/" when it names a directory: written with a trailing
// "/", as "." or "..", or the root.
func destPath(dest, workdir string) string {
	dir := strings.HasSuffix(dest, "/") || dest == "." || dest == ".." ||
		strings.HasSuffix(dest, "/.") || strings.HasSuffix(dest, "/..")
	if !path.IsAbs(dest) {
		dest = path.Join(workdir, dest)
	}
	dest = path.Clean(dest)
	if dir && dest != "/" {
		dest += "/"
	}
	return dest
}

// workdirStep plans a WORKDIR: a relative one is joined to the one in
// effect.
func (pl *planner) workdirStep(in *instruction, st *Step) error {
	w, err := expandWord(pl.lex, in.args[0], pl.env())
	if err != nil {
		return lineError(in, err)
	}
	if w == "" {
		return lineErrorf(in, "%w: WORKDIR expands to nothing", ErrSyntax)
	}
	if !path.IsAbs(w) {
		w = path.Join(pl.workdir(), w)
	}
	w = path.Clean(w)
	pl.p.Config.WorkingDir = w
	st.Kind, st.WorkDir, st.Expanded = KindWorkdir, w, canonical("WORKDIR", nil, w)
	return nil
}

// pairs plans an ENV or a LABEL: every key and value is expanded with the
// variables as they were before the instruction, as Docker does.
func (pl *planner) pairs(in *instruction, st *Step) error {
	kw := strings.ToUpper(in.cmd)
	env := pl.env()
	var kv, words []string
	for i := 0; i+1 < len(in.args); i += 3 {
		k, err := expandWord(pl.lex, in.args[i], env)
		if err != nil {
			return lineError(in, err)
		}
		v, err := expandWord(pl.lex, in.args[i+1], env)
		if err != nil {
			return lineError(in, err)
		}
		if k == "" || (in.cmd == "env" && strings.ContainsAny(k, "=\x00")) {
			return lineErrorf(in, "%w: %s name %q is empty or has = in it", ErrSyntax, kw, k)
		}
		kv = append(kv, k+"="+v)
		words = append(words, k, v)
	}
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		if in.cmd == "env" {
			pl.p.Config.Env = setEnv(pl.p.Config.Env, k, v)
			continue
		}
		if pl.p.Config.Labels == nil {
			pl.p.Config.Labels = map[string]string{}
		}
		pl.p.Config.Labels[k] = v
	}
	st.Kind, st.Expanded = KindConfig, canonical(kw, nil, words...)
	return nil
}

// arg plans an ARG after FROM.
func (pl *planner) arg(in *instruction, st *Step) error {
	var words []string
	for _, w := range in.args {
		if err := pl.args.declare(w, pl.lex, pl.env(), pl.f.buildArgs, pl.f.global); err != nil {
			return lineError(in, err)
		}
		name, _, _ := strings.Cut(w, "=")
		if v, ok := pl.args.get(name); ok {
			name += "=" + v // a name has no "=": unambiguous
		}
		words = append(words, name)
	}
	st.Kind, st.Expanded = KindConfig, canonical("ARG", nil, words...)
	return nil
}

// user plans a USER.
func (pl *planner) user(in *instruction, st *Step) error {
	u, err := expandWord(pl.lex, in.args[0], pl.env())
	if err != nil {
		return lineError(in, err)
	}
	if u == "" || strings.ContainsAny(u, " \t") {
		return lineErrorf(in, "%w: USER %q: give user[:group], by name or number", ErrSyntax, u)
	}
	pl.p.Config.User, pl.userChanged = u, true
	st.Kind, st.User, st.Expanded = KindConfig, u, canonical("USER", nil, u)
	return nil
}

// command plans a CMD, an ENTRYPOINT or a SHELL. An ENTRYPOINT clears the
// CMD the base image had, unless a CMD came before it here, as Docker
// does.
func (pl *planner) command(in *instruction, st *Step) error {
	argv, err := pl.argv(in)
	if err != nil {
		return err
	}
	switch in.cmd {
	case "cmd":
		pl.p.Config.Cmd, pl.cmdSet = argv, true
	case "entrypoint":
		pl.p.Config.Entrypoint = argv
		if !pl.cmdSet {
			pl.p.Config.Cmd = nil
		}
	case "shell":
		pl.shell = argv
	}
	st.Kind, st.Expanded = KindConfig, canonical(strings.ToUpper(in.cmd), nil, argv...)
	return nil
}

// exposeSpec is a port or range with an optional protocol.
var exposeSpec = regexp.MustCompile(`^[0-9]{1,5}(-[0-9]{1,5})?(/(tcp|udp|sctp))?$`)

// metadata plans what a hearth sandbox keeps only as a record: EXPOSE,
// VOLUME, STOPSIGNAL and MAINTAINER (which Docker does not expand).
func (pl *planner) metadata(in *instruction, st *Step) error {
	var words []string
	for _, a := range in.args {
		switch in.cmd {
		case "maintainer":
			words = append(words, a)
		case "expose": // one word may expand to several ports
			ws, err := expandWords(pl.lex, a, pl.env())
			if err != nil {
				return lineError(in, err)
			}
			words = append(words, ws...)
		default:
			w, err := expandWord(pl.lex, a, pl.env())
			if err != nil {
				return lineError(in, err)
			}
			words = append(words, w)
		}
	}
	for i, w := range words {
		switch {
		case in.cmd == "expose" && !exposeSpec.MatchString(w):
			return lineErrorf(in, "%w: EXPOSE %q: give port[-port][/tcp|udp|sctp]", ErrSyntax, w)
		case in.cmd == "expose" && !strings.Contains(w, "/"):
			words[i] = w + "/tcp"
		case strings.TrimSpace(w) == "":
			return lineErrorf(in, "%w: %s of nothing", ErrSyntax, strings.ToUpper(in.cmd))
		}
	}
	switch in.cmd {
	case "expose":
		pl.p.ExposedPorts = appendNew(pl.p.ExposedPorts, words...)
	case "volume":
		pl.p.Volumes = appendNew(pl.p.Volumes, words...)
	case "stopsignal":
		pl.p.StopSignal = words[0]
	case "maintainer":
		pl.p.Maintainer = words[0]
	}
	st.Kind, st.Expanded = KindConfig, canonical(strings.ToUpper(in.cmd), nil, words...)
	return nil
}

// appendNew appends the words not yet in list.
func appendNew(list []string, words ...string) []string {
	for _, w := range words {
		if !slices.Contains(list, w) {
			list = append(list, w)
		}
	}
	return list
}
