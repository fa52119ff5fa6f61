package execstream_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/sandbox"
)

// procs runs every command as writing out to stdout, after reading stdin
// into in.
type procs struct {
	out string
	in  []byte
	req sandbox.ExecRequest
}

func (p *procs) Exec(_ context.Context, _ sandbox.Principal, _ string, req sandbox.ExecRequest, stdin io.Reader, stdout, _ io.Writer) (sandbox.ExecResult, error) {
	p.req = req
	if stdin != nil {
		p.in, _ = io.ReadAll(stdin)
	}
	io.WriteString(stdout, p.out)
	return sandbox.ExecResult{ExitCode: 7}, nil
}

// files keeps what is written.
type files struct {
	path string
	data []byte
}

func (f *files) WriteFile(_ context.Context, _ sandbox.Principal, _ string, req sandbox.WriteRequest, r io.Reader) (sandbox.FileInfo, error) {
	f.path = req.Path
	f.data, _ = io.ReadAll(r)
	return sandbox.FileInfo{}, nil
}

func (f *files) MaxWriteBytes() int64 { return 1 << 20 }

// TestRunMaxOutput: the long-output option keeps head and tail, passes the
// output on live, saves the whole stream, and never reaches the sandbox.
func TestRunMaxOutput(t *testing.T) {
	out := strings.Repeat("0123456789", 100)
	p, f := &procs{out: out}, &files{}
	x := execstream.New(p, f, nil)
	var live bytes.Buffer
	res, err := x.Run(t.Context(), execstream.Call{Sandbox: "sb", Request: sandbox.ExecRequest{Shell: "x", MaxOutputBytes: 100}, Stdout: &live})
	if err != nil {
		t.Fatal(err)
	}
	o := res.Output
	switch {
	case p.req.MaxOutputBytes != 0:
		t.Errorf("the sandbox saw MaxOutputBytes %d", p.req.MaxOutputBytes)
	case res.ExitCode != 7 || o == nil || !o.Truncated || o.StdoutBytes != 1000 || live.String() != out:
		t.Errorf("Run = %+v, output %+v, live %d bytes; want exit 7, cut, 1000 bytes, all live", res, o, live.Len())
	case !strings.HasPrefix(o.Stdout, out[:50]+"\n[… 900 bytes cut; full output in /home/sandbox/.hearth/exec-") || !strings.HasSuffix(o.Stdout, "…]\n"+out[950:]):
		t.Errorf("Run stdout = %q", o.Stdout)
	case string(f.data) != out || "/home/sandbox/"+f.path != o.StdoutFile:
		t.Errorf("saved %d bytes at %q; want %d at %q", len(f.data), f.path, len(out), o.StdoutFile)
	}
}

// TestInput: the framing of a streamed script and stdin.
func TestInput(t *testing.T) {
	in := execstream.NewInput(3, true, false)
	go func() {
		io.ReadAll(in.ScriptReader())
	}()
	if v := in.Stdin([]byte("early")); v == nil || !strings.Contains(v.Message, "before the end of the script") {
		t.Errorf("stdin before the script's end = %v", v)
	}
	if v := in.Script([]byte("abcd")); v == nil || !strings.Contains(v.Message, "runs past") {
		t.Errorf("script past shell_size = %v", v)
	}
	if v := in.Script([]byte("abc")); v != nil {
		t.Errorf("script = %v", v)
	}
	if v := in.Script([]byte("d")); v == nil {
		t.Error("script after its end accepted")
	}
	p := &procs{}
	done := make(chan struct{})
	go func() {
		execstream.New(p, &files{}, nil).Run(context.Background(), execstream.Call{Stdin: in.Reader()})
		close(done)
	}()
	if v := in.Stdin([]byte("hi")); v != nil {
		t.Errorf("stdin = %v", v)
	}
	if v := in.EndStdin(); v != nil {
		t.Errorf("end of stdin = %v", v)
	}
	<-done
	if string(p.in) != "hi" {
		t.Errorf("the command read %q; want hi", p.in)
	}
	if v := in.Stdin([]byte("late")); v == nil || !strings.Contains(v.Message, "after its end") {
		t.Errorf("stdin after its end = %v", v)
	}

	none := execstream.NewInput(0, false, false)
	if none.Reader() != nil || none.ScriptReader() != nil {
		t.Error("an input without stdin or script has readers")
	}
	if v := none.Stdin([]byte("x")); v == nil || !strings.Contains(v.Message, `did not set "stdin"`) {
		t.Errorf("stdin not asked for = %v", v)
	}

	ctl := execstream.NewInput(0, false, true)
	r, ok := ctl.Reader().(sandbox.ExecControls)
	if !ok {
		t.Fatal("an input with controls is no ExecControls")
	}
	ctl.Control(sandbox.ExecControl{Signal: "TERM"})
	ctl.Ended(io.EOF)
	if c := <-r.Controls(); c.Signal != "TERM" {
		t.Errorf("control = %+v", c)
	}
	if b, err := io.ReadAll(ctl.Reader()); len(b) != 0 || err != nil {
		t.Errorf("stdin without stdin asked for = %q, %v; want empty", b, err)
	}
}

// TestChunked: writes go out in order, in pieces of at most the chunk.
func TestChunked(t *testing.T) {
	var parts []string
	w := execstream.Chunked(4, func(p []byte) error { parts = append(parts, string(p)); return nil })
	if n, err := w.Write([]byte("abcdefghij")); n != 10 || err != nil || strings.Join(parts, "|") != "abcd|efgh|ij" {
		t.Errorf("Write = %d, %v, parts %q", n, err, parts)
	}
}
