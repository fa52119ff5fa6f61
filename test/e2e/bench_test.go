package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// Benchmarks of the whole path a caller sees: HTTP and WebSocket, the
// daemon, the runtime and the agent. Run them with the runtimes' own
// baselines (driver/oci) in the same invocation; docs/BENCHMARKS.md has the
// command and the figures.

// latencies collects one duration per iteration.
type latencies []time.Duration

func (l latencies) report(b *testing.B) { benchstat.Report(b, "", l) }

// firstByte is a writer that records when its first byte arrives.
type firstByte struct {
	at  time.Time
	buf bytes.Buffer
}

func (f *firstByte) Write(p []byte) (int, error) {
	if f.at.IsZero() && len(p) > 0 {
		f.at = time.Now()
	}
	return f.buf.Write(p)
}

// BenchmarkCreateToFirstOutput is create → the first byte of `echo hi` from
// the new sandbox, per runtime. Destroy runs outside the timer.
func BenchmarkCreateToFirstOutput(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		var lat latencies
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("bench-%d", i)
			start := time.Now()
			if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name}); err != nil {
				b.Fatal(err)
			}
			var out firstByte
			if _, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, nil, &out, io.Discard); err != nil || out.buf.String() != "hi\n" {
				b.Fatalf("echo hi = %q, %v", out.buf.String(), err)
			}
			lat = append(lat, out.at.Sub(start))
			b.StopTimer()
			if err := c.Destroy(ctx, name); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		lat.report(b)
	})
}

// BenchmarkExecTrue is the round trip of `true` in a running sandbox through
// the API, per runtime; BenchmarkHostForkExec is the host's own fork/exec of
// the same command, the floor.
func BenchmarkExecTrue(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "exec-bench"}); err != nil {
			b.Fatal(err)
		}
		var lat latencies
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			res, err := c.Exec(ctx, "exec-bench", sandbox.ExecRequest{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("true = %+v, %v", res, err)
			}
			lat = append(lat, time.Since(start))
		}
		lat.report(b)
	})
}

// BenchmarkExecLocale is the round trip of `echo hi` in a running sandbox
// under the default LANG=C.UTF-8, per runtime: with the locale archive the
// image has ("archive-"), against the same command with LOCPATH naming the
// compiled locale directories, which makes glibc read each LC_* file
// instead, as it did before the image had the archive ("files-"). The two
// alternate in one sandbox, so both see the same host.
func BenchmarkExecLocale(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "locale-bench"}); err != nil {
			b.Fatal(err)
		}
		var archive, files latencies
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, env := range []map[string]string{nil, {"LOCPATH": "/usr/lib/locale"}} {
				var out bytes.Buffer
				start := time.Now()
				res, err := c.Exec(ctx, "locale-bench", sandbox.ExecRequest{Argv: []string{"echo", "hi"}, Env: env}, nil, &out, io.Discard)
				if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
					b.Fatalf("echo hi (env %v) = %+v, %q, %v", env, res, out.String(), err)
				}
				if env == nil {
					archive = append(archive, time.Since(start))
				} else {
					files = append(files, time.Since(start))
				}
			}
		}
		benchstat.Report(b, "archive-", archive)
		benchstat.Report(b, "files-", files)
	})
}

func BenchmarkHostForkExec(b *testing.B) {
	var lat latencies
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	lat.report(b)
}

// BenchmarkMemory reports the daemon's resident memory and the memory an
// idle sandbox costs the host (proportional set size of every process in
// its cgroup), per runtime. Its time per op is meaningless.
func BenchmarkMemory(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "idle"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, "idle", sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second) // let the exec's process be reaped
		b.ReportMetric(float64(pssKiB(d.Cmd.Process.Pid))/1024, "daemon-MiB")
		b.ReportMetric(float64(sandboxPSSKiB(b, sb.ID))/1024, "idle-sandbox-MiB")
	})
}

// forEachRuntimeB runs f per installed runtime with one daemon each.
func forEachRuntimeB(b *testing.B, f func(b *testing.B, d *daemon)) {
	requireDaemon(b)
	for _, rt := range bins.Runtimes {
		b.Run(rt, func(b *testing.B) {
			d := newDaemon(b, rt)
			f(b, d)
		})
	}
}

// sandboxPSSKiB sums the PSS of every process in the sandbox's memory
// cgroup, failing when it has none.
func sandboxPSSKiB(b *testing.B, id string) int64 {
	kib, ok := cgroupPSSKiB(id)
	if !ok {
		b.Fatalf("no memory cgroup for %s", id)
	}
	return kib
}

// cgroupPSSKiB sums the PSS of every process in the sandbox's memory cgroup;
// false when the sandbox has no cgroup (nothing of it runs).
func cgroupPSSKiB(id string) (int64, bool) {
	var procs string
	filepath.WalkDir("/sys/fs/cgroup/memory", func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() && strings.Contains(e.Name(), id) {
			procs = filepath.Join(p, "cgroup.procs")
			return filepath.SkipAll
		}
		return nil
	})
	data, err := os.ReadFile(procs)
	if err != nil {
		return 0, false
	}
	var total int64
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		total += pssKiB(pid)
	}
	return total, true
}

// pssKiB is a process's proportional set size in KiB.
func pssKiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
