package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"testing/synctest"
	"time"

	"github.com/hearth/hearth/driver"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// halfMade leaves what a daemon killed during Create leaves: the creating
// row of a sandbox named name, made from template, and, as far as the
// create had gone, its root and its runtime sandbox.
func (e *env) halfMade(t *testing.T, template sandbox.Sandbox, name, id string, root, runtime bool) {
	t.Helper()
	ctx := t.Context()
	sb := template
	sb.ID, sb.Name, sb.Status, sb.Reason = id, name, sandbox.StatusCreating, "create requested"
	if err := e.db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if !root {
		return
	}
	path, err := e.lay.Prepare(ctx, "sb-"+id, "default")
	if err != nil {
		t.Fatal(err)
	}
	if runtime {
		if err := e.drv.Start(ctx, driver.Spec{ID: id, RootFS: path, Home: "/home/sandbox"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecover: a restarted daemon adopts what still runs, records what
// died or vanished, undoes interrupted creates and removes what no row
// owns, and kills nothing a row owns.
func TestRecover(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	adopt := e.create(t, a1, "adopt")
	e.exec(t, a1, "adopt", "echo before > kept")
	exited := e.create(t, a1, "exited")
	oomed := e.create(t, a1, "oomed")
	vanished := e.create(t, a1, "vanished")
	asleep := e.stop(t, e.create(t, a1, "asleep"))
	for _, err := range []error{e.drv.Faults().Die(exited.ID, false), e.drv.Faults().Die(oomed.ID, true), e.drv.Faults().Vanish(vanished.ID)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Creates a killed daemon left at each step.
	e.halfMade(t, adopt, "agent-a1-half-row", "xhalfrow00000000", false, false)
	e.halfMade(t, adopt, "agent-a1-half-root", "xhalfroot0000000", true, false)
	e.halfMade(t, adopt, "agent-a1-half-runtime", "xhalfruntime0000", true, true)
	// What no row owns.
	if err := e.drv.Start(ctx, driver.Spec{ID: "xorphanruntime00", RootFS: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lay.Prepare(ctx, "sb-xorphanroot0000", "default"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	startsBefore := e.started(adopt.ID)

	svc := e.restart(t)
	if err := svc.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}

	restarted := epoch.Add(time.Hour)
	tests := []struct {
		name    string
		status  sandbox.Status
		reason  string
		updated time.Time
	}{
		{"adopt", sandbox.StatusRunning, "adopted after daemon restart", restarted},
		{"exited", sandbox.StatusStopped, "exited", restarted},
		{"oomed", sandbox.StatusStopped, "oom", restarted},
		{"vanished", sandbox.StatusStopped, "vanished", restarted},
		{"asleep", sandbox.StatusStopped, "exited", asleep.UpdatedAt},
	}
	for _, tt := range tests {
		row := e.row(t, tt.name)
		if row.Status != tt.status || !strings.Contains(row.Reason, tt.reason) || !row.UpdatedAt.Equal(tt.updated) {
			t.Errorf("after Recover, %s = %s %q updated %v; want %s, %q, updated %v", tt.name, row.Status, row.Reason, row.UpdatedAt, tt.status, tt.reason, tt.updated)
		}
		if e.killed(row.ID) {
			t.Errorf("Recover stopped or deleted %s (%s), which a row owns", tt.name, row.ID)
		}
	}
	for _, name := range []string{"agent-a1-half-row", "agent-a1-half-root", "agent-a1-half-runtime"} {
		if _, err := e.find(t, name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetSandbox(%s) after Recover = %v, want the interrupted create undone", name, err)
		}
		// Its creator, who got no answer, hears why.
		_, err := svc.Sandboxes.Get(ctx, a1, name)
		if se := sandbox.AsError(err); se.Code != sandbox.CodeNotFound || !strings.Contains(se.Message, "interrupted by a daemon restart") || se.Details["reason"] == nil {
			t.Errorf("Get(%s) after Recover = %v; want not_found saying its create was interrupted, with the reason in details", name, err)
		}
	}
	e.wantHoldings(t, ids(adopt, exited, oomed, vanished, asleep), ids(adopt, exited, oomed, asleep))
	if _, err := e.lay.Stat(ctx, "default"); err != nil {
		t.Errorf("Stat(default) after Recover = %v, want the image kept", err)
	}

	// The adopted sandbox answers without a new start; the dead ones wake.
	e.svc = svc
	if out, _ := e.exec(t, a1, "adopt", "cat kept"); out != "before\n" || e.started(adopt.ID) != startsBefore {
		t.Errorf("Exec(adopt) after Recover = %q with %d starts; want its file, and no new start", out, e.started(adopt.ID)-startsBefore)
	}
	for _, sb := range []sandbox.Sandbox{exited, oomed, vanished} {
		e.exec(t, a1, sb.Name, "true")
		if row := e.row(t, sb.Name); row.Status != sandbox.StatusRunning || !strings.Contains(row.Reason, "woken") {
			t.Errorf("after Exec, %s = %s %q; want running, woken", sb.Name, row.Status, row.Reason)
		}
	}

	// A second Recover changes nothing.
	before := e.holdings(t)
	if err := e.restart(t).Recover(ctx); err != nil {
		t.Fatalf("second Recover() = %v", err)
	}
	if after := e.holdings(t); !slices.Equal(after.rows, before.rows) || !slices.Equal(after.roots, before.roots) || !slices.Equal(after.runtime, before.runtime) {
		t.Errorf("second Recover changed the host from %+v to %+v", before, after)
	}
}

// TestRecoverKeepsImages: only sandbox roots are garbage; an image is
// never one, whatever its name.
func TestRecoverKeepsImages(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	if err := e.lay.Import(ctx, "sb-base", fstest.MapFS{"home/sandbox/.keep": {}}); err != nil {
		t.Fatal(err)
	}
	if err := e.restart(t).Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	if info, err := e.lay.Stat(ctx, "sb-base"); err != nil || info.Kind != layers.KindCommitted {
		t.Fatalf("Stat(sb-base) after Recover = %+v, %v; want the image kept", info, err)
	}
}

// TestSweep: Run destroys what expired and records what died, on its
// ticker, and leaves the rest alone. The fake clock says what expired;
// synctest's fake time drives the ticker.
func TestSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(o *envOptions) {
			o.SweepInterval = time.Minute
			o.DefaultTTL, o.MaxTTL = time.Hour, 2*time.Hour
			o.IdleTimeout = 24 * time.Hour // idle sleep has its own test
		})
		ctx := t.Context()
		long := func(name string) sandbox.Sandbox {
			sb, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: name, TTL: sandbox.Duration(2 * time.Hour)})
			if err != nil {
				t.Fatalf("Create(%s) = %v", name, err)
			}
			return sb
		}
		expired := e.create(t, a1, "expired") // 1h
		expiredAsleep := e.stop(t, e.create(t, a1, "expired-asleep"))
		edge, _, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "edge", TTL: sandbox.Duration(90 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		alive := long("alive")
		asleep := e.stop(t, long("asleep"))
		dead, oomed, lost, deaf := long("dead"), long("oomed"), long("lost"), long("deaf")
		for _, err := range []error{e.drv.Faults().Die(dead.ID, false), e.drv.Faults().Die(oomed.ID, true), e.drv.Faults().Vanish(lost.ID), e.drv.Faults().Deafen(deaf.ID)} {
			if err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(90 * time.Minute)

		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			e.svc.Run(runCtx)
			close(done)
		}()
		time.Sleep(time.Minute + time.Second) // one tick, and the sweep's paced probes
		synctest.Wait()
		cancel()
		<-done

		for _, sb := range []sandbox.Sandbox{expired, expiredAsleep, edge} {
			if _, err := e.find(t, sb.Name); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetSandbox(%s) after the sweep = %v, want it destroyed (expired at %v, now %v)", sb.Name, err, sb.ExpiresAt, e.clock.Now())
			}
		}
		swept := epoch.Add(90 * time.Minute)
		tests := []struct {
			sb      sandbox.Sandbox
			status  sandbox.Status
			reason  string
			updated time.Time
		}{
			{alive, sandbox.StatusRunning, "created", alive.UpdatedAt},
			{asleep, sandbox.StatusStopped, "exited", asleep.UpdatedAt},
			{dead, sandbox.StatusStopped, "exited", swept},
			{oomed, sandbox.StatusStopped, "oom", swept},
			{lost, sandbox.StatusStopped, "vanished", swept},
			// Running, with nothing listening for its agent: stopped, and
			// its status says why.
			{deaf, sandbox.StatusStopped, "agent could not be reached", swept},
		}
		for _, tt := range tests {
			row := e.row(t, tt.sb.Name)
			if row.Status != tt.status || !strings.Contains(row.Reason, tt.reason) || !row.UpdatedAt.Equal(tt.updated) {
				t.Errorf("after the sweep, %s = %s %q updated %v; want %s, %q, updated %v", tt.sb.Name, row.Status, row.Reason, row.UpdatedAt, tt.status, tt.reason, tt.updated)
			}
		}
		if e.killed(alive.ID) {
			t.Errorf("the sweep stopped or deleted %s, which is alive and not expired", alive.Name)
		}
		if st, err := e.drv.State(ctx, deaf.ID); err != nil || st.Status != driver.StatusStopped {
			t.Errorf("the runtime's state of %s after the sweep = %+v, %v; want it stopped", deaf.Name, st, err)
		}
		e.wantHoldings(t, ids(alive, asleep, dead, oomed, lost, deaf), ids(alive, asleep, dead, oomed, deaf))
	})
}

// TestUnreachableAgent: a call on a running sandbox whose agent nothing
// reaches (driver.ErrUnreachable) stops it, says why, and starts it again
// on its root, so the call succeeds; a dial that fails otherwise is the
// call's error, and the sandbox is left alone.
func TestUnreachableAgent(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, a1, "deaf")
	e.exec(t, a1, "deaf", "echo kept > f")
	starts := e.started(sb.ID)
	if err := e.drv.Faults().Deafen(sb.ID); err != nil {
		t.Fatal(err)
	}
	if out, _ := e.exec(t, a1, "deaf", "cat f"); out != "kept\n" {
		t.Errorf("Exec(cat f) on a sandbox whose agent was unreachable = %q, want its file, after a restart", out)
	}
	row := e.row(t, sb.Name)
	if row.Status != sandbox.StatusRunning || !strings.Contains(row.Reason, "woken by a call after: its agent could not be reached") || e.started(sb.ID) != starts+1 {
		t.Errorf("after the call, %s = %s %q with %d more starts; want running, woken after its agent could not be reached, one start", sb.Name, row.Status, row.Reason, e.started(sb.ID)-starts)
	}
}

// TestSweepPacesProbes: the sweep's probes of running sandboxes' agents
// (each wakes an idle sandbox) come one ProbeGap apart, not in one burst.
func TestSweepPacesProbes(t *testing.T) {
	e := newEnv(t, nil)
	const n = 6
	for i := range n {
		e.create(t, a1, fmt.Sprintf("paced%d", i))
	}
	before := len(e.drv.Calls())
	lifecycle.Sweep(t.Context(), e.svc)
	var dials []driverfake.Call
	for _, c := range e.drv.Calls()[before:] {
		if c.Op == driverfake.OpDial {
			dials = append(dials, c)
		}
	}
	if len(dials) != n {
		t.Fatalf("the sweep dialled %d agents, want %d: %v", len(dials), n, dials)
	}
	// A dial is recorded a moment after its pacer let it go, a moment
	// the host's scheduler may stretch: each gap is allowed half a gap's
	// slack, and the whole run half a gap.
	for i := 1; i < len(dials); i++ {
		if gap := dials[i].At.Sub(dials[i-1].At); gap < lifecycle.ProbeGap/2 {
			t.Errorf("probe %d came %v after the one before, want about %v", i, gap, lifecycle.ProbeGap)
		}
	}
	if span, want := dials[n-1].At.Sub(dials[0].At), (n-1)*lifecycle.ProbeGap-lifecycle.ProbeGap/2; span < want {
		t.Errorf("%d probes came within %v, want them %v apart (at least %v in all)", n, span, lifecycle.ProbeGap, want)
	}
}

// listeningDriver is the fake driver as a driver.AgentListeners that
// reports every running sandbox's agent as listening but those in
// unknown (it cannot tell) and those in deaf (the agent is unreachable).
type listeningDriver struct {
	*driverfake.Driver
	unknown, deaf map[string]bool
}

func (d listeningDriver) AgentsListening(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, id := range ids {
		if st, err := d.State(ctx, id); err == nil && st.Status == driver.StatusRunning && !d.unknown[id] && !d.deaf[id] {
			out[id] = true
		}
	}
	return out, nil
}

// TestSweepProbesOnlyWhatNoOneListensFor: with a node that can tell which
// agents listen without connecting, the sweep dials only the others: the
// one whose driver could not tell, which stays running, and the deaf one,
// which it stops as unreachable. The listening ones are neither dialled
// nor stopped.
func TestSweepProbesOnlyWhatNoOneListensFor(t *testing.T) {
	ld := listeningDriver{unknown: map[string]bool{}, deaf: map[string]bool{}}
	e := newEnv(t, func(o *envOptions) {
		ld.Driver = o.Driver.(*driverfake.Driver)
		o.Driver = ld
	})
	var listening []sandbox.Sandbox
	for i := range 4 {
		listening = append(listening, e.create(t, a1, fmt.Sprintf("heard%d", i)))
	}
	unknown, deaf := e.create(t, a1, "unknown"), e.create(t, a1, "deaf")
	ld.unknown[unknown.ID], ld.deaf[deaf.ID] = true, true
	if err := e.drv.Faults().Deafen(deaf.ID); err != nil {
		t.Fatal(err)
	}
	before := len(e.drv.Calls())
	lifecycle.Sweep(t.Context(), e.svc)
	dialled := map[string]int{}
	for _, c := range e.drv.Calls()[before:] {
		if c.Op == driverfake.OpDial {
			dialled[c.ID]++
		}
	}
	if len(dialled) != 2 || dialled[unknown.ID] != 1 || dialled[deaf.ID] != 1 {
		t.Errorf("the sweep dialled %v; want %s and %s once each, and no other", dialled, unknown.ID, deaf.ID)
	}
	for _, sb := range append(listening, unknown) {
		if row := e.row(t, sb.Name); row.Status != sandbox.StatusRunning {
			t.Errorf("%s = %s %q after the sweep, want running", sb.Name, row.Status, row.Reason)
		}
	}
	if row := e.row(t, deaf.Name); row.Status != sandbox.StatusStopped || !strings.Contains(row.Reason, "agent could not be reached") {
		t.Errorf("%s = %s %q after the sweep, want stopped as unreachable", deaf.Name, row.Status, row.Reason)
	}
}
