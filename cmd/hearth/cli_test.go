package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantPos []string
		wantErr bool
		mode    string
		parents bool
		json    bool
	}{
		{name: "none", args: nil, wantPos: nil},
		{name: "positional only", args: []string{"sb", "/a"}, wantPos: []string{"sb", "/a"}},
		{name: "flags before", args: []string{"--json", "--mode", "0755", "sb", "/a"}, wantPos: []string{"sb", "/a"}, mode: "0755", json: true},
		{name: "flags after", args: []string{"sb", "/a", "--parents", "--json"}, wantPos: []string{"sb", "/a"}, parents: true, json: true},
		{name: "flags between", args: []string{"sb", "-mode=600", "/a"}, wantPos: []string{"sb", "/a"}, mode: "600"},
		{name: "double dash ends flags", args: []string{"sb", "--", "-weird", "--json"}, wantPos: []string{"sb", "-weird", "--json"}},
		{name: "unknown flag", args: []string{"sb", "--nope"}, wantErr: true},
		{name: "missing value", args: []string{"sb", "--mode"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cli{stdout: &bytes.Buffer{}}
			fs := c.clientFlagSet("fs write", "NAME PATH", "")
			mode := fs.String("mode", "", "")
			parents := fs.Bool("parents", false, "")
			pos, err := fs.parse(tt.args)
			if tt.wantErr {
				var ue *usageError
				if !errors.As(err, &ue) {
					t.Fatalf("parse(%q) error = %v, want a usageError", tt.args, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q) error = %v", tt.args, err)
			}
			if !slices.Equal(pos, tt.wantPos) {
				t.Errorf("parse(%q) = %q, want %q", tt.args, pos, tt.wantPos)
			}
			if *mode != tt.mode || *parents != tt.parents || c.json != tt.json {
				t.Errorf("parse(%q) set mode=%q parents=%v json=%v, want %q %v %v", tt.args, *mode, *parents, c.json, tt.mode, tt.parents, tt.json)
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out}
	fs := c.clientFlagSet("get", "NAME", "Show one sandbox.")
	_, err := fs.parse([]string{"-h"})
	if !errors.Is(err, errHelpShown) {
		t.Fatalf("parse(-h) error = %v, want errHelpShown", err)
	}
	for _, want := range []string{"Usage: hearth get NAME", "Show one sandbox.", "--json", "--url", "--token"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage = %q, want it to contain %q", out.String(), want)
		}
	}
}

func TestParseExec(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantName  string
		wantWords []string
		wantReq   sandbox.ExecRequest
		wantErr   bool
	}{
		{
			name: "plain", args: []string{"sb", "--", "ls", "-l"},
			wantName: "sb", wantWords: []string{"ls", "-l"},
			wantReq: sandbox.ExecRequest{Argv: []string{"ls", "-l"}},
		},
		{
			name: "no double dash", args: []string{"sb", "ls", "-l", "--json"},
			wantName: "sb", wantWords: []string{"ls", "-l", "--json"},
			wantReq: sandbox.ExecRequest{Argv: []string{"ls", "-l", "--json"}},
		},
		{
			name: "flags before name", args: []string{"--env", "A=1", "--cwd", "/tmp", "sb", "--", "pwd"},
			wantName: "sb", wantWords: []string{"pwd"},
			wantReq: sandbox.ExecRequest{Argv: []string{"pwd"}, Env: map[string]string{"A": "1"}, Cwd: "/tmp"},
		},
		{
			name: "flags after name", args: []string{"sb", "--env", "A=1", "--env", "B=x=y", "--timeout", "5s", "--stdin", "--", "cat"},
			wantName: "sb", wantWords: []string{"cat"},
			wantReq: sandbox.ExecRequest{Argv: []string{"cat"}, Env: map[string]string{"A": "1", "B": "x=y"}, Timeout: sandbox.Duration(5 * time.Second), Stdin: true},
		},
		{
			name: "shell joins words", args: []string{"sb", "--shell", "--", "echo", "$HOME", "|", "wc"},
			wantName: "sb", wantWords: []string{"echo", "$HOME", "|", "wc"},
			wantReq: sandbox.ExecRequest{Shell: "echo $HOME | wc"},
		},
		{
			name: "command flags stay the command's", args: []string{"sb", "--", "--json", "--timeout"},
			wantName: "sb", wantWords: []string{"--json", "--timeout"},
			wantReq: sandbox.ExecRequest{Argv: []string{"--json", "--timeout"}},
		},
		{name: "bad env", args: []string{"sb", "--env", "NOEQUALS", "--", "true"}, wantErr: true},
		{name: "bad timeout", args: []string{"sb", "--timeout", "soon", "--", "true"}, wantErr: true},
		{name: "missing command", args: []string{"sb", "--"}, wantName: "sb", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cli{stdout: &bytes.Buffer{}}
			fs := c.clientFlagSet("exec", "", "")
			opts := execOptions{env: envFlag{}}
			fs.Var(opts.env, "env", "")
			fs.StringVar(&opts.cwd, "cwd", "", "")
			fs.DurationVar(&opts.timeout, "timeout", 0, "")
			fs.BoolVar(&opts.shell, "shell", false, "")
			fs.BoolVar(&opts.stdin, "stdin", false, "")
			name, words, err := fs.parseCommand(tt.args)
			var req sandbox.ExecRequest
			if err == nil {
				req, err = execRequest(opts, words)
			}
			if tt.wantErr {
				var ue *usageError
				if !errors.As(err, &ue) {
					t.Fatalf("parse exec %q error = %v, want a usageError", tt.args, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse exec %q error = %v", tt.args, err)
			}
			if name != tt.wantName || !slices.Equal(words, tt.wantWords) {
				t.Errorf("parseCommand(%q) = %q, %q, want %q, %q", tt.args, name, words, tt.wantName, tt.wantWords)
			}
			if got, want := mustJSON(t, req), mustJSON(t, tt.wantReq); got != want {
				t.Errorf("execRequest(%q) = %s, want %s", tt.args, got, want)
			}
		})
	}
}

// TestUsageErrors checks that every verb answers bad flags and arguments
// with exit 2, an error line and a hint naming its usage, before it needs a
// daemon.
func TestUsageErrors(t *testing.T) {
	tests := [][]string{
		{},
		{"frobnicate"},
		{"create", "a", "b"},
		{"create", "--ttl", "forever"},
		{"create", "--nope"},
		{"list", "extra"},
		{"get"},
		{"get", "a", "b"},
		{"destroy"},
		{"exec"},
		{"exec", "sb"},
		{"exec", "sb", "--timeout=-1s", "--", "true"},
		{"fs"},
		{"fs", "cp", "sb", "/a"},
		{"fs", "read", "sb"},
		{"fs", "write", "sb", "/a", "--mode", "999"},
		{"fs", "chmod", "sb", "rwx", "/a"},
		{"fs", "mv", "sb", "/a"},
		{"fs", "rm", "sb", "/a", "--force"},
		{"version", "extra"},
		{"help", "nope"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, noEnv, nil, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("run(%q) = %d, want %d; stderr:\n%s", args, code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), "error: ") || !strings.Contains(stderr.String(), "\nhint: ") {
				t.Errorf("run(%q) stderr = %q, want error and hint lines", args, stderr.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"help"}, {"help", "exec"}, {"create", "-h"}, {"list", "--help"},
		{"exec", "-h"}, {"fs", "-h"}, {"fs", "write", "-h"}, {"help", "fs"}, {"version", "-h"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, noEnv, nil, &stdout, &stderr); code != 0 {
			t.Errorf("run(%q) = %d, want 0; stderr: %s", args, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "Usage: hearth") {
			t.Errorf("run(%q) stdout = %q, want usage", args, stdout.String())
		}
	}
}

func TestWantsJSON(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--json"}, true},
		{[]string{"-json"}, true},
		{[]string{"--listen", "x", "--json=true"}, true},
		{[]string{"--json=false"}, false},
		{[]string{"--", "--json"}, false},
		{[]string{"json"}, false},
	}
	for _, tt := range tests {
		if got := wantsJSON(tt.args); got != tt.want {
			t.Errorf("wantsJSON(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

func noEnv(string) string { return "" }

// count tells how many of words equal w.
func count(words []string, w string) int {
	n := 0
	for _, x := range words {
		if x == w {
			n++
		}
	}
	return n
}

// FuzzParseCommand checks that exec's parsing never panics and never loses
// or reorders the words after "--".
func FuzzParseCommand(f *testing.F) {
	f.Add("sb --env A=1 -- echo --json")
	f.Add("--timeout 5s sb --shell -- a b")
	f.Add("-- -- --")
	f.Add("-timeout 0 -shell -- 0")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		c := &cli{stdout: &bytes.Buffer{}}
		fs := c.clientFlagSet("exec", "", "")
		opts := execOptions{env: envFlag{}}
		fs.Var(opts.env, "env", "")
		fs.DurationVar(&opts.timeout, "timeout", 0, "")
		fs.BoolVar(&opts.shell, "shell", false, "")
		name, words, err := fs.parseCommand(args)
		if err != nil || name == "" {
			return
		}
		// Where the name came from is known only when it occurs once (it
		// may equal a flag's value or be "--" itself).
		if i := slices.Index(args, "--"); i >= 0 && count(args, name) == 1 && slices.Index(args, name) < i {
			if tail := args[i+1:]; len(words) < len(tail) || !slices.Equal(words[len(words)-len(tail):], tail) {
				t.Errorf("parseCommand(%q) words = %q, want them to end with %q", args, words, tail)
			}
		}
	})
}
