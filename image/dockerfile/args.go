package dockerfile

import (
	"errors"
	"fmt"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// argSet is the ARGs declared so far in one scope (before FROM, or the
// stage), in the order declared; an ARG declared without a value and
// given none by a build argument is declared but unset.
type argSet struct {
	names  []string
	values map[string]string
}

// declare reads one ARG word, "name" or "name=default": the default is
// expanded with env, a build argument overrides it, and a name without a
// default takes global's value if global has one.
func (a *argSet) declare(word string, lex *shell.Lex, env shell.EnvGetter, buildArgs map[string]string, global *argSet) error {
	name, def, hasDef := strings.Cut(word, "=")
	if name == "" {
		return fmt.Errorf("%w: ARG %q has no name", ErrSyntax, word)
	}
	if strings.ContainsAny(name, "$\"'") {
		return fmt.Errorf("%w: ARG name %q has $ or a quote", ErrSyntax, name)
	}
	value, set := "", false
	if hasDef {
		v, err := expandWord(lex, def, env)
		if err != nil {
			return err
		}
		value, set = v, true
	}
	if v, ok := buildArgs[name]; ok {
		value, set = v, true
	} else if !hasDef && global != nil {
		value, set = global.get(name)
	}
	if a.values == nil {
		a.values = map[string]string{}
	}
	if !a.declared(name) {
		a.names = append(a.names, name)
	}
	if set {
		a.values[name] = value
	}
	return nil
}

// declared reports whether name was declared in a.
func (a *argSet) declared(name string) bool {
	for _, n := range a.names {
		if n == name {
			return true
		}
	}
	return false
}

// get returns name's value and whether it has one.
func (a *argSet) get(name string) (string, bool) {
	v, ok := a.values[name]
	return v, ok
}

// pairs is the ARGs with a value as "name=value", in declaration order.
func (a *argSet) pairs() []string {
	var kv []string
	for _, n := range a.names {
		if v, ok := a.values[n]; ok {
			kv = append(kv, n+"="+v)
		}
	}
	return kv
}

// env is a's values for the shell lexer.
func (a *argSet) env() shell.EnvGetter { return shell.EnvsFromSlice(a.pairs()) }

// clone copies a.
func (a *argSet) clone() *argSet {
	c := &argSet{names: append([]string(nil), a.names...), values: map[string]string{}}
	for k, v := range a.values {
		c.values[k] = v
	}
	return c
}

// expandWord expands the variables in word with env, as Docker does for
// the instructions that expand them (quotes removed, $VAR, ${VAR},
// ${VAR:-default}, …).
func expandWord(lex *shell.Lex, word string, env shell.EnvGetter) (string, error) {
	r, err := lex.ProcessWordWithMatches(word, env)
	if err != nil {
		return "", fmt.Errorf("expanding %q: %v", word, cause(err))
	}
	return r.Result, nil
}

// expandWords is expandWord that also splits the result into words.
func expandWords(lex *shell.Lex, word string, env shell.EnvGetter) ([]string, error) {
	w, err := lex.ProcessWords(word, env)
	if err != nil {
		return nil, fmt.Errorf("expanding %q: %v", word, cause(err))
	}
	return w, nil
}

// cause is the innermost error the lexer wrapped (its own wrapping
// repeats the word).
func cause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
