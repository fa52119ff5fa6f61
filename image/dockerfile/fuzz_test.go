package dockerfile_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/image/dockerfile"
	"github.com/hearth/hearth/sandbox"
)

// FuzzParse feeds Parse and Plan any text: they never panic, and every
// refusal is an *Error naming a line of the text.
func FuzzParse(f *testing.F) {
	seeds := []string{
		keyedDockerfile,
		"ARG B=debian\nFROM ${B:-x}:${T:-12} AS a\nRUN <<EOF\necho\nEOF\nCOPY --chown=1:2 --chmod=644 [\"a b\", \"/c/\"]\n",
		"# escape=`\nFROM scratch\nRUN echo `\n  hi\nENV A=1 B=\"2 3\" C='$A'\nLABEL \"k\"=v\n",
		"FROM scratch\nENTRYPOINT [\"a\"]\nCMD b\nSHELL [\"/bin/bash\",\"-c\"]\nEXPOSE 1-2/udp\nVOLUME /v\nSTOPSIGNAL 9\nUSER ${U:?x}\n",
		"FROM a\nFROM b\n",
		"FROM a\nCOPY ../x /\nADD http://x/ /\nHEALTHCHECK NONE\nONBUILD RUN x\n",
		"\ufeffFROM a\nWORKDIR ${A:+${B:-c}}\nARG =\nENV \\\n",
		"FROM a\nRUN [\"\\u0000\"]\nCOPY \x00 /\n",
	}
	for _, s := range seeds {
		f.Add(s, "V", "2")
	}
	f.Fuzz(func(t *testing.T, src, argName, argValue string) {
		lines := strings.Count(src, "\n") + 1
		check := func(stage string, err error) {
			if err == nil {
				return
			}
			var de *dockerfile.Error
			if !errors.As(err, &de) {
				t.Fatalf("%s(%q) = %v (%T), want a *dockerfile.Error", stage, src, err, err)
			}
			if de.Line < 1 || de.Line > lines+1 {
				t.Fatalf("%s(%q) = %v: line %d, not one of the text's %d", stage, src, err, de.Line, lines)
			}
			if !strings.HasPrefix(de.Error(), "dockerfile: line ") {
				t.Fatalf("%s(%q) = %q, want it to start with the line", stage, src, de.Error())
			}
		}
		file, err := dockerfile.Parse(bytes.NewReader([]byte(src)), map[string]string{argName: argValue})
		check("Parse", err)
		if err != nil {
			return
		}
		p, err := file.Plan(sandbox.ImageConfig{Env: []string{"PATH=/bin"}, Labels: map[string]string{"a": "b"}})
		check("Plan", err)
		if err != nil {
			return
		}
		for _, st := range p.Steps {
			if st.Line < file.FromLine || st.Kind == "" || st.Expanded == "" {
				t.Fatalf("Plan(%q): step %+v: a line before FROM's, or no kind or no expansion", src, st)
			}
			if st.Kind == dockerfile.KindCopy && (!strings.HasPrefix(st.Dest, "/") || len(st.Sources) == 0) {
				t.Fatalf("Plan(%q): copy step %+v without an absolute destination or sources", src, st)
			}
			for _, s := range st.Sources {
				if s == ".." || strings.HasPrefix(s, "../") || strings.HasPrefix(s, "/") {
					t.Fatalf("Plan(%q): source %q leaves the context", src, s)
				}
			}
		}
	})
}

// tarSeeds are tar streams to start fuzzing from.
func tarSeeds(t testing.TB) [][]byte {
	mk := func(hdrs ...tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hdrs {
			content := ""
			if h.Typeflag == tar.TypeReg {
				content, h.Linkname = h.Linkname, ""
				h.Size = int64(len(content))
			}
			h.Mode = 0o644
			tw.WriteHeader(&h)
			io.WriteString(tw, content)
		}
		tw.Close()
		return b.Bytes()
	}
	return [][]byte{
		mk(tar.Header{Name: "a/", Typeflag: tar.TypeDir}, tar.Header{Name: "a/f", Typeflag: tar.TypeReg, Linkname: "x"},
			tar.Header{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "f"}, tar.Header{Name: "a/h", Typeflag: tar.TypeLink, Linkname: "a/f"}),
		mk(tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ".."}, tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Linkname: "x"}),
		mk(tar.Header{Name: "../x", Typeflag: tar.TypeReg, Linkname: "x"}),
		gzipped(nil, "x"),
	}
}

// outsideOf lists what is under parent and not under dir.
func outsideOf(t *testing.T, parent, dir string) []string {
	var out []string
	for _, p := range listTree(t, parent) {
		if name, _, _ := strings.Cut(p, " "); name != parent && name != dir && !strings.HasPrefix(name, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// FuzzTarContext feeds TarContext any stream: it never panics, never
// writes outside its directory, and leaves the directory empty when it
// refuses the stream.
func FuzzTarContext(f *testing.F) {
	for _, s := range tarSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "ctx")
		bc, err := dockerfile.TarContext(bytes.NewReader(stream), dir, 1<<16)
		if err == nil {
			bc.Close()
		}
		if out := outsideOf(t, parent, dir); len(out) > 0 {
			t.Fatalf("TarContext wrote outside its directory: %q", out)
		}
		if _, serr := os.Lstat(dir); err != nil && serr == nil {
			t.Fatalf("TarContext = %v and left its directory", err)
		}
	})
}

// FuzzAddUnpack feeds ADD any archive: what WriteTar writes has clean,
// relative names, never climbs out, and never passes through a symlink it
// wrote.
func FuzzAddUnpack(f *testing.F) {
	for _, s := range tarSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, archiveBytes []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "a.tar"), archiveBytes, 0o644)
		bc, err := dockerfile.DirContext(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer bc.Close()
		file, _ := dockerfile.Parse(strings.NewReader("FROM scratch\nADD a.tar /d/\n"), nil)
		p, _ := file.Plan(sandbox.ImageConfig{})
		if err := p.Resolve(bc, ""); err != nil {
			return // an xz or zstd start
		}
		b := &cappedBuffer{max: 16 << 20} // a sparse entry may stand for terabytes of zeros
		if err := p.Steps[0].Copies[0].WriteTar(b, bc); err != nil {
			return
		}
		tr := tar.NewReader(&b.Buffer)
		links := map[string]bool{}
		for {
			h, err := tr.Next()
			if err != nil {
				if err != io.EOF {
					t.Fatalf("WriteTar wrote a stream tar cannot read: %v", err)
				}
				return
			}
			name := strings.TrimSuffix(h.Name, "/")
			if name == "" || name != path.Clean(name) || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
				t.Fatalf("WriteTar wrote the name %q", h.Name)
			}
			for d := path.Dir(name); d != "."; d = path.Dir(d) {
				if links[d] {
					t.Fatalf("WriteTar wrote %q under its symlink %q", h.Name, d)
				}
			}
			if h.Typeflag == tar.TypeSymlink {
				links[name] = true
			}
		}
	})
}

// cappedBuffer is a bytes.Buffer that refuses to grow past max.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.Len()+len(p) > c.max {
		return 0, errors.New("over the test's cap")
	}
	return c.Buffer.Write(p)
}
