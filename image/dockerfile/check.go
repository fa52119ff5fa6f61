package dockerfile

import "strings"

// spec is what Parse checks of an instruction it builds: the flags it
// takes (name → whether the flag is boolean) and its fewest words.
type spec struct {
	flags map[string]bool
	min   int
}

// copyFlags are the flags COPY and ADD take. --link only changes how
// BuildKit stacks layers: hearth applies every COPY to the root it has,
// so the flag is accepted and has no effect.
var copyFlags = map[string]bool{"chown": false, "chmod": false, "link": true}

// specs lists the instructions after FROM that hearth builds.
var specs = map[string]spec{
	"run":        {min: 1},
	"copy":       {flags: copyFlags, min: 2},
	"add":        {flags: copyFlags, min: 2},
	"env":        {min: 1},
	"label":      {min: 1},
	"arg":        {min: 1},
	"workdir":    {min: 1},
	"user":       {min: 1},
	"cmd":        {},
	"entrypoint": {},
	"shell":      {min: 1},
	"expose":     {min: 1},
	"volume":     {min: 1},
	"stopsignal": {min: 1},
	"maintainer": {min: 1},
}

// refusedInstructions are the instructions Docker knows and hearth does
// not build, with why.
var refusedInstructions = map[string]string{
	"healthcheck": "hearth never runs a health check in a sandbox; remove it",
	"onbuild":     "hearth keeps no triggers for the builds of later images; remove it",
}

// refusedFlags are flags Docker knows and hearth refuses, with why;
// "copy --from" and "add --from" are ErrMultiStage.
var refusedFlags = map[string]string{
	"run --mount":        "a RUN sees only its sandbox's root; COPY what it needs first",
	"run --network":      "a RUN runs under its build sandbox's network policy",
	"run --security":     "a RUN runs with its build sandbox's privileges",
	"run --device":       "a RUN gets no host device",
	"add --checksum":     "ADD fetches no URL",
	"add --keep-git-dir": "ADD fetches no git repository",
}

// check refuses an instruction after FROM that hearth does not build, or
// whose flags or word count are wrong.
func check(in *instruction) error {
	kw := strings.ToUpper(in.cmd)
	if why, ok := refusedInstructions[in.cmd]; ok {
		return lineErrorf(in, "%s is %w: %s", kw, ErrUnsupported, why)
	}
	sp, ok := specs[in.cmd]
	if !ok {
		return lineErrorf(in, "unknown instruction %s", kw)
	}
	if err := checkFlags(in, kw, sp); err != nil {
		return err
	}
	if (in.cmd == "copy" || in.cmd == "add") && len(in.heredocs) > 0 {
		return lineErrorf(in, "%s of an inline document (<<) is %w; put the file in the build context", kw, ErrUnsupported)
	}
	n := len(in.args)
	if in.cmd == "env" || in.cmd == "label" {
		n /= 3 // key, value, separator
	}
	if (in.cmd == "cmd" || in.cmd == "entrypoint") && !in.json {
		sp.min = 1
	}
	if n < sp.min {
		need := "an argument"
		if sp.min == 2 {
			need = "a source and a destination"
		}
		return lineErrorf(in, "%w: %s needs %s", ErrSyntax, kw, need)
	}
	if in.cmd == "shell" && !in.json {
		return lineErrorf(in, `%w: SHELL takes the JSON form, e.g. SHELL ["/bin/bash", "-c"]`, ErrSyntax)
	}
	return nil
}

// checkFlags checks in's flags against sp.
func checkFlags(in *instruction, kw string, sp spec) error {
	seen := map[string]bool{}
	for _, f := range in.flags {
		if f.name == "from" && (in.cmd == "copy" || in.cmd == "add") {
			return lineErrorf(in, "%s --from: %w (hearth builds one stage, from the build context)", kw, ErrMultiStage)
		}
		if why, ok := refusedFlags[in.cmd+" --"+f.name]; ok {
			return lineErrorf(in, "%s --%s is %w: %s", kw, f.name, ErrUnsupported, why)
		}
		boolean, ok := sp.flags[f.name]
		switch {
		case !ok:
			return lineErrorf(in, "%s --%s is %w", kw, f.name, ErrUnsupported)
		case seen[f.name]:
			return lineErrorf(in, "%w: %s --%s given twice", ErrSyntax, kw, f.name)
		case boolean && !f.bare && f.value != "true" && f.value != "false":
			return lineErrorf(in, "%w: %s --%s takes true or false, not %q", ErrSyntax, kw, f.name, f.value)
		case !boolean && f.bare:
			return lineErrorf(in, "%w: %s --%s needs a value (--%s=…)", ErrSyntax, kw, f.name, f.name)
		}
		seen[f.name] = true
	}
	return nil
}

// flagValue is the value of in's flag name, and whether it is given.
func (in *instruction) flagValue(name string) (string, bool) {
	for _, f := range in.flags {
		if f.name == name {
			return f.value, true
		}
	}
	return "", false
}
