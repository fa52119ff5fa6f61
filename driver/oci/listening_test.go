package oci_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/sandbox"
)

// TestAgentsListening (every runtime): AgentsListening reports a running
// sandbox's agent as listening, and nothing else (an unknown id, an id
// that is no id, a stopped sandbox), and says what Dial finds: under
// runsc, once root in the sandbox removes the agent's socket, the sandbox
// is left out and Dial finds nothing; once a process of the sandbox
// listens at that name in its place, it is reported, and Dial connects
// to it (whatever listens there is what a call would reach). Looking wakes nothing: the sandbox's cgroup spends on 200 looks
// a small part of what 200 connections cost it.
func TestAgentsListening(t *testing.T) {
	drivertest.RequireRoot(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			bin := findRuntime(t, rt)
			d, spec := startDefault(t, rt, bin, "listen"+rt)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			ids := []string{spec.ID, "xnosuchsandbox00", "../" + spec.ID}
			want := func(listening bool) {
				t.Helper()
				got, err := d.AgentsListening(ctx, ids)
				if err != nil {
					t.Fatalf("AgentsListening() = %v", err)
				}
				if len(got) > 1 || got[spec.ID] != listening {
					t.Fatalf("AgentsListening(%q) = %v, want %s listening: %v", ids, got, spec.ID, listening)
				}
				conn, err := d.Dial(ctx, spec.ID)
				if err == nil {
					conn.Close()
				}
				if (err == nil) != listening {
					t.Fatalf("AgentsListening says %v, and Dial = %v", listening, err)
				}
			}
			want(true)
			if cpu := lookCost(t, d, spec.ID); cpu.looks*4 > cpu.dials || cpu.dials == 0 {
				t.Errorf("200 looks cost the sandbox %v of CPU, 200 connections %v: want the looks under a quarter", cpu.looks, cpu.dials)
			}
			if rt == oci.RuntimeRunsc {
				c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
				// Root in the sandbox removes the agent's socket, and three
				// seconds later a process of its own listens at that name.
				impostor := `import socket, time
time.sleep(3)
s = socket.socket(socket.AF_UNIX)
s.bind("/run/hearth/agent.sock")
s.listen(8)
time.sleep(600)`
				if res, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "rm /run/hearth/agent.sock && (python3 -c '" + impostor + "' >/dev/null 2>&1 &)"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
					t.Fatalf("Exec(rm the socket) = %+v, %v", res, err)
				}
				want(false)
				deadline := time.Now().Add(30 * time.Second)
				for {
					got, err := d.AgentsListening(ctx, ids)
					if err != nil {
						t.Fatal(err)
					}
					if got[spec.ID] || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				want(true) // the impostor's socket
			}
			if err := d.Stop(ctx, spec.ID); err != nil {
				t.Fatal(err)
			}
			want(false)
		})
	}
}

// cost is CPU time a sandbox's cgroup spent.
type cost struct{ looks, dials time.Duration }

// lookCost measures what 200 AgentsListening calls and 200 connections
// to the agent cost sandbox id's cgroup in CPU time.
func lookCost(t *testing.T, d *oci.Driver, id string) cost {
	t.Helper()
	ctx := t.Context()
	cpu := func() time.Duration {
		u, err := oci.MeterOf(d).Usage(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(u.CPUNanos)
	}
	var c cost
	start := cpu()
	for range 200 {
		if _, err := d.AgentsListening(ctx, []string{id}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // what a wake would cost, counted
	c.looks = cpu() - start
	start = cpu()
	for range 200 {
		conn, err := d.Dial(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	time.Sleep(100 * time.Millisecond)
	c.dials = cpu() - start
	t.Logf("200 looks: %v of the sandbox's CPU; 200 connections: %v", c.looks, c.dials)
	return c
}
