package e2e_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
)

// BenchmarkCheckpoint is a live checkpoint of a running sandbox that has
// written 1 MB, 100 MB or 1 GB (synced to disk first), and BenchmarkRestore
// a restore to it until the sandbox answers an exec: both should not grow
// with the data written.
func BenchmarkCheckpoint(b *testing.B) { benchCheckpoint(b, false) }

func BenchmarkRestore(b *testing.B) { benchCheckpoint(b, true) }

func benchCheckpoint(b *testing.B, restore bool) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		for _, mb := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) {
				name := fmt.Sprintf("ck-bench-%d", mb)
				if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name, Size: "medium"}); err != nil {
					b.Fatal(err)
				}
				defer c.Destroy(ctx, name)
				script := fmt.Sprintf("head -c %d /dev/urandom > blob && sync", mb<<20)
				if res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: script, Timeout: sandbox.Duration(5 * time.Minute)}, nil, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
					b.Fatalf("write %d MB = %+v, %v", mb, res, err)
				}
				base, err := c.Checkpoint(ctx, name, sandbox.CheckpointRequest{Label: "base"})
				if err != nil {
					b.Fatal(err)
				}
				var lat latencies
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if restore {
						lat = append(lat, timeRestore(b, c, name, base.ID))
					} else {
						lat = append(lat, timeCheckpoint(b, c, name, sandbox.CheckpointRequest{}))
					}
				}
				lat.report(b)
			})
		}
	})
}

// BenchmarkFork is a fork of a checkpoint until the new sandbox's first
// output; BenchmarkWake is the first exec on a sleeping sandbox until its
// first output, which includes the wake; BenchmarkMemory reports what a
// sleeping sandbox holds.
func BenchmarkFork(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "fork-src"}); err != nil {
			b.Fatal(err)
		}
		ck, err := c.Checkpoint(ctx, "fork-src", sandbox.CheckpointRequest{Label: ""})
		if err != nil {
			b.Fatal(err)
		}
		var lat latencies
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("fork-%d", i)
			start := time.Now()
			if _, err := c.Fork(ctx, "fork-src", ck.ID, name); err != nil {
				b.Fatal(err)
			}
			var out firstByte
			if _, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, nil, &out, io.Discard); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, out.at.Sub(start))
			b.StopTimer()
			c.Destroy(ctx, name)
			b.StartTimer()
		}
		lat.report(b)
	})
}

func BenchmarkWake(b *testing.B) {
	forEachRuntimeB(b, func(b *testing.B, d *daemon) {
		ctx := context.Background()
		c := d.Client()
		sb, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "wake"})
		if err != nil {
			b.Fatal(err)
		}
		var lat latencies
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if _, err := c.Sleep(ctx, "wake"); err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				b.ReportMetric(float64(sleepingKiB(sb.ID))/1024, "sleeping-sandbox-MiB")
			}
			b.StartTimer()
			start := time.Now()
			var out firstByte
			if _, err := c.Exec(ctx, "wake", sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, nil, &out, io.Discard); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, out.at.Sub(start))
		}
		lat.report(b)
	})
}

// sleepingKiB is what a sleeping sandbox holds in memory: the PSS of its
// cgroup's processes and of any host process naming it (none, when sleep
// really freed it).
func sleepingKiB(id string) int64 {
	total, _ := cgroupPSSKiB(id)
	for _, p := range processesMentioning(id) {
		var pid int
		fmt.Sscanf(p, "%d:", &pid)
		total += pssKiB(pid)
	}
	return total
}

// BenchmarkMemoryCheckpoint, under runsc: a checkpoint with memory of a
// sandbox whose process holds 10 MB or 100 MB, a restore to it and a fork
// of it, each until the sandbox answers an exec (its process back), next
// to the same three of the files only of the same sandbox, in the same
// run.
func BenchmarkMemoryCheckpoint(b *testing.B) {
	d := runscDaemon(b)
	ctx := context.Background()
	c := d.Client()
	for _, mb := range []int{10, 100} {
		name := fmt.Sprintf("mem-bench-%d", mb)
		if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: name, Size: "medium"}); err != nil {
			b.Fatal(err)
		}
		hold := fmt.Sprintf("python3 -c 'import os, time; b = bytearray(os.urandom(%d)); time.sleep(100000)' >/dev/null 2>&1 & sleep 2", mb<<20)
		if res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: hold}, nil, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
			b.Fatalf("hold %d MB = %+v, %v", mb, res, err)
		}
		for _, memory := range []bool{false, true} {
			kind := "files"
			if memory {
				kind = "memory"
			}
			base, err := c.Checkpoint(ctx, name, sandbox.CheckpointRequest{Memory: memory})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("checkpoint/%s/%dMB", kind, mb), func(b *testing.B) {
				var lat latencies
				for i := 0; i < b.N; i++ {
					lat = append(lat, timeCheckpoint(b, c, name, sandbox.CheckpointRequest{Memory: memory}))
				}
				lat.report(b)
			})
			b.Run(fmt.Sprintf("restore/%s/%dMB", kind, mb), func(b *testing.B) {
				var lat latencies
				for i := 0; i < b.N; i++ {
					lat = append(lat, timeRestore(b, c, name, base.ID))
				}
				lat.report(b)
			})
			b.Run(fmt.Sprintf("fork/%s/%dMB", kind, mb), func(b *testing.B) {
				var lat latencies
				for i := 0; i < b.N; i++ {
					lat = append(lat, timeFork(b, c, name, base.ID, memory))
				}
				lat.report(b)
			})
			// Back to the memory checkpoint, so that the process holds its
			// memory for the next kind.
			if memory {
				continue
			}
			if _, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: hold}, nil, io.Discard, io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// timeCheckpoint returns how long a checkpoint of name with req takes;
// the checkpoint is deleted after, off the clock.
func timeCheckpoint(b *testing.B, c *client.Client, name string, req sandbox.CheckpointRequest) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	ck, err := c.Checkpoint(ctx, name, req)
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	b.StopTimer()
	defer b.StartTimer()
	if err := c.DeleteCheckpoint(ctx, name, ck.ID); err != nil {
		b.Fatal(err)
	}
	return took
}

// timeRestore returns how long a restore of name to checkpoint id takes,
// until the sandbox answers an exec.
func timeRestore(b *testing.B, c *client.Client, name, id string) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, err := c.Restore(ctx, name, id); err != nil {
		b.Fatal(err)
	}
	if res, err := c.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		b.Fatalf("true after restore = %+v, %v", res, err)
	}
	return time.Since(start)
}

// timeFork returns how long a fork of name at checkpoint id takes, until
// the fork answers an exec; the fork is destroyed after, off the clock. A
// fork of a memory checkpoint must have resumed its processes.
func timeFork(b *testing.B, c *client.Client, name, id string, memory bool) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	fk, err := c.Fork(ctx, name, id, "mem-bench-fork")
	if err != nil || strings.HasSuffix(fk.Reason, "with its processes") != memory {
		b.Fatalf("fork = %+v, %v; want its processes resumed: %v", fk, err, memory)
	}
	if res, err := c.Exec(ctx, fk.Name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		b.Fatalf("true after fork = %+v, %v", res, err)
	}
	took := time.Since(start)
	b.StopTimer()
	defer b.StartTimer()
	if err := c.Destroy(ctx, fk.Name); err != nil {
		b.Fatal(err)
	}
	return took
}
