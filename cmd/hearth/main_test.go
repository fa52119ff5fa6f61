package main

import (
	"errors"
	"flag"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

var update = flag.Bool("update", false, "rewrite the files that testscript cmp's from the actual output")

// TestMain lets the test binary be the hearth command inside scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"hearth": main})
}

// TestScript runs testdata/script/*.txtar, each against its own fake daemon
// (see fakeDaemon) whose URL and token are in HEARTH_URL and HEARTH_TOKEN.
// Besides the standard commands, scripts have `exits CODE PROG [ARGS...]`,
// which runs PROG like exec and checks its exact exit code.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Setup: func(env *testscript.Env) error {
			srv := httptest.NewServer(newFakeDaemon("hearth_test"))
			env.Defer(srv.Close)
			env.Setenv("HEARTH_URL", srv.URL)
			env.Setenv("HEARTH_TOKEN", "hearth_test")
			// No host token file can leak into a script.
			env.Setenv("HEARTH_DATA_DIR", env.WorkDir)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits": cmdExits,
		},
	})
}

// cmdExits is `exits CODE PROG [ARGS...]`: exec PROG, then check that it
// exited CODE. stdout and stderr are kept for the commands that follow.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	var exitErr *exec.ExitError
	switch err := ts.Exec(args[1], args[2:]...); {
	case errors.As(err, &exitErr):
		got = exitErr.ExitCode()
	case err != nil:
		ts.Fatalf("%s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}
