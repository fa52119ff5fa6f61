package policy

import (
	"bufio"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/hearth/hearth/sandbox"
)

// The destructive-command gate: an exec whose command text matches one of
// a tenant's destructive patterns gets an automatic checkpoint first, so
// that the agent can restore if the result is wrong. The patterns are RE2
// regular expressions matched case-insensitively against the command: the
// shell script, or the argv joined with spaces.

// Gate failure policies: what happens to a destructive command when its
// checkpoint cannot be taken.
const (
	GateRefuse = "refuse" // the command does not run (the default)
	GateAllow  = "allow"  // it runs anyway, and its result says so
)

// Pattern is one destructive-command pattern: Expr, an RE2 regular
// expression matched case-insensitively, and Name, what it catches in
// words (the expression itself for a tenant's own patterns).
type Pattern struct {
	Name, Expr string
}

// DefaultDestructive returns the default patterns: recursive rm, forced
// git pushes, hard resets and forced cleans, SQL DROP and TRUNCATE, mkfs,
// dd writing to a file or device, and database migrations.
func DefaultDestructive() []Pattern {
	return []Pattern{
		{"recursive rm", `\brm\s+(?:\S+\s+)*?(?:-[a-z]*r[a-z]*|--recursive)(?:\s|$)`},
		{"forced git push", `\bgit\s+push\b.*(?:\s--force\b|\s-f\b|\s--force-with-lease\b|\s\+\S)`},
		{"git reset --hard or git clean -f", `\bgit\s+(?:reset\s+--hard|clean\s+-[a-z]*f)`},
		{"DROP TABLE, DATABASE or SCHEMA", `\bdrop\s+(?:table|database|schema)\b`},
		{"TRUNCATE", `\btruncate\b`},
		{"mkfs", `\bmkfs(?:\.\w+)?\b`},
		{"dd of=", `\bdd\b.*\bof=`},
		{"a database migration", `\b(?:db:migrate|migrate|alembic\s+(?:upgrade|downgrade))\b`},
	}
}

// gate is a compiled pattern list.
type gate struct {
	patterns []Pattern
	res      []*regexp.Regexp
}

// compileGate compiles patterns; a bad one is invalid_argument naming it.
func compileGate(patterns []Pattern) (*gate, error) {
	g := &gate{patterns: patterns}
	for i, p := range patterns {
		re, err := regexp.Compile("(?i)" + p.Expr)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "policy.destructive_patterns[%d] %q is not a valid regular expression: %v", i, p.Expr, err).
				WithHint("use RE2 syntax, e.g. %q", `\bdrop\s+table\b`)
		}
		g.res = append(g.res, re)
	}
	return g, nil
}

// tenantPatterns names a tenant's own expressions by themselves.
func tenantPatterns(exprs []string) []Pattern {
	out := make([]Pattern, len(exprs))
	for i, e := range exprs {
		out[i] = Pattern{Name: e, Expr: e}
	}
	return out
}

// Destructive reports the first of l's destructive patterns that command
// matches (the shell script, or the argv joined with spaces).
func (l Limits) Destructive(command string) (Pattern, bool) {
	if l.gate == nil {
		return Pattern{}, false
	}
	for i, re := range l.gate.res {
		if re.MatchString(command) {
			return l.gate.patterns[i], true
		}
	}
	return Pattern{}, false
}

// CommandText is what the gate matches for an exec request.
func CommandText(req sandbox.ExecRequest) string {
	if req.Shell != "" {
		return req.Shell
	}
	return strings.Join(req.Argv, " ")
}

// Matcher matches a command text that arrives in pieces (a shell script
// streamed to the sandbox after its request) against a gate's patterns,
// without holding the text: Write each piece, then Close for what
// Destructive would say of the whole. Each pattern runs as RE2's
// automaton over the stream (regexp.MatchReader), in memory independent
// of the text's length. Write and Close are for one goroutine; Close must
// be called, also on a stream that breaks off, to end the matching.
type Matcher struct {
	patterns []Pattern
	pipes    []*io.PipeWriter
	matched  []bool
	wg       sync.WaitGroup
	closed   bool
}

// Matcher returns a Matcher over l's destructive patterns.
func (l Limits) Matcher() *Matcher {
	m := &Matcher{}
	if l.gate == nil {
		return m
	}
	m.patterns = l.gate.patterns
	m.matched = make([]bool, len(l.gate.res))
	for i, re := range l.gate.res {
		pr, pw := io.Pipe()
		m.pipes = append(m.pipes, pw)
		m.wg.Go(func() {
			m.matched[i] = re.MatchReader(bufio.NewReader(pr))
			io.Copy(io.Discard, pr) // a match ends the reading early
		})
	}
	return m
}

// Write passes p to every pattern. It never fails.
func (m *Matcher) Write(p []byte) (int, error) {
	for _, pw := range m.pipes {
		pw.Write(p)
	}
	return len(p), nil
}

// Close ends the text and reports the first of the patterns (in their
// order) that matched it, as Destructive does. Later calls report the
// same.
func (m *Matcher) Close() (Pattern, bool) {
	if !m.closed {
		m.closed = true
		for _, pw := range m.pipes {
			pw.Close()
		}
		m.wg.Wait()
	}
	for i, ok := range m.matched {
		if ok {
			return m.patterns[i], true
		}
	}
	return Pattern{}, false
}
