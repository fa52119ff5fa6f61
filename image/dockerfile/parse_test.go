package dockerfile_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hearth/hearth/image/dockerfile"
	"github.com/hearth/hearth/sandbox"
)

// mustPlan parses src with args and plans it against base.
func mustPlan(t *testing.T, src string, args map[string]string, base sandbox.ImageConfig) *dockerfile.Plan {
	t.Helper()
	f, err := dockerfile.Parse(strings.NewReader(src), args)
	if err != nil {
		t.Fatalf("Parse(%q) = %v", src, err)
	}
	p, err := f.Plan(base)
	if err != nil {
		t.Fatalf("Plan(%q) = %v", src, err)
	}
	return p
}

// planErr parses and plans src, which must fail with an *Error.
func planErr(t *testing.T, src string, args map[string]string) *dockerfile.Error {
	t.Helper()
	f, err := dockerfile.Parse(strings.NewReader(src), args)
	if err == nil {
		_, err = f.Plan(sandbox.ImageConfig{})
	}
	if err == nil {
		t.Fatalf("Parse and Plan(%q) succeeded, want an error", src)
	}
	var de *dockerfile.Error
	if !errors.As(err, &de) {
		t.Fatalf("Parse and Plan(%q) = %v (%T), want a *dockerfile.Error", src, err, err)
	}
	return de
}

// lastStep is the plan's last step.
func lastStep(t *testing.T, p *dockerfile.Plan) dockerfile.Step {
	t.Helper()
	if len(p.Steps) == 0 {
		t.Fatal("plan has no steps")
	}
	return p.Steps[len(p.Steps)-1]
}

var defaultEnv = []string{"PATH=" + dockerfile.DefaultPath}

// TestInstructions plans each supported instruction after a FROM and
// checks the step and the config it leaves.
func TestInstructions(t *testing.T) {
	u := func(n uint32) *uint32 { return &n }
	tests := []struct {
		name   string
		instr  string
		step   dockerfile.Step // the fields compared: Kind, Argv, Expanded, Sources, Dest, Unpack, Chown, Chmod, WorkDir, User
		config sandbox.ImageConfig
	}{
		{"run shell", "RUN make all", dockerfile.Step{Kind: "run", Argv: []string{"/bin/sh", "-c", "make all"}, WorkDir: "/",
			Expanded: `RUN "/bin/sh" "-c" "make all"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"run exec", `RUN ["make", "all"]`, dockerfile.Step{Kind: "run", Argv: []string{"make", "all"}, WorkDir: "/",
			Expanded: `RUN "make" "all"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"run continued", "RUN a \\\n  && b", dockerfile.Step{Kind: "run", Argv: []string{"/bin/sh", "-c", "a   && b"}, WorkDir: "/",
			Expanded: `RUN "/bin/sh" "-c" "a   && b"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"copy", "COPY a b/ /dst/", dockerfile.Step{Kind: "copy", Sources: []string{"a", "b"}, Dest: "/dst/", WorkDir: "/",
			Expanded: `COPY "a" "b" "/dst/"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"copy json", `COPY ["a b", "/d"]`, dockerfile.Step{Kind: "copy", Sources: []string{"a b"}, Dest: "/d", WorkDir: "/",
			Expanded: `COPY "a b" "/d"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"copy chown chmod", "COPY --chown=1000:50 --chmod=0640 --link /abs/./f .", dockerfile.Step{Kind: "copy", Sources: []string{"abs/f"}, Dest: "/",
			Chown: &dockerfile.Owner{User: "1000", Group: "50", UID: 1000, GID: 50}, Chmod: u(0o640), WorkDir: "/",
			Expanded: `COPY --chown="1000:50" --chmod="0640" "abs/f" "/"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"copy chown name", "COPY --chown=node f /f", dockerfile.Step{Kind: "copy", Sources: []string{"f"}, Dest: "/f",
			Chown: &dockerfile.Owner{User: "node", UID: -1, GID: -1}, WorkDir: "/",
			Expanded: `COPY --chown="node" "f" "/f"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"copy chown uid", "COPY --chown=7 f /f", dockerfile.Step{Kind: "copy", Sources: []string{"f"}, Dest: "/f",
			Chown: &dockerfile.Owner{User: "7", UID: 7, GID: 7}, WorkDir: "/",
			Expanded: `COPY --chown="7" "f" "/f"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"add", "ADD x.tar /opt", dockerfile.Step{Kind: "copy", Sources: []string{"x.tar"}, Dest: "/opt", Unpack: true, WorkDir: "/",
			Expanded: `ADD "x.tar" "/opt"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"env", `ENV A=1 B="two words"`, dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `ENV "A" "1" "B" "two words"`},
			sandbox.ImageConfig{Env: append(defaultEnv, "A=1", "B=two words")}},
		{"env legacy", `ENV A one two`, dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `ENV "A" "one two"`},
			sandbox.ImageConfig{Env: append(defaultEnv, "A=one two")}},
		{"workdir", "WORKDIR /srv/app", dockerfile.Step{Kind: "workdir", WorkDir: "/srv/app", Expanded: `WORKDIR "/srv/app"`},
			sandbox.ImageConfig{Env: defaultEnv, WorkingDir: "/srv/app"}},
		{"user", "USER 1000:1000", dockerfile.Step{Kind: "config", WorkDir: "/", User: "1000:1000", Expanded: `USER "1000:1000"`},
			sandbox.ImageConfig{Env: defaultEnv, User: "1000:1000"}},
		{"label", `LABEL a=b "c d"="e f"`, dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `LABEL "a" "b" "c d" "e f"`},
			sandbox.ImageConfig{Env: defaultEnv, Labels: map[string]string{"a": "b", "c d": "e f"}}},
		{"arg", "ARG A=1 B", dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `ARG "A=1" "B"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"cmd shell", "CMD serve --port 80", dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `CMD "/bin/sh" "-c" "serve --port 80"`},
			sandbox.ImageConfig{Env: defaultEnv, Cmd: []string{"/bin/sh", "-c", "serve --port 80"}}},
		{"entrypoint exec", `ENTRYPOINT ["/bin/tini", "--"]`, dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `ENTRYPOINT "/bin/tini" "--"`},
			sandbox.ImageConfig{Env: defaultEnv, Entrypoint: []string{"/bin/tini", "--"}}},
		{"shell", `SHELL ["/bin/bash", "-eu", "-c"]`, dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `SHELL "/bin/bash" "-eu" "-c"`},
			sandbox.ImageConfig{Env: defaultEnv}},
		{"expose", "EXPOSE 80 53/udp", dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `EXPOSE "80/tcp" "53/udp"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"volume", `VOLUME ["/data", "/cache"]`, dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `VOLUME "/data" "/cache"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"stopsignal", "STOPSIGNAL SIGINT", dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `STOPSIGNAL "SIGINT"`}, sandbox.ImageConfig{Env: defaultEnv}},
		{"maintainer", "MAINTAINER Jo <jo@example.com>", dockerfile.Step{Kind: "config", WorkDir: "/", Expanded: `MAINTAINER "Jo <jo@example.com>"`}, sandbox.ImageConfig{Env: defaultEnv}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "FROM scratch\n" + tt.instr + "\n"
			p := mustPlan(t, src, nil, sandbox.ImageConfig{})
			if len(p.Steps) != 1 {
				t.Fatalf("Plan(%q) has %d steps, want 1", src, len(p.Steps))
			}
			got := p.Steps[0]
			if kw, _, _ := strings.Cut(tt.instr, " "); got.Line != 2 || !strings.HasPrefix(got.Instruction, kw+" ") {
				t.Errorf("step line, instruction = %d, %q; want 2, %q", got.Line, got.Instruction, tt.instr)
			}
			cmp := got
			cmp.Line, cmp.Instruction, cmp.Env = 0, "", nil
			if !reflect.DeepEqual(cmp, tt.step) {
				t.Errorf("Plan(%q).Steps[0] =\n %+v\nwant\n %+v", src, cmp, tt.step)
			}
			if !reflect.DeepEqual(p.Config, tt.config) {
				t.Errorf("Plan(%q).Config = %+v, want %+v", src, p.Config, tt.config)
			}
		})
	}
}

// TestRecorded checks what a sandbox does not use but the plan records.
func TestRecorded(t *testing.T) {
	p := mustPlan(t, "FROM scratch\nEXPOSE 80 80/tcp 1000-1010/udp\nVOLUME /data\nVOLUME [\"/data\", \"/x\"]\nSTOPSIGNAL 9\nMAINTAINER me\n", nil, sandbox.ImageConfig{})
	if want := []string{"80/tcp", "1000-1010/udp"}; !reflect.DeepEqual(p.ExposedPorts, want) {
		t.Errorf("ExposedPorts = %q, want %q", p.ExposedPorts, want)
	}
	if want := []string{"/data", "/x"}; !reflect.DeepEqual(p.Volumes, want) {
		t.Errorf("Volumes = %q, want %q", p.Volumes, want)
	}
	if p.StopSignal != "9" || p.Maintainer != "me" {
		t.Errorf("StopSignal, Maintainer = %q, %q; want 9, me", p.StopSignal, p.Maintainer)
	}
}

// TestBaseConfig checks that the plan starts from the base image's config
// and ends with what the Dockerfile changes.
func TestBaseConfig(t *testing.T) {
	base := sandbox.ImageConfig{
		Env: []string{"PATH=/usr/bin", "LANG=C"}, WorkingDir: "/home/u", User: "u", UID: 1000, GID: 1000, Home: "/home/u",
		Entrypoint: []string{"/init"}, Cmd: []string{"bash"}, Labels: map[string]string{"from": "base"},
	}
	p := mustPlan(t, "FROM debian:12\nRUN echo $LANG\nWORKDIR sub\nENV LANG=C.UTF-8\nLABEL x=y\nENTRYPOINT [\"/x\"]\n", nil, base)
	run := p.Steps[0]
	if run.WorkDir != "/home/u" || run.User != "u" || !reflect.DeepEqual(run.Env, base.Env) {
		t.Errorf("RUN step workdir, user, env = %q, %q, %q; want the base's", run.WorkDir, run.User, run.Env)
	}
	want := sandbox.ImageConfig{
		Env: []string{"PATH=/usr/bin", "LANG=C.UTF-8"}, WorkingDir: "/home/u/sub", User: "u", UID: 1000, GID: 1000, Home: "/home/u",
		Entrypoint: []string{"/x"}, Labels: map[string]string{"from": "base", "x": "y"},
	}
	if !reflect.DeepEqual(p.Config, want) {
		t.Errorf("Config = %+v, want %+v (ENTRYPOINT clears the base's CMD)", p.Config, want)
	}
	if base.Env[1] != "LANG=C" || base.Labels["x"] != "" {
		t.Errorf("Plan changed the base config it was given: %+v", base)
	}
	// A CMD before the ENTRYPOINT stays; a USER clears the IDs, to be resolved.
	p = mustPlan(t, "FROM debian:12\nCMD [\"a\"]\nENTRYPOINT [\"b\"]\nUSER root\n", nil, base)
	if !reflect.DeepEqual(p.Config.Cmd, []string{"a"}) || p.Config.User != "root" || p.Config.UID != 0 || p.Config.Home != "" {
		t.Errorf("Config = %+v, want Cmd [a], User root, IDs cleared", p.Config)
	}
}

// TestExpansion checks variables as Docker expands them.
func TestExpansion(t *testing.T) {
	base := sandbox.ImageConfig{Env: []string{"PATH=/bin", "HOME_DIR=/home/x"}}
	tests := []struct{ instr, want string }{
		{"WORKDIR $HOME_DIR", "/home/x"},
		{"WORKDIR ${HOME_DIR}/app", "/home/x/app"},
		{"WORKDIR /${UNSET:-fallback}", "/fallback"},
		{"WORKDIR /${HOME_DIR:+set}", "/set"},
		{"WORKDIR /${UNSET:+set}x", "/x"},
		{`WORKDIR /a\$HOME_DIR`, "/a$HOME_DIR"},
		{"WORKDIR '/$HOME_DIR'", "/$HOME_DIR"},
		{`WORKDIR "/$HOME_DIR"`, "/home/x"},
		{"WORKDIR /${V}", "/from-arg"},
	}
	for _, tt := range tests {
		t.Run(tt.instr, func(t *testing.T) {
			p := mustPlan(t, "FROM scratch\nARG V=from-arg\n"+tt.instr+"\n", nil, base)
			if got := p.Config.WorkingDir; got != tt.want {
				t.Errorf("%s: WorkingDir = %q, want %q", tt.instr, got, tt.want)
			}
		})
	}

	// An ENV sees the variables as they were before it; a later one sees it.
	p := mustPlan(t, "FROM scratch\nENV A=1\nENV A=2 B=$A\nENV C=$A\nLABEL l=$C-${B}\n", nil, sandbox.ImageConfig{})
	if want := []string{"PATH=" + dockerfile.DefaultPath, "A=2", "B=1", "C=2"}; !reflect.DeepEqual(p.Config.Env, want) {
		t.Errorf("Env = %q, want %q", p.Config.Env, want)
	}
	if p.Config.Labels["l"] != "2-1" {
		t.Errorf("label l = %q, want 2-1", p.Config.Labels["l"])
	}
	// An ENV wins over an ARG of the same name.
	p = mustPlan(t, "FROM scratch\nARG X=arg\nENV X=env\nUSER $X\n", nil, sandbox.ImageConfig{})
	if p.Config.User != "env" {
		t.Errorf("USER $X = %q, want env (ENV wins over ARG)", p.Config.User)
	}
	// COPY sources, destination and flags are expanded; RUN is left to the shell.
	p = mustPlan(t, "FROM scratch\nARG SRC=src U=7\nENV DST=/opt\nCOPY --chown=$U:$U ${SRC}/*.go $DST/\nRUN echo $SRC\n", nil, sandbox.ImageConfig{})
	cp := p.Steps[2]
	if !reflect.DeepEqual(cp.Sources, []string{"src/*.go"}) || cp.Dest != "/opt/" || cp.Chown.UID != 7 || cp.Chown.GID != 7 {
		t.Errorf("COPY = sources %q, dest %q, chown %+v; want src/*.go, /opt/, 7:7", cp.Sources, cp.Dest, cp.Chown)
	}
	if run := p.Steps[3]; run.Argv[2] != "echo $SRC" {
		t.Errorf("RUN argv = %q, want the command unexpanded", run.Argv)
	}
	// ${VAR:?message} fails, naming the line.
	de := planErr(t, "FROM scratch\n\nWORKDIR ${NOPE:?must be set}\n", nil)
	if de.Line != 3 || !strings.Contains(de.Error(), "must be set") {
		t.Errorf("error = %v (line %d), want line 3 saying must be set", de, de.Line)
	}
}

// TestArgs checks ARG defaults, --build-arg overrides and ARGs before FROM.
func TestArgs(t *testing.T) {
	src := "ARG REG=docker.io\nARG TAG=12\nFROM ${REG}/library/debian:$TAG\nARG TAG\nARG REG\nARG N=1\nARG EMPTY\nRUN true\n"
	p := mustPlan(t, src, nil, sandbox.ImageConfig{})
	if p.From != "docker.io/library/debian:12" {
		t.Errorf("From = %q, want docker.io/library/debian:12", p.From)
	}
	run := lastStep(t, p)
	for _, kv := range []string{"TAG=12", "REG=docker.io", "N=1"} {
		if !contains(run.Env, kv) {
			t.Errorf("RUN env %q lacks %s", run.Env, kv)
		}
	}
	if envHas(run.Env, "EMPTY") {
		t.Errorf("RUN env %q has EMPTY, an ARG without a value", run.Env)
	}
	if envHas(p.Config.Env, "N") {
		t.Errorf("image env %q has the ARG N: ARGs are not kept in the image", p.Config.Env)
	}

	p = mustPlan(t, src, map[string]string{"TAG": "13", "N": "2", "EMPTY": "e", "UNUSED": "u"}, sandbox.ImageConfig{})
	run = lastStep(t, p)
	if p.From != "docker.io/library/debian:13" || !contains(run.Env, "N=2") || !contains(run.Env, "EMPTY=e") || !contains(run.Env, "TAG=13") {
		t.Errorf("with build args: From %q, RUN env %q; want debian:13, N=2, EMPTY=e, TAG=13", p.From, run.Env)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "UNUSED") {
		t.Errorf("Warnings = %q, want one about UNUSED", p.Warnings)
	}

	p = mustPlan(t, "# syntax=docker/dockerfile:1.7-labs\nFROM scratch\n", nil, sandbox.ImageConfig{})
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "syntax=docker/dockerfile:1.7-labs is ignored") {
		t.Errorf("Warnings = %q, want one that the syntax directive is ignored", p.Warnings)
	}

	// An ARG before FROM is not seen after it unless declared again.
	p = mustPlan(t, "ARG V=1\nFROM scratch\nRUN true\n", nil, sandbox.ImageConfig{})
	if envHas(lastStep(t, p).Env, "V") {
		t.Errorf("RUN env %q has V, declared only before FROM", lastStep(t, p).Env)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func envHas(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// TestDestinations checks COPY destinations against WORKDIR.
func TestDestinations(t *testing.T) {
	tests := []struct{ workdir, dest, want string }{
		{"", "x", "/x"},
		{"", ".", "/"},
		{"/app", ".", "/app/"},
		{"/app", "./", "/app/"},
		{"/app", "sub", "/app/sub"},
		{"/app", "sub/", "/app/sub/"},
		{"/app", "../etc/", "/etc/"},
		{"/app", "/abs", "/abs"},
		{"/app", "..", "/"},
	}
	for _, tt := range tests {
		src := "FROM scratch\n"
		if tt.workdir != "" {
			src += "WORKDIR " + tt.workdir + "\n"
		}
		p := mustPlan(t, src+"COPY f "+tt.dest+"\n", nil, sandbox.ImageConfig{})
		if got := lastStep(t, p).Dest; got != tt.want {
			t.Errorf("WORKDIR %q, COPY f %s: Dest = %q, want %q", tt.workdir, tt.dest, got, tt.want)
		}
	}
}

// TestRunHeredoc checks RUN with inline documents, as BuildKit runs them.
func TestRunHeredoc(t *testing.T) {
	p := mustPlan(t, "FROM scratch\nRUN <<EOF\napt-get update\nmake\nEOF\nRUN cat > /f <<-END\n\thello\n\tEND\n", nil, sandbox.ImageConfig{})
	if got, want := p.Steps[0].Argv, []string{"/bin/sh", "-c", "apt-get update\nmake\n"}; !reflect.DeepEqual(got, want) {
		t.Errorf("bare heredoc argv = %q, want %q", got, want)
	}
	if got, want := p.Steps[1].Argv, []string{"/bin/sh", "-c", "cat > /f <<-END\n\thello\nEND"}; !reflect.DeepEqual(got, want) {
		t.Errorf("heredoc argv = %q, want %q", got, want)
	}
	if p.Steps[1].Line != 6 {
		t.Errorf("line of the second RUN = %d, want 6", p.Steps[1].Line)
	}
	de := planErr(t, "FROM scratch\nRUN <<EOF\n#!/usr/bin/env python3\nprint(1)\nEOF\n", nil)
	if de.Line != 2 || !errors.Is(de, dockerfile.ErrUnsupported) {
		t.Errorf("shebang heredoc: %v, want ErrUnsupported at line 2", de)
	}
}

// TestShell checks that SHELL changes the shell form of later commands.
func TestShell(t *testing.T) {
	p := mustPlan(t, "FROM scratch\nSHELL [\"/bin/bash\", \"-c\"]\nRUN echo hi\nCMD serve\n", nil, sandbox.ImageConfig{})
	if got, want := p.Steps[1].Argv, []string{"/bin/bash", "-c", "echo hi"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RUN argv after SHELL = %q, want %q", got, want)
	}
	if got, want := p.Config.Cmd, []string{"/bin/bash", "-c", "serve"}; !reflect.DeepEqual(got, want) {
		t.Errorf("CMD after SHELL = %q, want %q", got, want)
	}
}

// TestRefused checks every refusal names its line, the instruction and
// the fault.
func TestRefused(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int
		is   error  // nil: no sentinel to test
		says string // in the message
	}{
		{"multi-stage", "FROM golang AS build\nRUN make\n\nFROM debian\nCOPY --from=build /x /x\n", 4, dockerfile.ErrMultiStage, "line 4: FROM debian: multi-stage"},
		{"copy from", "FROM debian\nCOPY --from=golang /x /x\n", 2, dockerfile.ErrMultiStage, "COPY --from"},
		{"healthcheck", "FROM debian\nHEALTHCHECK CMD curl -f http://localhost/\n", 2, dockerfile.ErrUnsupported, "HEALTHCHECK is not supported"},
		{"onbuild", "FROM debian\nONBUILD RUN make\n", 2, dockerfile.ErrUnsupported, "ONBUILD is not supported"},
		{"add url", "FROM debian\nADD https://example.com/x.tgz /x\n", 2, dockerfile.ErrUnsupported, "URL"},
		{"add git", "FROM debian\nADD git@github.com:a/b.git /x\n", 2, dockerfile.ErrUnsupported, "URL"},
		{"copy url", "FROM debian\nCOPY http://example.com/x /x\n", 2, dockerfile.ErrUnsupported, "URL"},
		{"add checksum", "FROM debian\nADD --checksum=sha256:00 x /x\n", 2, dockerfile.ErrUnsupported, "--checksum"},
		{"run mount", "FROM debian\nRUN --mount=type=cache,target=/root/.cache make\n", 2, dockerfile.ErrUnsupported, "RUN --mount"},
		{"run network", "FROM debian\nRUN --network=none make\n", 2, dockerfile.ErrUnsupported, "RUN --network"},
		{"from platform", "FROM --platform=linux/arm64 debian\n", 1, dockerfile.ErrUnsupported, "--platform"},
		{"unknown flag", "FROM debian\nCOPY --parents a /x/\n", 2, dockerfile.ErrUnsupported, "--parents"},
		{"unknown instruction", "FROM debian\nFROBNICATE x\n", 2, nil, "unknown instruction FROBNICATE"},
		{"before from", "RUN make\nFROM debian\n", 1, nil, "before FROM"},
		{"no from", "ARG A=1\n", 1, nil, "no FROM"},
		{"empty", "# nothing\n", 1, dockerfile.ErrSyntax, ""},
		{"escape dotdot", "FROM debian\nWORKDIR /w\n\nCOPY ../secret /x\n", 4, dockerfile.ErrEscapes, "dockerfile: line 4: COPY ../secret /x: source ../secret escapes the build context"},
		{"escape dotdot glob", "FROM debian\nCOPY a/../../*.key /x/\n", 2, dockerfile.ErrEscapes, "escapes"},
		{"escape by arg", "FROM debian\nARG P=..\nCOPY $P/x /x\n", 3, dockerfile.ErrEscapes, "escapes"},
		{"copy heredoc", "FROM debian\nCOPY <<EOF /x\nhi\nEOF\n", 2, dockerfile.ErrUnsupported, "inline document"},
		{"copy one arg", "FROM debian\nCOPY x\n", 2, dockerfile.ErrSyntax, "a source and a destination"},
		{"copy many to file", "FROM debian\nCOPY a b /x\n", 2, dockerfile.ErrSyntax, "ending in /"},
		{"bad chmod", "FROM debian\nCOPY --chmod=u+x a /x\n", 2, dockerfile.ErrUnsupported, "octal"},
		{"bad chown", "FROM debian\nCOPY --chown=a:b:c a /x\n", 2, dockerfile.ErrSyntax, "--chown"},
		{"chown twice", "FROM debian\nCOPY --chown=1 --chown=2 a /x\n", 2, dockerfile.ErrSyntax, "twice"},
		{"bad reference", "FROM Debian:12\n", 1, nil, "bad name"},
		{"empty from", "ARG B\nFROM $B\n", 2, nil, "empty"},
		{"shell not json", "FROM debian\nSHELL /bin/bash -c\n", 2, dockerfile.ErrSyntax, "JSON"},
		{"run nothing", "FROM debian\nRUN []\n", 2, dockerfile.ErrSyntax, "RUN needs"},
		{"cmd nothing", "FROM debian\nCMD\n", 2, dockerfile.ErrSyntax, "CMD needs"},
		{"bad expose", "FROM debian\nEXPOSE http\n", 2, dockerfile.ErrSyntax, "EXPOSE"},
		{"env blank", "FROM debian\nENV =x\n", 2, dockerfile.ErrSyntax, ""},
		{"bad json", "FROM debian\nRUN [\"a\", 1]\n", 2, dockerfile.ErrSyntax, `line 2: RUN ["a", 1]: syntax error: when using JSON array syntax`},
		{"unterminated heredoc", "FROM debian\nRUN <<EOF\necho\n", 2, dockerfile.ErrSyntax, "heredoc"},
		{"bad escape directive", "# escape=xx\nFROM debian\n", 1, dockerfile.ErrSyntax, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			de := planErr(t, tt.src, nil)
			if de.Line != tt.line {
				t.Errorf("error %q names line %d, want %d", de, de.Line, tt.line)
			}
			if tt.is != nil && !errors.Is(de, tt.is) {
				t.Errorf("error %q is not %v", de, tt.is)
			}
			if !strings.Contains(de.Error(), tt.says) || !strings.HasPrefix(de.Error(), "dockerfile: line ") {
				t.Errorf("error = %q, want it to say %q", de, tt.says)
			}
		})
	}
}

// TestTooLarge checks the size limit of a Dockerfile.
func TestTooLarge(t *testing.T) {
	src := "FROM scratch\n" + strings.Repeat("RUN true\n", dockerfile.MaxSize/9+1)
	de := planErr(t, src, nil)
	if !errors.Is(de, dockerfile.ErrTooLarge) || de.Line < 2 {
		t.Errorf("error = %v (line %d), want ErrTooLarge naming a line", de, de.Line)
	}
}

// TestLongInstructionQuoted checks that a message quotes at most a part
// of a long instruction.
func TestLongInstructionQuoted(t *testing.T) {
	de := planErr(t, "FROM scratch\nHEALTHCHECK CMD "+strings.Repeat("x", 5000)+"\n", nil)
	if len(de.Error()) > 400 || len(de.Instruction) < 5000 {
		t.Errorf("message is %d bytes, Instruction %d; want a short message and the whole instruction kept", len(de.Error()), len(de.Instruction))
	}
}
