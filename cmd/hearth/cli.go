package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hearth/hearth/client"
)

// cli is one invocation: its environment and streams, and the settings the
// common flags (--json, --url, --token) fill in as they are parsed.
type cli struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer

	json  bool   // --json
	url   string // --url
	token string // --token

	// tokenSource says where the token in use came from, for the hint of an
	// unauthenticated error; set by client.
	tokenSource string
}

// flagSet is a verb's flags plus what its -h prints.
type flagSet struct {
	*flag.FlagSet
	verb    string
	args    string // the synopsis after "hearth <verb>", e.g. "NAME PATH [--mode 0644]"
	summary string
	out     io.Writer
	json    *bool // the cli's --json
}

// flagSet starts the flags of a verb that does not talk to the daemon: only
// --json (and -h) are common.
func (c *cli) flagSet(verb, args, summary string) *flagSet {
	fs := flag.NewFlagSet("hearth "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by report and parse
	fs.Usage = func() {}
	fs.BoolVar(&c.json, "json", false, "print machine-readable JSON instead of human output")
	return &flagSet{FlagSet: fs, verb: verb, args: args, summary: summary, out: c.stdout, json: &c.json}
}

// given is the names of the flags the command line set.
func (fs *flagSet) given() map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// clientFlagSet starts the flags of a verb that talks to the daemon: --json,
// --url and --token.
func (c *cli) clientFlagSet(verb, args, summary string) *flagSet {
	fs := c.flagSet(verb, args, summary)
	fs.StringVar(&c.url, "url", "", "daemon `URL` (default $HEARTH_URL, else "+defaultURL+")")
	fs.StringVar(&c.token, "token", "", "API `TOKEN` (default $HEARTH_TOKEN, else the local operator token file)")
	return fs
}

// parse parses args, letting flags come before and after positional
// arguments (the flag package alone stops at the first non-flag), and
// returns the positional arguments. After "--" everything is positional.
// -h prints the usage and returns errHelpShown; a bad flag is a usageError.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fs.parseError(err, args)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// parseCommand parses the flags of a verb shaped "VERB [flags] NAME [flags]
// [--] WORDS...": it returns NAME and the words, which are never parsed as
// flags of hearth. name is "" when args hold no positional argument.
func (fs *flagSet) parseCommand(args []string) (name string, words []string, err error) {
	if err := fs.Parse(args); err != nil {
		return "", nil, fs.parseError(err, args)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", nil, nil
	}
	name = rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return "", nil, fs.parseError(err, rest[1:])
	}
	return name, fs.Args(), nil
}

// parseError turns a parse error of args into errHelpShown or a
// usageError. Parsing stopped at the bad flag, so a --json after it is
// looked for by hand: the error object is what that caller reads.
func (fs *flagSet) parseError(err error, args []string) error {
	if errors.Is(err, flag.ErrHelp) {
		fs.printUsage()
		return errHelpShown
	}
	if wantsJSON(args) {
		*fs.json = true
	}
	// The flag package spells flags with one dash; hearth documents two.
	msg := strings.NewReplacer(": -", ": --", "flag -", "flag --", "for -", "for --").Replace(err.Error())
	return &usageError{verb: fs.verb, msg: msg}
}

// printUsage writes the verb's synopsis, summary and flags, spelled with two
// dashes as the documentation spells them.
func (fs *flagSet) printUsage() {
	w := fs.out
	fmt.Fprintf(w, "Usage: hearth %s %s\n\n%s\n\nFlags:\n", fs.verb, fs.args, fs.summary)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		line := "  " + dash + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// client resolves where the daemon is and returns a client for it.
func (c *cli) client() *client.Client {
	cfg := resolveConfig(c.url, c.token, c.getenv, os.ReadFile)
	c.tokenSource = cfg.TokenSource
	return client.New(cfg.URL, cfg.Token, &client.Options{UserAgent: "hearth-cli/" + version()})
}

// printJSON writes v as one indented JSON object and a newline.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// parseArgs parses args as parse does and wants exactly the positional
// arguments names of verb (see wantArgs).
func (fs *flagSet) parseArgs(args []string, verb string, names ...string) ([]string, error) {
	pos, err := fs.parse(args)
	if err != nil {
		return nil, err
	}
	return pos, wantArgs(verb, pos, names...)
}

// wantArgs checks the number of positional arguments of a verb.
func wantArgs(verb string, pos []string, names ...string) error {
	if len(pos) == len(names) {
		return nil
	}
	if len(pos) < len(names) {
		return &usageError{verb: verb, msg: fmt.Sprintf("missing %s", strings.Join(names[len(pos):], " and "))}
	}
	return &usageError{verb: verb, msg: fmt.Sprintf("unexpected argument %q", pos[len(names)])}
}
