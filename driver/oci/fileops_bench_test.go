package oci_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// BenchmarkFileOps measures what the agent's switch to the sandbox user's
// ids (see agent.Server's file operations) costs each file operation, per
// runtime: one iteration is a stat, a 1 KiB write and its read back, in a
// sandbox whose user is 1000 (the agent switches its thread's ids for
// each) and, interleaved in the same loop, in one whose user is root (no
// switch, as every file operation was before). Besides ns/op for the
// whole iteration it reports, for each sandbox, the p50 and p99 of each
// operation in microseconds: user-stat-p50-us, root-stat-p50-us, …
func BenchmarkFileOps(b *testing.B) {
	drivertest.RequireRoot(b)
	base := drivertest.BaseRootFS(b)
	agentPath := drivertest.BuildAgent(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			dir := b.TempDir()
			b.Cleanup(func() { drivertest.UnmountUnder(b, dir) })
			d := newDriver(b, rt, findRuntime(b, rt), dir)
			ctx := context.Background()
			clients := map[string]*agent.Client{}
			for name, uid := range map[string]int{"user": 1000, "root": 0} {
				spec := driver.Spec{
					ID:        "fileops" + name,
					RootFS:    drivertest.OverlayRootFS(b, base),
					AgentPath: agentPath,
					UID:       uid, GID: uid, Home: "/tmp",
					Resources: sandbox.Sizes()[sandbox.DefaultSize],
				}
				if err := d.Start(ctx, spec); err != nil {
					b.Fatalf("Start(%s) = %v", spec.ID, err)
				}
				b.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
				clients[name] = agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
			}
			content := bytes.Repeat([]byte("x"), 1<<10)
			took := map[string][]time.Duration{}
			timed := func(key string, op func() error) {
				began := time.Now()
				if err := op(); err != nil {
					b.Fatalf("%s = %v", key, err)
				}
				took[key] = append(took[key], time.Since(began))
			}
			b.ResetTimer()
			for i := range b.N {
				for _, name := range []string{"user", "root"} {
					c := clients[name]
					path := fmt.Sprintf("/tmp/f%d", i%16)
					timed(name+"-stat", func() error { _, err := c.Stat(ctx, "/etc/passwd"); return err })
					timed(name+"-write", func() error {
						_, err := c.WriteFile(ctx, sandbox.WriteRequest{Path: path}, bytes.NewReader(content))
						return err
					})
					timed(name+"-read", func() error { return c.ReadFile(ctx, path, io.Discard) })
				}
			}
			b.StopTimer()
			for key, d := range took {
				b.ReportMetric(benchstat.Percentile(d, 0.5)*1000, key+"-p50-us")
				b.ReportMetric(benchstat.Percentile(d, 0.99)*1000, key+"-p99-us")
			}
		})
	}
}
