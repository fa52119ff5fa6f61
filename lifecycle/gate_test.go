package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
)

// TestGate: a destructive command gets a checkpoint first, named in its
// result, which restores what it destroyed; a harmless one gets none.
func TestGate(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.create(t, a1, "web")
	e.exec(t, a1, "web", "mkdir -p data; echo precious > data/db.txt")
	var out strings.Builder
	res, err := e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{Shell: "rm -rf data && echo gone"}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "gone\n" || res.Checkpoint == "" ||
		!strings.Contains(res.Gate, res.Checkpoint) || !strings.Contains(res.Gate, "looks destructive (recursive rm)") {
		t.Fatalf("Exec(rm -rf data) = %+v, %v, %q; want it run after a checkpoint its result names", res, err, out.String())
	}
	cps, err := e.svc.Checkpoints.ListCheckpoints(ctx, a1, "web")
	if err != nil || len(cps) != 1 || cps[0].ID != res.Checkpoint || cps[0].Label != "auto: before a destructive command" {
		t.Fatalf("ListCheckpoints = %+v, %v; want the automatic one", cps, err)
	}
	if _, err := e.svc.Checkpoints.Restore(ctx, a1, "web", res.Checkpoint); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.exec(t, a1, "web", "cat data/db.txt"); got != "precious\n" {
		t.Errorf("after restoring the automatic checkpoint, data/db.txt = %q", got)
	}
	harmless, err := e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{Argv: []string{"ls", "-la"}}, nil, nil, nil)
	if err != nil || harmless.Checkpoint != "" || harmless.Gate != "" {
		t.Errorf("Exec(ls -la) = %+v, %v; want no checkpoint", harmless, err)
	}
	if cps, _ := e.svc.Checkpoints.ListCheckpoints(ctx, a1, "web"); len(cps) != 1 {
		t.Errorf("%d checkpoints after a harmless command, want 1", len(cps))
	}
}

// failingSnapshots is a layer store whose Snapshot always fails.
type failingSnapshots struct{ layers.Store }

func (failingSnapshots) Snapshot(context.Context, string, string) error {
	return errors.New("snapshot: disk on fire")
}

// TestGateCheckpointFails: by default a destructive command whose
// checkpoint fails does not run; a tenant that allows it runs it and its
// result says so; a tenant with no patterns has no gate.
func TestGateCheckpointFails(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Layers = failingSnapshots{o.Layers} })
	ctx := t.Context()
	e.create(t, a1, "web")
	e.exec(t, a1, "web", "mkdir keep")
	_, err := e.svc.Processes.Exec(ctx, a1, "web", sandbox.ExecRequest{Shell: "rm -r keep"}, nil, nil, nil)
	se := wantCode(t, "Exec(rm -r keep) when the checkpoint fails", err, sandbox.CodeUnavailable)
	if se.Message != "refused: the command looks destructive (recursive rm), and the checkpoint hearth takes before such a command failed" || se.Hint == "" {
		t.Errorf("refusal = %v", se)
	}
	if got, _ := e.exec(t, a1, "web", "test -d keep && echo kept"); got != "kept\n" {
		t.Errorf("the refused command ran: %q", got)
	}

	allow := "allow"
	lax := e.guarded(t, "lax", wide, sandbox.PolicyOverrides{GateOnFailure: &allow}, "l1")
	e.create(t, lax, "box")
	e.exec(t, lax, "box", "mkdir keep")
	res, err := e.svc.Processes.Exec(ctx, lax, "box", sandbox.ExecRequest{Shell: "rm -r keep"}, nil, nil, nil)
	if err != nil || res.ExitCode != 0 || res.Checkpoint != "" || !strings.Contains(res.Gate, "failed: it ran without one") {
		t.Errorf("Exec(rm -r keep) under gate_on_failure allow = %+v, %v", res, err)
	}

	none := []string{}
	off := e.guarded(t, "nogate", wide, sandbox.PolicyOverrides{DestructivePatterns: &none}, "n1")
	e.create(t, off, "box")
	if res, err := e.svc.Processes.Exec(ctx, off, "box", sandbox.ExecRequest{Shell: "rm -rf /tmp/x"}, nil, nil, nil); err != nil || res.Gate != "" {
		t.Errorf("Exec(rm -rf) with no patterns = %+v, %v; want no gate", res, err)
	}
}
