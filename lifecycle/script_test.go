package lifecycle_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// bigScript is a shell script of about n bytes that writes ok to its
// stdout and then runs last.
func bigScript(n int, last string) string {
	pad := strings.Repeat("# padding of a long generated script\n", n/37+1)
	return pad + "echo ok\n" + last + "\n"
}

// streamed is an exec request whose script follows it (ShellSize).
func streamed(script string) sandbox.ExecRequest {
	return sandbox.ExecRequest{ShellSize: int64(len(script)), Script: strings.NewReader(script)}
}

// TestExecStreamedScript: a script that follows its request runs whole; a
// stream shorter than its shell_size, or one that breaks, runs nothing; a
// request with shell_size but no stream is invalid_argument.
func TestExecStreamedScript(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.create(t, a1, "web")
	script := bigScript(300<<10, "touch ran")
	var out bytes.Buffer
	res, err := e.svc.Processes.Exec(ctx, a1, "web", streamed(script), nil, &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "ok\n" {
		t.Fatalf("Exec(%d-byte streamed script) = %+v, %v, %q; want ok", len(script), res, err, out.String())
	}
	e.exec(t, a1, "web", "rm ran")

	short := streamed(script)
	short.ShellSize++
	_, err = e.svc.Processes.Exec(ctx, a1, "web", short, nil, nil, nil)
	wantCode(t, "Exec(script one byte short of shell_size)", err, sandbox.CodeInvalidArgument)

	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(script[:1000]))
		pw.CloseWithError(sandbox.Errorf(sandbox.CodeUnavailable, "the client went away"))
	}()
	_, err = e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{ShellSize: int64(len(script)), Script: pr}, nil, nil, nil)
	wantCode(t, "Exec(script that breaks off)", err, sandbox.CodeUnavailable)

	_, err = e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{ShellSize: 10}, nil, nil, nil)
	wantCode(t, "Exec(shell_size without a stream)", err, sandbox.CodeInvalidArgument)
	if got, _ := e.exec(t, a1, "web", "test -e ran && echo ran || echo no"); got != "no\n" {
		t.Errorf("a script that did not arrive whole ran: %q", got)
	}
}

// TestGateStreamedScript: the destructive-command gate reads a streamed
// script too, to its last line: a destructive one gets its checkpoint
// first, and, when the checkpoint fails, does not run at all.
func TestGateStreamedScript(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.create(t, a1, "web")
	e.exec(t, a1, "web", "mkdir data")
	res, err := e.svc.Processes.Exec(ctx, a1, "web", streamed(bigScript(300<<10, "rm -rf data")), nil, nil, nil)
	if err != nil || res.ExitCode != 0 || res.Checkpoint == "" || !strings.Contains(res.Gate, "recursive rm") {
		t.Fatalf("Exec(streamed script ending in rm -rf) = %+v, %v; want a checkpoint first", res, err)
	}
	if res, err := e.svc.Processes.Exec(ctx, a1, "web", streamed(bigScript(300<<10, "ls")), nil, nil, nil); err != nil || res.Checkpoint != "" || res.Gate != "" {
		t.Errorf("Exec(harmless streamed script) = %+v, %v; want no gate", res, err)
	}

	f := newEnv(t, func(o *envOptions) { o.Layers = failingSnapshots{o.Layers} })
	f.create(t, a1, "web")
	f.exec(t, a1, "web", "mkdir keep")
	_, err = f.svc.Processes.Exec(ctx, a1, "web", streamed("touch ran\n"+bigScript(300<<10, "rm -r keep")), nil, nil, nil)
	wantCode(t, "Exec(streamed destructive script when the checkpoint fails)", err, sandbox.CodeUnavailable)
	if got, _ := f.exec(t, a1, "web", "test -e ran || test ! -d keep && echo ran || echo no"); got != "no\n" {
		t.Errorf("the refused streamed script ran: %q", got)
	}
}
