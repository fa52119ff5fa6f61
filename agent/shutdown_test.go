package agent_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestShutdownWithoutGrace: Shutdown with a context that has already
// ended sends no SIGTERM. A running command's caller sees its connection
// break, never the command's end (which a command ending on SIGTERM could
// report before its connection closed), and the command is killed.
func TestShutdownWithoutGrace(t *testing.T) {
	needRoot(t)
	home := newHome(t)
	sock := shortSocket(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(agent.Options{UID: nobody, GID: nobody, Home: home, Env: testEnv(home)})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var out testenv.Buffer
	done := make(chan error, 1)
	execCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	go func() {
		// The trap answers a SIGTERM at once (the loop runs no other
		// program, so the shell runs it between two of its own steps):
		// it leaves a file in the home, and says so on the output.
		_, err := agent.NewClient(dialer(sock)).Exec(execCtx,
			sandbox.ExecRequest{Shell: "trap 'echo > term; echo TERM; exit 0' TERM; echo up; while :; do :; done"}, nil, &out, nil)
		done <- err
	}()
	out.WaitFor(t, "up\n", 10*time.Second)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Shutdown(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown(an ended context) = %v, want context.Canceled", err)
	}
	if err := <-done; !sandbox.IsCode(err, sandbox.CodeUnavailable) {
		t.Errorf("Exec during Shutdown = %v, want unavailable (its connection broken, within 10 s)", err)
	}
	if got := out.String(); got != "up\n" {
		t.Errorf("the command's output = %q, want only %q: it got SIGTERM", got, "up\n")
	}
	if _, err := os.Stat(filepath.Join(home, "term")); err == nil {
		t.Error("the command got SIGTERM: its trap left term in the home")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v", err)
	}
}
