package oci_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// BenchmarkStartToPing measures Start until the agent answers a ping, per
// runtime, on a fresh btrfs snapshot root each time; Delete runs outside the
// timer. Besides ns/op it reports p50-ms and max-ms. Run it with a fixed
// count, e.g. -bench StartToPing -benchtime 20x.
func BenchmarkStartToPing(b *testing.B) {
	drivertest.RequireRoot(b)
	base := drivertest.BaseRootFS(b)
	agentPath := drivertest.BuildAgent(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			bin := findRuntime(b, rt)
			dir := b.TempDir()
			b.Cleanup(func() { drivertest.UnmountUnder(b, dir) })
			d := newDriver(b, rt, bin, dir)
			var took []time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				spec := driver.Spec{
					ID:        fmt.Sprintf("bench%d", i),
					RootFS:    drivertest.SnapshotRootFS(b, base),
					AgentPath: agentPath,
					UID:       1000, GID: 1000, Home: "/home/sandbox",
					Resources: sandbox.Sizes()[sandbox.DefaultSize],
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				b.StartTimer()
				began := time.Now()
				err := d.Start(ctx, spec)
				took = append(took, time.Since(began))
				b.StopTimer()
				if err != nil {
					cancel()
					b.Fatalf("Start() = %v", err)
				}
				if err := d.Delete(ctx, spec.ID); err != nil {
					cancel()
					b.Fatalf("Delete() = %v", err)
				}
				cancel()
				b.StartTimer()
			}
			benchstat.Report(b, "", took)
		})
	}
}

// BenchmarkStopWake measures a sleep and wake cycle of one sandbox: Stop,
// then Start on the same root until the agent answers. It reports
// stop-p50-ms and wake-p50-ms besides ns/op for the pair.
func BenchmarkStopWake(b *testing.B) {
	drivertest.RequireRoot(b)
	base := drivertest.BaseRootFS(b)
	agentPath := drivertest.BuildAgent(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			d, spec := startBenchSandbox(b, rt, "stopwake", base, agentPath)
			ctx := context.Background()
			var stops, wakes []time.Duration
			b.ResetTimer()
			for range b.N {
				began := time.Now()
				if err := d.Stop(ctx, spec.ID); err != nil {
					b.Fatalf("Stop() = %v", err)
				}
				stopped := time.Now()
				if err := d.Start(ctx, spec); err != nil {
					b.Fatalf("Start() = %v", err)
				}
				stops, wakes = append(stops, stopped.Sub(began)), append(wakes, time.Since(stopped))
			}
			b.StopTimer()
			b.ReportMetric(benchstat.Percentile(stops, 0.5), "stop-p50-ms")
			b.ReportMetric(benchstat.Percentile(wakes, 0.5), "wake-p50-ms")
		})
	}
}

// BenchmarkBareRun measures the runtime's own `run` of /bin/echo hi on the
// same kind of root, with the same spec and flags as the driver's (but no
// agent to wait for), until it exits: the floor under StartToPing.
func BenchmarkBareRun(b *testing.B) {
	drivertest.RequireRoot(b)
	base := drivertest.BaseRootFS(b)
	agentPath := drivertest.BuildAgent(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			bin := findRuntime(b, rt)
			dir := b.TempDir()
			b.Cleanup(func() { drivertest.UnmountUnder(b, dir) })
			root := filepath.Join(dir, "root")
			var took []time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				id := fmt.Sprintf("bare%d", i)
				bundle := filepath.Join(dir, id)
				sock := filepath.Join(bundle, "run")
				if err := os.MkdirAll(sock, 0o700); err != nil {
					b.Fatal(err)
				}
				spec := oci.BundleSpec(rt, driver.Spec{
					ID:        id,
					RootFS:    drivertest.SnapshotRootFS(b, base),
					AgentPath: agentPath,
					Resources: sandbox.Sizes()[sandbox.DefaultSize],
				}, sock, "hearth", "", "", 0)
				spec.Process.Args = []string{"/bin/echo", "hi"}
				cfg, err := json.Marshal(spec)
				if err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600); err != nil {
					b.Fatal(err)
				}
				args := append([]string{"--root", root}, oci.RuntimeFlags(rt)...)
				args = append(args, oci.NetworkFlags(rt, driver.NetworkNone)...)
				args = append(args, "run", "--bundle", bundle, id)
				cmd := exec.Command(bin, args...)
				b.StartTimer()
				began := time.Now()
				out, err := cmd.CombinedOutput()
				took = append(took, time.Since(began))
				b.StopTimer()
				if err != nil || !slices.Contains([]string{"hi\n", "hi\r\n"}, string(out)) {
					b.Fatalf("%s run = %q, %v", rt, out, err)
				}
				// run deletes the container when it exits; make sure.
				exec.Command(bin, "--root", root, "delete", "--force", id).Run()
				b.StartTimer()
			}
			benchstat.Report(b, "", took)
		})
	}
}

// startBenchSandbox starts sandbox id under runtime rt, on a btrfs
// snapshot of base, with the agent at agentPath and the default size; cleanup deletes
// it and unmounts what it left.
func startBenchSandbox(b *testing.B, rt, id, base, agentPath string) (*oci.Driver, driver.Spec) {
	b.Helper()
	dir := b.TempDir()
	b.Cleanup(func() { drivertest.UnmountUnder(b, dir) })
	d := newDriver(b, rt, findRuntime(b, rt), dir)
	spec := driver.Spec{
		ID:        id,
		RootFS:    drivertest.SnapshotRootFS(b, base),
		AgentPath: agentPath,
		UID:       1000, GID: 1000, Home: "/home/sandbox",
		Resources: sandbox.Sizes()[sandbox.DefaultSize],
	}
	if err := d.Start(context.Background(), spec); err != nil {
		b.Fatalf("Start() = %v", err)
	}
	b.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
	return d, spec
}

// busyScript keeps a sandbox busy while BenchmarkFreezeThaw freezes it:
// one shell spinning on the CPU and one forking a short sleep again and
// again, so that tasks appear while the cgroup freezes.
const busyScript = `(while :; do :; done) </dev/null >/dev/null 2>&1 &
(while :; do sleep 0.001; done) </dev/null >/dev/null 2>&1 &`

// BenchmarkFreezeThaw measures Freeze then Thaw of one busy sandbox (see
// busyScript), the pause of a live checkpoint without its snapshot. Besides
// ns/op for the pair it reports p50-ms and max-ms of the pair, and
// freeze-p50-ms and thaw-p50-ms. Under runc that is the cgroup freezer
// (`runc pause` takes ≈110 ms); under runsc it is `runsc pause` and
// `runsc resume` (see the driver's Freeze).
func BenchmarkFreezeThaw(b *testing.B) {
	drivertest.RequireRoot(b)
	base := drivertest.BaseRootFS(b)
	agentPath := drivertest.BuildAgent(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			d, spec := startBenchSandbox(b, rt, "freezethaw", base, agentPath)
			ctx := context.Background()
			c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
			if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: busyScript}, nil, nil, nil); err != nil || res.ExitCode != 0 {
				b.Fatalf("Exec(busy) = %+v, %v", res, err)
			}
			var pairs, freezes, thaws []time.Duration
			b.ResetTimer()
			for range b.N {
				began := time.Now()
				if err := d.Freeze(ctx, spec.ID); err != nil {
					b.Fatalf("Freeze() = %v", err)
				}
				frozen := time.Now()
				if err := d.Thaw(ctx, spec.ID); err != nil {
					b.Fatalf("Thaw() = %v", err)
				}
				pairs = append(pairs, time.Since(began))
				freezes, thaws = append(freezes, frozen.Sub(began)), append(thaws, time.Since(frozen))
				b.StopTimer()
				time.Sleep(10 * time.Millisecond) // let it run between checkpoints
				b.StartTimer()
			}
			b.StopTimer()
			benchstat.Report(b, "", pairs)
			b.ReportMetric(benchstat.Percentile(freezes, 0.5), "freeze-p50-ms")
			b.ReportMetric(benchstat.Percentile(thaws, 0.5), "thaw-p50-ms")
		})
	}
}

// BenchmarkDialPing measures Dial of a running sandbox's agent and one
// ping on the connection, the cost every exec and file operation pays
// before its own work. It reports p50-ms and max-ms besides ns/op.
func BenchmarkDialPing(b *testing.B) {
	drivertest.RequireRoot(b)
	base := drivertest.BaseRootFS(b)
	agentPath := drivertest.BuildAgent(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			d, spec := startBenchSandbox(b, rt, "dialping", base, agentPath)
			ctx := context.Background()
			var took []time.Duration
			b.ResetTimer()
			for range b.N {
				began := time.Now()
				conn, err := d.Dial(ctx, spec.ID)
				if err != nil {
					b.Fatalf("Dial() = %v", err)
				}
				c := agent.NewClient(func(context.Context) (net.Conn, error) { return conn, nil })
				if _, err := c.Ping(ctx); err != nil {
					b.Fatalf("Ping() = %v", err)
				}
				took = append(took, time.Since(began))
			}
			b.StopTimer()
			benchstat.Report(b, "", took)
		})
	}
}
