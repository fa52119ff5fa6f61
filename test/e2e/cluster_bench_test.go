package e2e_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// Benchmarks of several daemons on one Postgres store (docs/BENCHMARKS.md,
// "Several daemons on one store"), each against its baseline in the same
// run: SQLite for the store's cost, a direct call for the forwarding's,
// one daemon for admission across four.

// preferredRuntime is runsc when installed (the default runtime), else
// the first runtime found.
func preferredRuntime(b testing.TB) string {
	requireDaemon(b)
	if slices.Contains(bins.Runtimes, "runsc") {
		return "runsc"
	}
	return bins.Runtimes[0]
}

// pgDaemons is sharedStore's daemons, of benchRuntime.
func pgDaemons(b *testing.B, n int) []*daemon {
	ds, _ := sharedStore(b, preferredRuntime(b), n)
	return ds
}

// createToFirstOutput creates name through d and runs `echo hi` in it,
// returning the time to the first byte of its output, and destroys it.
func createToFirstOutput(b *testing.B, d *daemon, name string) time.Duration {
	ctx := context.Background()
	c := d.Client()
	start := time.Now()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name}); err != nil {
		b.Fatal(err)
	}
	var out firstByte
	if _, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, nil, &out, io.Discard); err != nil || out.buf.String() != "hi\n" {
		b.Fatalf("echo hi = %q, %v", out.buf.String(), err)
	}
	took := out.at.Sub(start)
	if err := c.Destroy(ctx, name); err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkStoreCreateToFirstOutput is create → first output through a
// daemon on Postgres ("postgres-") and one on SQLite ("sqlite-"), their
// iterations alternating so that both see the same host.
func BenchmarkStoreCreateToFirstOutput(b *testing.B) {
	pg := pgDaemons(b, 1)[0]
	lite := newDaemon(b, preferredRuntime(b))
	var onPG, onLite []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		onPG = append(onPG, createToFirstOutput(b, pg, fmt.Sprintf("pg-%d", i)))
		onLite = append(onLite, createToFirstOutput(b, lite, fmt.Sprintf("lite-%d", i)))
	}
	benchstat.Report(b, "postgres-", onPG)
	benchstat.Report(b, "sqlite-", onLite)
}

// timeTrue is the round trip of `true` in sandbox name, sent to d.
func timeTrue(b *testing.B, d *daemon, name string) time.Duration {
	start := time.Now()
	res, err := d.Client().Exec(context.Background(), name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("true in %s = %+v, %v", name, res, err)
	}
	return time.Since(start)
}

// BenchmarkForwardedExec is the round trip of `true` in a sandbox of node
// b0, sent to b1, which forwards it ("forwarded-"), against the same call
// sent to b0 ("direct-"), alternating.
func BenchmarkForwardedExec(b *testing.B) {
	ds := pgDaemons(b, 2)
	ctx := context.Background()
	if _, _, err := ds[0].Client().Create(ctx, sandbox.CreateRequest{Name: "fwd"}); err != nil {
		b.Fatal(err)
	}
	run := func(d *daemon) time.Duration { return timeTrue(b, d, "fwd") }
	run(ds[1]) // the first forwarded call dials b0
	var direct, forwarded []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		direct = append(direct, run(ds[0]))
		forwarded = append(forwarded, run(ds[1]))
	}
	benchstat.Report(b, "direct-", direct)
	benchstat.Report(b, "forwarded-", forwarded)
}

// BenchmarkAdmission is bursts of concurrent creates, 16 at a time, by 8
// agents of one tenant whose quota admits 2 each, spread over 4 daemons of
// one Postgres store ("4-daemons") and sent to 1 ("1-daemon"), each
// iteration on its own tenant: 16 creates that are all admitted (each
// starts a sandbox: "admitted/s"), then 64 that are all refused
// (quota_exceeded: the admission path alone, "refused/s").
func BenchmarkAdmission(b *testing.B) {
	for _, n := range []int{4, 1} {
		b.Run(fmt.Sprintf("%d-daemons", n), func(b *testing.B) {
			ds := pgDaemons(b, n)
			var admitted, refused time.Duration
			for i := 0; i < b.N; i++ {
				a, r := admissionBursts(b, ds, fmt.Sprintf("adm%d", i))
				admitted, refused = admitted+a, refused+r
			}
			b.ReportMetric(float64(16*b.N)/admitted.Seconds(), "admitted/s")
			b.ReportMetric(float64(64*b.N)/refused.Seconds(), "refused/s")
		})
	}
}

// admissionBursts makes tenant (8 agents, quota 2 each), fires 16 creates
// that its quota admits and then 64 it refuses, 16 at a time, round-robin
// over ds, and returns each burst's wall time; it destroys what it made.
func admissionBursts(b *testing.B, ds []*daemon, tenant string) (admitted, refused time.Duration) {
	ctx := context.Background()
	tokens := quotaTenant(b, ds[0], tenant)
	admitted = createBurst(b, ds, tokens, 0, 16, "")
	refused = createBurst(b, ds, tokens, 16, 64, sandbox.CodeQuotaExceeded)
	b.StopTimer()
	list, err := ds[0].Client().List(ctx)
	if err != nil {
		b.Fatal(err)
	}
	made := 0
	for _, sb := range list {
		if sb.Tenant == tenant {
			made++
			ds[0].Client().Destroy(ctx, sandbox.Ref(sb.Tenant, sb.Name))
		}
	}
	if made != 16 {
		b.Fatalf("tenant %s holds %d sandboxes, want its 8 agents × quota 2 = 16", tenant, made)
	}
	b.StartTimer()
	return admitted, refused
}

// quotaTenant makes tenant with 8 agents of quota 2 and returns their
// tokens.
func quotaTenant(b *testing.B, d *daemon, tenant string) []string {
	ctx := context.Background()
	admin := d.Client().Admin()
	quota, share, alarm := 2, 100, 10000
	if _, err := admin.CreateTenant(ctx, sandbox.Tenant{Name: tenant,
		Allocation: sandbox.Resources{MilliCPU: 1_000_000, MemoryBytes: 1 << 45, DiskBytes: 1 << 50},
		Policy:     sandbox.PolicyOverrides{AgentQuota: &quota, AgentSharePercent: &share, AlarmCreatesPerMinute: &alarm}}); err != nil {
		b.Fatal(err)
	}
	var tokens []string
	for i := range 8 {
		agent := fmt.Sprintf("a%d", i)
		if _, err := admin.CreateAgent(ctx, sandbox.Agent{Tenant: tenant, Name: agent}); err != nil {
			b.Fatal(err)
		}
		secret, _, err := admin.CreateToken(ctx, sandbox.TokenRequest{Tenant: tenant, Agent: agent, Role: sandbox.RoleAgent})
		if err != nil {
			b.Fatal(err)
		}
		tokens = append(tokens, secret)
	}
	return tokens
}

// createBurst fires creates first…first+n-1, 16 at a time, round-robin
// over ds and tokens, wanting each to succeed (want "") or to fail with
// want, and returns the wall time.
func createBurst(b *testing.B, ds []*daemon, tokens []string, first, n int, want sandbox.Code) time.Duration {
	ctx := context.Background()
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	start := time.Now()
	for i := first; i < first+n; i++ {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			c := client.New(ds[i%len(ds)].URL, tokens[i%len(tokens)], nil)
			_, _, err := c.Create(ctx, sandbox.CreateRequest{Name: fmt.Sprintf("s%d", i)})
			if want == "" && err != nil || want != "" && !sandbox.IsCode(err, want) {
				b.Errorf("create %d = %v, want %q", i, err, want)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
