package dockerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// MaxSize is the largest Dockerfile Parse reads, in bytes.
const MaxSize = 1 << 20

// Scratch is the FROM that starts from an empty root.
const Scratch = "scratch"

// File is a parsed Dockerfile: its one stage's base image and its
// instructions, checked but not yet expanded against the base image's
// config (Plan does that, once the caller has the image).
type File struct {
	// From is the base image as the FROM line names it after the ARGs
	// before FROM are expanded: a registry reference ("debian:12",
	// "127.0.0.1:5000/app@sha256:…") or Scratch.
	From string
	// FromLine is the FROM instruction's line.
	FromLine int
	// Warnings are what the parser and the build arguments left to say:
	// empty continuation lines, a # syntax directive (ignored),
	// --build-arg values no ARG declares.
	Warnings []string

	escape       rune
	instructions []*instruction
	buildArgs    map[string]string
	// global holds the ARGs declared before FROM, with their values
	// (build arguments applied); a re-declaration after FROM without a
	// default takes its value from here, as Docker does.
	global *argSet
}

// instruction is one instruction after FROM as the parser gave it.
type instruction struct {
	line     int
	text     string // as written, continuation lines joined
	cmd      string // the keyword, lower-case
	flags    []flag
	args     []string // the parser's words (for ENV and LABEL: key, value, separator triples)
	json     bool     // exec (JSON) form
	heredocs []parser.Heredoc
}

// flag is one --name[=value] of an instruction.
type flag struct {
	name, value string
	bare        bool // no "=value"
}

// Parse reads a Dockerfile of one stage: ARGs, one FROM, then
// instructions. buildArgs are the --build-arg values; they override an
// ARG's default. Every refusal is an *Error naming the line: a syntax
// error (ErrSyntax), an instruction or flag hearth does not build
// (ErrUnsupported), a second FROM or COPY --from (ErrMultiStage), a
// Dockerfile over MaxSize (ErrTooLarge).
func Parse(r io.Reader, buildArgs map[string]string) (*File, error) {
	src, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("dockerfile: read: %w", err)
	}
	if len(src) > MaxSize {
		return nil, &Error{Line: bytes.Count(src[:MaxSize], []byte("\n")) + 1,
			Err: fmt.Errorf("the Dockerfile is %w: over %d bytes", ErrTooLarge, MaxSize)}
	}
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, syntaxError(err, src)
	}
	f := &File{escape: res.EscapeToken, buildArgs: maps.Clone(buildArgs), global: &argSet{}}
	if syntax, _, _, ok := parser.DetectSyntax(src); ok {
		f.Warnings = append(f.Warnings, fmt.Sprintf("# syntax=%s is ignored: hearth reads the Dockerfile with its own parser", syntax))
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil {
			line = w.Location.Start.Line
		}
		f.Warnings = append(f.Warnings, fmt.Sprintf("line %d: %s", line, w.Short))
	}
	declared := map[string]bool{}
	for _, node := range res.AST.Children {
		in, err := newInstruction(node)
		if err != nil {
			return nil, err
		}
		if in.cmd == "arg" {
			for _, w := range in.args {
				name, _, _ := strings.Cut(w, "=")
				declared[name] = true
			}
		}
		if err := f.add(in); err != nil {
			return nil, err
		}
	}
	if f.FromLine == 0 {
		return nil, &Error{Line: res.AST.EndLine, Err: errors.New("no FROM: a Dockerfile names its base image (or scratch) with FROM")}
	}
	for _, name := range slices.Sorted(maps.Keys(f.buildArgs)) {
		if !declared[name] {
			f.Warnings = append(f.Warnings, fmt.Sprintf("build argument %s is not declared by any ARG: not used", name))
		}
	}
	return f, nil
}

// syntaxError is the *Error for what the parser refused in src, naming
// the line the parser names (the last one if it names none) and quoting it.
func syntaxError(err error, src []byte) error {
	lines := strings.Split(string(src), "\n")
	line := len(lines)
	var le *parser.LocationError
	if errors.As(err, &le) && len(le.Locations) > 0 && len(le.Locations[0]) > 0 {
		line = le.Locations[0][0].Start.Line
	}
	line = min(max(line, 1), len(lines))
	msg := err.Error()
	if le != nil && le.Unwrap() != nil {
		msg = le.Unwrap().Error()
	}
	text := strings.TrimSpace(strings.TrimPrefix(lines[line-1], "\ufeff"))
	return &Error{Line: line, Instruction: text, Err: fmt.Errorf("%w: %s", ErrSyntax, msg)}
}

// newInstruction flattens a parser node.
func newInstruction(node *parser.Node) (*instruction, error) {
	in := &instruction{
		line:     max(node.StartLine, 1),
		text:     strings.TrimSpace(node.Original),
		cmd:      strings.ToLower(node.Value),
		json:     node.Attributes["json"],
		heredocs: node.Heredocs,
	}
	for n := node.Next; n != nil; n = n.Next {
		in.args = append(in.args, n.Value)
	}
	for _, raw := range node.Flags {
		name, value, ok := strings.Cut(raw, "=")
		if !strings.HasPrefix(name, "--") || name == "--" {
			return nil, lineErrorf(in, "%w: bad flag %q", ErrSyntax, raw)
		}
		in.flags = append(in.flags, flag{name: strings.TrimPrefix(name, "--"), value: value, bare: !ok})
	}
	return in, nil
}

// add takes the next instruction in file order.
func (f *File) add(in *instruction) error {
	switch {
	case in.cmd == "from" && f.FromLine != 0:
		return lineErrorf(in, "%w (the stage begins with the FROM at line %d; hearth builds one stage)", ErrMultiStage, f.FromLine)
	case in.cmd == "from":
		return f.from(in)
	case f.FromLine == 0 && in.cmd != "arg":
		return lineErrorf(in, "%s before FROM: only ARG may come before FROM", strings.ToUpper(in.cmd))
	case f.FromLine == 0:
		return f.globalArg(in)
	}
	if err := check(in); err != nil {
		return err
	}
	f.instructions = append(f.instructions, in)
	return nil
}

// from reads the FROM line: FROM image [AS name], image expanded with the
// ARGs before it.
func (f *File) from(in *instruction) error {
	if len(in.flags) > 0 {
		return lineErrorf(in, "FROM --%s is %w: hearth builds for the host's platform", in.flags[0].name, ErrUnsupported)
	}
	switch {
	case len(in.args) == 1:
	case len(in.args) == 3 && strings.EqualFold(in.args[1], "as") && in.args[2] != "":
	default:
		return lineErrorf(in, "%w: FROM takes an image and, optionally, AS name", ErrSyntax)
	}
	image, err := expandWord(shell.NewLex(f.escape), in.args[0], f.global.env())
	if err != nil {
		return lineError(in, err)
	}
	if err := validReference(image); err != nil {
		return lineError(in, err)
	}
	f.From, f.FromLine = image, in.line
	return nil
}

// globalArg reads an ARG before FROM.
func (f *File) globalArg(in *instruction) error {
	lex := shell.NewLex(f.escape)
	for _, w := range in.args {
		if err := f.global.declare(w, lex, f.global.env(), f.buildArgs, nil); err != nil {
			return lineError(in, err)
		}
	}
	if len(in.args) == 0 {
		return lineErrorf(in, "%w: ARG needs a name", ErrSyntax)
	}
	return nil
}

// Regular expressions of an image reference: [host[:port]/]path[:tag][@digest].
var (
	refHost      = regexp.MustCompile(`^(localhost|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*)(:[0-9]+)?$`)
	refComponent = regexp.MustCompile(`^[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*$`)
	refTag       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	refDigest    = regexp.MustCompile(`^[a-z0-9]+([+._-][a-z0-9]+)*:[A-Fa-f0-9]{32,}$`)
)

// validReference checks that ref names an image in a registry (or is
// Scratch), by the distribution reference grammar.
func validReference(ref string) error {
	bad := func(why string) error {
		return fmt.Errorf("FROM %q: %s: name an image as [host[:port]/]name[:tag][@digest] or scratch", ref, why)
	}
	if ref == Scratch {
		return nil
	}
	if ref == "" || len(ref) > 512 {
		return bad("the reference is empty or too long")
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest && !refDigest.MatchString(digest) {
		return bad("bad digest")
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		if !refTag.MatchString(name[i+1:]) {
			return bad("bad tag")
		}
		name = name[:i]
	}
	parts := strings.Split(name, "/")
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		if !refHost.MatchString(parts[0]) {
			return bad("bad registry host")
		}
		parts = parts[1:]
	}
	for _, p := range parts {
		if !refComponent.MatchString(p) {
			return bad("bad name (lowercase letters, digits and . _ - between them)")
		}
	}
	return nil
}
