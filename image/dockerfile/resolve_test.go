package dockerfile_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/image/dockerfile"
	"github.com/hearth/hearth/sandbox"
)

// baseDigest stands for a pulled base image's digest.
const baseDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// writeTree makes files under dir: a name ending in "/" is a directory,
// content "-> target" a symlink, anything else a file (mode 0644).
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(content, "-> "):
			err = os.Symlink(strings.TrimPrefix(content, "-> "), p)
		default:
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// dirContext opens dir as a context, closed at the test's end.
func dirContext(t *testing.T, dir string) *dockerfile.Context {
	t.Helper()
	bc, err := dockerfile.DirContext(dir)
	if err != nil {
		t.Fatalf("DirContext(%s) = %v", dir, err)
	}
	t.Cleanup(func() { bc.Close() })
	return bc
}

// resolvePlan plans src from a base image and resolves it in dir.
func resolvePlan(t *testing.T, src string, args map[string]string, dir string) (*dockerfile.Plan, error) {
	t.Helper()
	p := mustPlan(t, src, args, sandbox.ImageConfig{Env: []string{"PATH=/bin"}})
	return p, p.Resolve(dirContext(t, dir), baseDigest)
}

// mustResolve is resolvePlan that must succeed.
func mustResolve(t *testing.T, src string, args map[string]string, dir string) *dockerfile.Plan {
	t.Helper()
	p, err := resolvePlan(t, src, args, dir)
	if err != nil {
		t.Fatalf("Resolve(%q) = %v", src, err)
	}
	return p
}

// stepKeys lists a plan's keys.
func stepKeys(p *dockerfile.Plan) []string {
	var k []string
	for _, s := range p.Steps {
		k = append(k, s.Key)
	}
	return k
}

// sameUpTo reports where two key lists start to differ (len if never).
func sameUpTo(a, b []string) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

const keyedDockerfile = `FROM debian:12
ARG V=1
ENV A=1
COPY a.txt /a.txt
RUN make
COPY src/ /src/
WORKDIR /src
RUN make install
`

var keyedTree = map[string]string{"a.txt": "alpha", "src/main.c": "int main;", "src/lib/x.c": "x", "other.txt": "not copied"}

// TestKeysStable checks that the same Dockerfile and context (in two
// directories) give the same keys, all distinct and well-formed.
func TestKeysStable(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	writeTree(t, d1, keyedTree)
	writeTree(t, d2, keyedTree)
	k1 := stepKeys(mustResolve(t, keyedDockerfile, nil, d1))
	// Later modification times do not change keys.
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(d2, "a.txt"), later, later)
	k2 := stepKeys(mustResolve(t, keyedDockerfile, nil, d2))
	if !reflect.DeepEqual(k1, k2) {
		t.Errorf("keys differ for the same Dockerfile and context:\n%q\n%q", k1, k2)
	}
	seen := map[string]bool{}
	for _, k := range k1 {
		if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" || seen[k] {
			t.Errorf("key %q is not 64 hex digits, or repeats", k)
		}
		seen[k] = true
	}
	if len(k1) != 7 {
		t.Errorf("%d keys, want 7", len(k1))
	}
}

// TestKeysChange checks what each change changes.
func TestKeysChange(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, keyedTree)
	orig := stepKeys(mustResolve(t, keyedDockerfile, nil, dir))
	n := len(orig)

	t.Run("last line", func(t *testing.T) {
		src := strings.Replace(keyedDockerfile, "RUN make install", "RUN make check", 1)
		k := stepKeys(mustResolve(t, src, nil, dir))
		if i := sameUpTo(orig, k); i != n-1 {
			t.Errorf("changing the last line: keys differ from step %d, want only the last (%d)", i, n-1)
		}
	})
	t.Run("copied file", func(t *testing.T) {
		d := t.TempDir()
		tr := map[string]string{}
		for k, v := range keyedTree {
			tr[k] = v
		}
		tr["src/lib/x.c"] = "y"
		writeTree(t, d, tr)
		k := stepKeys(mustResolve(t, keyedDockerfile, nil, d))
		if i := sameUpTo(orig, k); i != 4 {
			t.Errorf("changing a file of the second COPY: keys differ from step %d, want 4", i)
		}
		for i := 4; i < n; i++ {
			if k[i] == orig[i] {
				t.Errorf("step %d key unchanged after the COPY before it changed", i)
			}
		}
	})
	t.Run("copied file mode", func(t *testing.T) {
		d := t.TempDir()
		writeTree(t, d, keyedTree)
		os.Chmod(filepath.Join(d, "a.txt"), 0o755)
		k := stepKeys(mustResolve(t, keyedDockerfile, nil, d))
		if i := sameUpTo(orig, k); i != 2 {
			t.Errorf("changing the mode of the first COPY's file: keys differ from step %d, want 2", i)
		}
	})
	t.Run("file not copied", func(t *testing.T) {
		d := t.TempDir()
		writeTree(t, d, keyedTree)
		os.WriteFile(filepath.Join(d, "other.txt"), []byte("changed"), 0o644)
		if k := stepKeys(mustResolve(t, keyedDockerfile, nil, d)); !reflect.DeepEqual(k, orig) {
			t.Errorf("changing a file no COPY copies changed keys")
		}
	})
	t.Run("build arg", func(t *testing.T) {
		k := stepKeys(mustResolve(t, keyedDockerfile, map[string]string{"V": "2"}, dir))
		if i := sameUpTo(orig, k); i != 0 {
			t.Errorf("changing the ARG's value: keys differ from step %d, want 0", i)
		}
	})
	t.Run("base digest", func(t *testing.T) {
		p := mustPlan(t, keyedDockerfile, nil, sandbox.ImageConfig{Env: []string{"PATH=/bin"}})
		if err := p.Resolve(dirContext(t, dir), "sha256:2222222222222222222222222222222222222222222222222222222222222222"); err != nil {
			t.Fatal(err)
		}
		if k := stepKeys(p); k[0] == orig[0] {
			t.Errorf("another base image gives the same first key")
		}
	})
	t.Run("whitespace", func(t *testing.T) {
		src := strings.Replace(keyedDockerfile, "RUN make\n", "RUN    make  \n# a comment\n", 1)
		src = strings.Replace(src, "ENV A=1", "ENV A 1", 1)
		if k := stepKeys(mustResolve(t, src, nil, dir)); !reflect.DeepEqual(k, orig) {
			t.Errorf("reformatting (spaces around a command, a comment, ENV's legacy form): keys differ from step %d", sameUpTo(orig, k))
		}
	})
}

// TestResolveCopies checks what a COPY finds: directories' contents,
// files into and onto destinations, globs, symlinks kept as links.
func TestResolveCopies(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a.go": "package a", "b.go": "package b", "c.txt": "c", "sub/x/y.go": "y", "sub/z.go": "z",
		"sub/link": "-> x/y.go", "sub/out": "-> /etc/passwd", "linkdir": "-> sub", "empty/": "",
	})
	p := mustResolve(t, `FROM debian:12
COPY *.go /g/
COPY sub /s
COPY c.txt /c
COPY linkdir/z.go empty /m/
COPY */*.go /deep/
`, nil, dir)
	type cp struct {
		source, dest string
		names        []string
	}
	summary := func(s dockerfile.Step) []cp {
		var out []cp
		for _, c := range s.Copies {
			x := cp{source: c.Source, dest: c.Dest}
			for _, e := range c.Entries {
				x.names = append(x.names, e.Name+":"+e.Type)
			}
			out = append(out, x)
		}
		return out
	}
	want := [][]cp{
		{{"a.go", "/g", []string{"a.go:file"}}, {"b.go", "/g", []string{"b.go:file"}}},
		{{"sub", "/s", []string{"link:symlink", "out:symlink", "x:dir", "x/y.go:file", "z.go:file"}}},
		{{"c.txt", "/", []string{"c:file"}}},
		{{"linkdir/z.go", "/m", []string{"z.go:file"}}, {"empty", "/m", nil}},
		// A symlink to a directory in the context is followed by a pattern too.
		{{"linkdir/z.go", "/deep", []string{"z.go:file"}}, {"sub/z.go", "/deep", []string{"z.go:file"}}},
	}
	for i, w := range want {
		if got := summary(p.Steps[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("step %d (%s) copies %+v, want %+v", i, p.Steps[i].Instruction, got, w)
		}
	}
	sub := p.Steps[1].Copies[0].Entries
	if sub[1].Link != "/etc/passwd" || sub[0].Link != "x/y.go" {
		t.Errorf("symlinks = %q, %q; want kept as written", sub[0].Link, sub[1].Link)
	}
	if e := p.Steps[2].Copies[0].Entries[0]; e.Size != 1 || e.Digest != "sha256:2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6" || e.Mode != 0o644 || e.Path != "c.txt" {
		t.Errorf("c.txt entry = %+v, want size 1, sha256 of \"c\", mode 0644", e)
	}
	// A symlink on the way to a source is followed in the context.
	if e := p.Steps[3].Copies[0].Entries[0]; e.Path != "sub/z.go" {
		t.Errorf("linkdir/z.go entry path = %q, want sub/z.go (the symlink resolved)", e.Path)
	}
}

// TestResolveRefused checks the sources Resolve refuses, naming the line.
func TestResolveRefused(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret": "s3cret"})
	dir := filepath.Join(t.TempDir(), "ctx")
	writeTree(t, dir, map[string]string{
		"ok": "ok", "abs": "-> " + filepath.Join(outside, "secret"), "rel": "-> ../../" + filepath.Base(filepath.Dir(outside)) + "/" + filepath.Base(outside) + "/secret",
		"up": "-> ..", "d/inner": "-> ../abs", "a.txt": "a", "b.txt": "b",
	})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, copy string
		is         error
	}{
		{"absolute symlink out", "COPY abs /x", dockerfile.ErrEscapes},
		{"relative symlink out", "COPY rel /x", dockerfile.ErrEscapes},
		{"symlink to parent", "COPY up/secret /x", dockerfile.ErrEscapes},
		{"symlink dir out", "COPY up /x/", dockerfile.ErrEscapes},
		{"symlink chain out", "COPY d/inner /x", dockerfile.ErrEscapes},
		{"glob through symlink out", "COPY up/*/secret /x", dockerfile.ErrEscapes},
		{"glob matching a symlink out", "COPY ab* /x/", dockerfile.ErrEscapes},
		{"missing", "COPY nope /x", dockerfile.ErrNotFound},
		{"glob matches nothing", "COPY *.nope /x/", dockerfile.ErrNotFound},
		{"fifo", "COPY fifo /x", dockerfile.ErrUnsupported},
		{"glob of many to a file", "COPY *.txt /x", dockerfile.ErrSyntax},
		{"bad pattern", "COPY [ /x/", dockerfile.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "FROM debian:12\nRUN true\n" + tt.copy + "\n"
			p := mustPlan(t, src, nil, sandbox.ImageConfig{})
			before := *p
			before.Steps = append([]dockerfile.Step(nil), p.Steps...)
			done := make(chan error, 1)
			go func() { done <- p.Resolve(dirContext(t, dir), baseDigest) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Resolve hangs (a FIFO opened?)")
			}
			var de *dockerfile.Error
			if !errors.As(err, &de) || de.Line != 3 || !errors.Is(err, tt.is) {
				t.Fatalf("Resolve(%s) = %v, want an *Error at line 3 that is %v", tt.copy, err, tt.is)
			}
			if !strings.HasPrefix(err.Error(), "dockerfile: line 3: "+tt.copy+": ") {
				t.Errorf("error = %q, want it to start with the line and instruction", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the secret", err)
			}
			if !reflect.DeepEqual(p.Steps, before.Steps) {
				t.Errorf("a failed Resolve changed the plan")
			}
		})
	}
	// The good file still copies, and a context dir that is a symlink's target is fine.
	mustResolve(t, "FROM debian:12\nCOPY ok /x\n", nil, dir)
}

// TestDockerignore checks that .dockerignore hides paths from sources and
// from copied directories, with exceptions.
func TestDockerignore(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		".dockerignore": "# comment\n.env\nbuild\n*.log\n!keep.log\nsecrets/**\n!secrets/public.pem\n",
		".env":          "TOKEN=x", "app.go": "a", "build/out": "o", "x.log": "l", "keep.log": "k",
		"secrets/id_rsa": "k", "secrets/public.pem": "p", "envlink": "-> .env",
	})
	p := mustResolve(t, "FROM debian:12\nCOPY . /app/\n", nil, dir)
	var names []string
	for _, e := range p.Steps[0].Copies[0].Entries {
		names = append(names, e.Name)
	}
	// secrets itself is not matched by secrets/**, as in Docker.
	want := []string{".dockerignore", "app.go", "envlink", "keep.log", "secrets", "secrets/public.pem"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("COPY . copies %q, want %q", names, want)
	}
	for _, src := range []string{".env", "build/out", "x.log", "secrets/id_rsa", "envlink", "*.env"} {
		_, err := resolvePlan(t, "FROM debian:12\nCOPY "+src+" /x/\n", nil, dir)
		if !errors.Is(err, dockerfile.ErrNotFound) {
			t.Errorf("COPY %s (excluded) = %v, want ErrNotFound", src, err)
		}
	}
	mustResolve(t, "FROM debian:12\nCOPY keep.log secrets/public.pem /x/\n", nil, dir)
}

// TestResolveArgs checks Resolve's checks of its arguments.
func TestResolveArgs(t *testing.T) {
	dir := t.TempDir()
	p := mustPlan(t, "FROM debian:12\nRUN true\n", nil, sandbox.ImageConfig{})
	if err := p.Resolve(dirContext(t, dir), ""); err == nil {
		t.Error("Resolve of a registry image without a digest succeeded")
	}
	p = mustPlan(t, "FROM scratch\nRUN true\n", nil, sandbox.ImageConfig{})
	if err := p.Resolve(dirContext(t, dir), baseDigest); err == nil {
		t.Error("Resolve of scratch with a digest succeeded")
	}
	if err := p.Resolve(dirContext(t, dir), ""); err != nil || p.Steps[0].Key == "" {
		t.Errorf("Resolve of scratch = %v, key %q", err, p.Steps[0].Key)
	}
}

// sandboxConfig is a base image's config for tests.
func sandboxConfig() sandbox.ImageConfig { return sandbox.ImageConfig{Env: []string{"PATH=/bin"}} }

// TestConcurrentUse resolves and copies from one context in parallel (run
// with -race).
func TestConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{".dockerignore": "**/*.log\n!a/keep.log\n", "a/x.log": "x", "a/keep.log": "k", "a/f": "f"})
	bc := dirContext(t, dir)
	errs := make(chan error, 8)
	for range 8 {
		p := mustPlan(t, "FROM debian:12\nCOPY a /a/\n", nil, sandboxConfig())
		go func() {
			if err := p.Resolve(bc, baseDigest); err != nil {
				errs <- err
				return
			}
			if n := len(p.Steps[0].Copies[0].Entries); n != 2 {
				errs <- fmt.Errorf("COPY a copies %d entries, want 2", n)
				return
			}
			errs <- p.Steps[0].Copies[0].WriteTar(io.Discard, bc)
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
