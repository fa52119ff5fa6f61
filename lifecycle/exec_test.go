package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

func TestExec(t *testing.T) {
	e := newEnv(t, nil)
	e.create(t, a1, "web")
	var out, errb bytes.Buffer
	res, err := e.svc.Processes.Exec(t.Context(), a1, "web", sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat; echo oops >&2; exit 3"}},
		strings.NewReader("in\n"), &out, &errb)
	if err != nil || res.ExitCode != 3 || out.String() != "in\n" || errb.String() != "oops\n" {
		t.Errorf("Exec(cat, exit 3) = %+v, %v, stdout %q, stderr %q; want exit 3, stdin echoed, oops", res, err, out.String(), errb.String())
	}
	_, err = e.svc.Processes.Exec(t.Context(), a1, "web", sandbox.ExecRequest{}, nil, nil, nil)
	wantCode(t, "Exec(no command)", err, sandbox.CodeInvalidArgument)
	_, err = e.svc.Processes.Exec(t.Context(), a1, "nosuch", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
	wantCode(t, "Exec(nosuch)", err, sandbox.CodeNotFound)
}

// fileOps are the calls that need a running sandbox, each checked to have
// worked.
var fileOps = []struct {
	name string
	call func(t *testing.T, svc *lifecycle.Service, name string)
}{
	{"Exec", func(t *testing.T, svc *lifecycle.Service, name string) {
		var out bytes.Buffer
		if _, err := svc.Processes.Exec(t.Context(), a1, name, sandbox.ExecRequest{Argv: []string{"cat", "kept"}}, nil, &out, nil); err != nil || out.String() != "before\n" {
			t.Fatalf("Exec(cat kept) = %q, %v; want the file written before the stop", out.String(), err)
		}
	}},
	{"ReadFile", func(t *testing.T, svc *lifecycle.Service, name string) {
		var out bytes.Buffer
		if err := svc.Files.ReadFile(t.Context(), a1, name, "kept", &out); err != nil || out.String() != "before\n" {
			t.Fatalf("ReadFile(kept) = %q, %v", out.String(), err)
		}
	}},
	{"WriteFile", func(t *testing.T, svc *lifecycle.Service, name string) {
		if info, err := svc.Files.WriteFile(t.Context(), a1, name, sandbox.WriteRequest{Path: "new"}, strings.NewReader("x")); err != nil || info.Size != 1 {
			t.Fatalf("WriteFile(new) = %+v, %v", info, err)
		}
	}},
	{"ListDir", func(t *testing.T, svc *lifecycle.Service, name string) {
		if list, err := svc.Files.ListDir(t.Context(), a1, name, "."); err != nil || len(list) != 1 || list[0].Name != "kept" {
			t.Fatalf("ListDir(.) = %+v, %v; want [kept]", list, err)
		}
	}},
	{"Stat", func(t *testing.T, svc *lifecycle.Service, name string) {
		if info, err := svc.Files.Stat(t.Context(), a1, name, "kept"); err != nil || info.Size != 7 {
			t.Fatalf("Stat(kept) = %+v, %v", info, err)
		}
	}},
	{"Mkdir", func(t *testing.T, svc *lifecycle.Service, name string) {
		if info, err := svc.Files.Mkdir(t.Context(), a1, name, "a/b"); err != nil || info.Type != sandbox.FileDir {
			t.Fatalf("Mkdir(a/b) = %+v, %v", info, err)
		}
	}},
	{"Remove", func(t *testing.T, svc *lifecycle.Service, name string) {
		if err := svc.Files.Remove(t.Context(), a1, name, "kept", false); err != nil {
			t.Fatalf("Remove(kept) = %v", err)
		}
	}},
	{"Rename", func(t *testing.T, svc *lifecycle.Service, name string) {
		if info, err := svc.Files.Rename(t.Context(), a1, name, "kept", "moved"); err != nil || info.Name != "moved" {
			t.Fatalf("Rename(kept, moved) = %+v, %v", info, err)
		}
	}},
	{"Chmod", func(t *testing.T, svc *lifecycle.Service, name string) {
		if info, err := svc.Files.Chmod(t.Context(), a1, name, "kept", 0o600); err != nil || info.Mode != fs.FileMode(0o600) {
			t.Fatalf("Chmod(kept, 0600) = %+v, %v", info, err)
		}
	}},
}

// TestWake: every call that needs the sandbox running starts a stopped one
// again, on its root, and records why.
func TestWake(t *testing.T) {
	for _, tt := range fileOps {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			sb := e.create(t, a1, "web")
			e.exec(t, a1, "web", "echo before > kept")
			e.stop(t, sb)
			e.clock.Advance(time.Minute)

			tt.call(t, e.svc, "web")

			if n := e.started(sb.ID); n != 2 {
				t.Errorf("the driver started %s %d times, want 2 (create, wake)", sb.ID, n)
			}
			row := e.row(t, "web")
			if row.Status != sandbox.StatusRunning || !strings.Contains(row.Reason, "woken") || !strings.Contains(row.Reason, "exited") ||
				!row.UpdatedAt.Equal(epoch.Add(time.Minute)) {
				t.Errorf("after %s, web = %s %q updated %v; want running, woken after exited, at %v", tt.name, row.Status, row.Reason, row.UpdatedAt, epoch.Add(time.Minute))
			}
			if st, err := e.runtimeState(t, sb.ID); err != nil || st.Status != driver.StatusRunning {
				t.Errorf("State(%s) = %+v, %v, want running", sb.ID, st, err)
			}
			e.wantHeld(t, sb.ID)
		})
	}
}

// TestWakeVanished: a sandbox the runtime lost starts again on its root.
func TestWakeVanished(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, a1, "web")
	e.exec(t, a1, "web", "echo before > kept")
	if err := e.drv.Faults().Vanish(sb.ID); err != nil {
		t.Fatal(err)
	}
	e.setRow(t, sb, sandbox.StatusStopped, "vanished from the runtime")
	fileOps[0].call(t, e.svc, "web")
	if row := e.row(t, "web"); row.Status != sandbox.StatusRunning {
		t.Errorf("after Exec, web = %s %q, want running", row.Status, row.Reason)
	}
	e.wantHeld(t, sb.ID)
}

func TestWakeFails(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.stop(t, e.create(t, a1, "web"))
	e.drv.Faults().FailStart(errors.New("boom"))
	_, err := e.svc.Processes.Exec(t.Context(), a1, "web", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
	wantCode(t, "Exec(web) when the wake fails", err, sandbox.CodeUnavailable)
	if row := e.row(t, "web"); row.Status != sandbox.StatusStopped || row.Reason != "exited" {
		t.Errorf("after a failed wake, web = %s %q; want stopped, exited", row.Status, row.Reason)
	}
	e.wantHeld(t, sb.ID) // nothing released

	e.drv.Faults().FailStart(nil)
	e.exec(t, a1, "web", "true")
}

func TestWakeCreating(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, a1, "web")
	e.setRow(t, sb, sandbox.StatusCreating, "create requested")
	_, err := e.svc.Processes.Exec(t.Context(), a1, "web", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
	wantCode(t, "Exec(web) while it is being created", err, sandbox.CodeUnavailable)
	if n := e.started(sb.ID); n != 1 {
		t.Errorf("the driver started %s %d times, want 1", sb.ID, n)
	}
}

// TestWakeCallerGoes: a caller that goes away while its call wakes the
// sandbox must not leave it unusable.
func TestWakeCallerGoes(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.stop(t, e.create(t, a1, "web"))
	ctx, cancel := context.WithCancel(t.Context())
	e.drv.Faults().SetStartHook(func(context.Context, driver.Spec) error {
		cancel() // the caller goes away while the runtime starts
		return nil
	})
	e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
	e.drv.Faults().SetStartHook(nil)

	if _, err := e.svc.Processes.Exec(t.Context(), a1, "web", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil {
		row := e.row(t, "web")
		st, _ := e.runtimeState(t, sb.ID)
		t.Fatalf("Exec(web) after a caller went away mid-wake = %v; want it to run (row %s %q, runtime %s)", err, row.Status, row.Reason, st.Status)
	}
}

// TestExecOOM: a command the memory limit killed is recorded in the
// sandbox's status, which stays running.
func TestExecOOM(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, a1, "web")
	e.clock.Advance(time.Minute)
	if err := e.drv.Faults().OOMNextExec(sb.ID); err != nil {
		t.Fatal(err)
	}
	_, res := e.exec(t, a1, "web", "kill -9 $$")
	if !res.OOMKilled {
		t.Fatalf("Exec(kill -9) after OOMNextExec = %+v, want OOMKilled", res)
	}
	row := e.row(t, "web")
	if row.Status != sandbox.StatusRunning || !strings.HasPrefix(row.Reason, "oom") || !strings.Contains(row.Reason, "512 MiB") ||
		!row.UpdatedAt.Equal(epoch.Add(time.Minute)) {
		t.Errorf("after an OOM kill, web = %s %q updated %v; want running, a reason starting oom naming the 512 MiB limit, at %v",
			row.Status, row.Reason, row.UpdatedAt, epoch.Add(time.Minute))
	}
	if got, err := e.svc.Sandboxes.Get(t.Context(), a1, "web"); err != nil || got.Reason != row.Reason {
		t.Errorf("Get(web) = %+v, %v; want reason %q", got, err, row.Reason)
	}

	// A command that is not OOM killed leaves the status alone.
	e.exec(t, a1, "web", "kill -9 $$")
	if again := e.row(t, "web"); again.Reason != row.Reason || !again.UpdatedAt.Equal(row.UpdatedAt) {
		t.Errorf("after a plain kill, web = %q updated %v; want it unchanged", again.Reason, again.UpdatedAt)
	}
}

// TestDeadRunningSandboxWakes: a sandbox whose runtime died while its row
// still says running is woken by the next call, not failed until a sweep.
func TestDeadRunningSandboxWakes(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, a1, "web")
	if err := e.drv.Faults().Die(sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if out, res := e.exec(t, a1, "web", "echo back"); out != "back\n" || res.ExitCode != 0 {
		t.Fatalf("exec after the runtime died = %q, %+v; want it woken and run", out, res)
	}
	if got := e.started(sb.ID); got != 2 {
		t.Fatalf("Start calls = %d, want 2 (create and wake)", got)
	}
	if row := e.row(t, "web"); row.Status != sandbox.StatusRunning || !strings.Contains(row.Reason, "oom") {
		t.Fatalf("row after the wake = %s %q; want running, the reason naming the oom", row.Status, row.Reason)
	}
}
