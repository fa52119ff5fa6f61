package oci_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// BenchmarkMemoryImage (runsc) measures what sealing memory images costs,
// against the plaintext images of before, in the same run on the same
// sandbox, whose process holds 10 or 100 MiB. Each iteration is one
// CheckpointMemory whose paused function also runs `runsc checkpoint`
// into a plain directory on disk, as CheckpointMemory did before (its
// time is plain-save); the driver's log gives the time of its own save
// into a tmpfs (sealed-save), which it then seals to disk in the
// background. The checkpoint as it is now is the call's time less
// plain-save (checkpoint-sealed), as it was before the call's time less
// sealed-save (checkpoint-plain). Restores are RestoreMemory
// (restore-sealed, once the seal is done) and a start from the plaintext
// image (restore-plain), each until the agent answers. All p50 and p99,
// in ms.
func BenchmarkMemoryImage(b *testing.B) {
	drivertest.RequireRoot(b)
	base := drivertest.BaseRootFS(b)
	agentPath := drivertest.BuildAgent(b)
	for _, mb := range []int{10, 100} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) {
			dir := b.TempDir()
			b.Cleanup(func() { drivertest.UnmountUnder(b, dir) })
			saves := &saveLog{}
			d, err := oci.New(oci.Options{Runtime: oci.RuntimeRunsc, Binary: findRuntime(b, oci.RuntimeRunsc), StateDir: dir,
				Sealer: newBox(b), Logger: slog.New(saves)})
			if err != nil {
				b.Fatal(err)
			}
			unmountAfter(b, d)
			spec := driver.Spec{
				ID: fmt.Sprintf("img%d", mb), RootFS: drivertest.OverlayRootFS(b, base), AgentPath: agentPath,
				UID: 1000, GID: 1000, Home: "/home/sandbox", Resources: sandbox.Sizes()["medium"],
			}
			ctx := context.Background()
			if err := d.Start(ctx, spec); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
			c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.Dial(ctx, spec.ID) })
			hold := fmt.Sprintf(`python3 -c 'import os, time; b = bytearray(os.urandom(%d)); time.sleep(100000)' >/dev/null 2>&1 & sleep 2`, mb<<20)
			if res, err := c.Exec(ctx, sandbox.ExecRequest{Shell: hold}, nil, nil, nil); err != nil || res.ExitCode != 0 {
				b.Fatalf("hold %d MiB = %+v, %v", mb, res, err)
			}
			runsc := findRuntime(b, oci.RuntimeRunsc)
			var ckSealed, ckPlain, savePlain, saveSealed, rsSealed, rsPlain []time.Duration
			b.ResetTimer()
			for i := range b.N {
				key, plain := fmt.Sprintf("bench%d", i), filepath.Join(b.TempDir(), "plain")
				var plainSave time.Duration
				saves.reset()
				began := time.Now()
				err := d.CheckpointMemory(ctx, spec.ID, key, driver.MemoryOptions{Paused: func() error {
					t0 := time.Now()
					out, err := exec.Command(runsc, "--root", filepath.Join(dir, "root"), "checkpoint", "--image-path", plain, "--leave-running", spec.ID).CombinedOutput()
					plainSave = time.Since(t0)
					if err != nil {
						return fmt.Errorf("%v: %s", err, out)
					}
					return nil
				}})
				total := time.Since(began)
				if err != nil {
					b.Fatalf("CheckpointMemory = %v", err)
				}
				sealedSave := saves.took()
				if err := d.WaitSealed(ctx, key); err != nil {
					b.Fatal(err)
				}
				ckSealed, ckPlain = append(ckSealed, total-plainSave), append(ckPlain, total-sealedSave)
				savePlain, saveSealed = append(savePlain, plainSave), append(saveSealed, sealedSave)
				for _, restore := range []struct {
					to    *[]time.Duration
					start func() error
				}{
					{&rsSealed, func() error { return d.RestoreMemory(ctx, spec, key) }},
					{&rsPlain, func() error { return d.StartFromImage(ctx, spec, plain) }},
				} {
					if err := d.Stop(ctx, spec.ID); err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if err := restore.start(); err != nil {
						b.Fatalf("restore = %v", err)
					}
					*restore.to = append(*restore.to, time.Since(t0))
				}
				d.DeleteMemory(ctx, key)
			}
			b.StopTimer()
			for name, d := range map[string][]time.Duration{"checkpoint-sealed": ckSealed, "checkpoint-plain": ckPlain,
				"sealed-save": saveSealed, "plain-save": savePlain, "restore-sealed": rsSealed, "restore-plain": rsPlain} {
				b.ReportMetric(benchstat.Percentile(d, 0.5), name+"-p50-ms")
				b.ReportMetric(benchstat.Percentile(d, 0.99), name+"-p99-ms")
			}
		})
	}
}

// saveLog is a slog.Handler that keeps the time of the driver's last
// "memory image taken".
type saveLog struct {
	mu   sync.Mutex
	last time.Duration
}

func (s *saveLog) Enabled(context.Context, slog.Level) bool { return true }
func (s *saveLog) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *saveLog) WithGroup(string) slog.Handler            { return s }
func (s *saveLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "memory image taken" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "took" {
			s.mu.Lock()
			s.last = a.Value.Duration()
			s.mu.Unlock()
		}
		return true
	})
	return nil
}

func (s *saveLog) reset() { s.mu.Lock(); s.last = 0; s.mu.Unlock() }

func (s *saveLog) took() time.Duration { s.mu.Lock(); defer s.mu.Unlock(); return s.last }
