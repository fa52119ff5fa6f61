package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// warmReady is what the daemon logs each time a warm-pool member is ready.
const warmReady = "warm pool member ready"

// waitWarm waits until the daemon has logged n warm-pool members ready
// since it started.
func (d *daemon) waitWarm(t testing.TB, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); strings.Count(d.Out.String(), warmReady) < n; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon made %d warm-pool members in 1m, want %d:\n%s", strings.Count(d.Out.String(), warmReady), n, d.Out.String())
		}
	}
}

// TestWarmPool: with --warm-pool, a create claims a started sandbox that
// works like a fresh one, names no pool member, and lists alone; members
// survive a daemon restart.
func TestWarmPool(t *testing.T) {
	requireDaemon(t)
	rt := bins.Runtimes[0]
	d := newDaemon(t, rt, "--warm-pool", "small=2")
	ctx := ctxT(t)
	c := d.Client()
	d.waitWarm(t, 2)
	if sizes, err := c.Pool(ctx); err != nil || len(sizes) != 1 || sizes[0] != (sandbox.PoolSize{Size: "small", Image: "default", Target: 2, Ready: 2}) {
		t.Fatalf("Pool() = %+v, %v; want 2 of 2 small members ready", sizes, err)
	}

	sb, created, err := c.Create(ctx, sandbox.CreateRequest{Name: "warm"})
	if err != nil || !created || sb.Status != sandbox.StatusRunning || sb.Reason != "created (from the warm pool)" {
		t.Fatalf("Create(warm) = %+v, %v, %v; want a running sandbox claimed from the pool", sb, created, err)
	}
	var out, errb bytes.Buffer
	res, err := c.Exec(ctx, "warm", sandbox.ExecRequest{Shell: "cat /proc/sys/kernel/hostname; echo \"[$HEARTH_SANDBOX]\"; id -un; pwd"}, nil, &out, &errb)
	if want := "sandbox\n[]\nsandbox\n/home/sandbox\n"; err != nil || res.ExitCode != 0 || out.String() != want {
		t.Fatalf("exec in warm = %+v, %v, stdout %q (stderr %q); want %q", res, err, out.String(), errb.String(), want)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "warm" {
		t.Fatalf("List() = %+v, %v; want warm alone, no pool member", list, err)
	}
	if stdout, stderr, code := d.CLI("", "list"); code != 0 || strings.Contains(stdout, "pool-") || !strings.Contains(stdout, "warm") {
		t.Fatalf("hearth list = %q, %q, exit %d; want warm and no pool member", stdout, stderr, code)
	}

	// The pool refilled in the background; after a restart its members
	// are adopted and claimed.
	d.waitWarm(t, 3)
	d.Stop()
	d.Start()
	c = d.Client()
	sb, _, err = c.Create(ctx, sandbox.CreateRequest{Name: "after-restart"})
	if err != nil || sb.Reason != "created (from the warm pool)" {
		t.Fatalf("Create(after-restart) = %+v, %v; want a member adopted after the restart", sb, err)
	}
}

// BenchmarkCreateFromPool is BenchmarkCreateToFirstOutput with a warm pool:
// create → the first byte of `echo hi`, per runtime. Between iterations,
// outside the timer, it destroys the sandbox and waits for the refill.
func BenchmarkCreateFromPool(b *testing.B) {
	requireDaemon(b)
	for _, rt := range bins.Runtimes {
		b.Run(rt, func(b *testing.B) {
			d := newDaemon(b, rt, "--warm-pool", "small=2")
			ctx := context.Background()
			c := d.Client()
			d.waitWarm(b, 2)
			var lat latencies
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("bench-%d", i)
				start := time.Now()
				sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name})
				if err != nil {
					b.Fatal(err)
				}
				var out firstByte
				if _, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, nil, &out, io.Discard); err != nil || out.buf.String() != "hi\n" {
					b.Fatalf("echo hi = %q, %v", out.buf.String(), err)
				}
				lat = append(lat, out.at.Sub(start))
				b.StopTimer()
				if sb.Reason != "created (from the warm pool)" {
					b.Fatalf("Create(%s) = %+v; want a claim", name, sb)
				}
				if err := c.Destroy(ctx, name); err != nil {
					b.Fatal(err)
				}
				d.waitWarm(b, 3+i)
				b.StartTimer()
			}
			lat.report(b)
		})
	}
}
