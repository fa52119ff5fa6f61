package lifecycle_test

import (
	"math"
	"testing"
	"time"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// TestUsage: the node's samples of a running sandbox come back as a
// series, each with its CPU rate over the sample before; a call adds a
// fresh sample with the process count, the root's disk usage and the
// sandbox's limits; a sleeping sandbox has its disk and past samples
// only, and a destroyed one's samples are forgotten; another agent's
// sandbox is not_found.
func TestUsage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, a1, "web")
	e.exec(t, a1, "web", "head -c 3000 /dev/zero > data.bin")
	began := e.clock.Now()
	for i, u := range []driver.Usage{
		{CPUNanos: 1e9, MemoryBytes: 100 << 20, MemoryPeakBytes: 120 << 20, NetRxBytes: 10, NetTxBytes: 20, Processes: 3},
		{CPUNanos: 6e9, MemoryBytes: 200 << 20, MemoryPeakBytes: 220 << 20, MemoryWorkingSetBytes: 180 << 20, NetRxBytes: 110, NetTxBytes: 220, Processes: 4},
		{CPUNanos: 8e9, MemoryBytes: 150 << 20, MemoryPeakBytes: 220 << 20, NetRxBytes: 210, NetTxBytes: 420, Processes: 2},
	} {
		if i > 0 {
			e.clock.Advance(10 * time.Second)
		}
		e.drv.SetUsage(sb.ID, u)
		lifecycle.SampleUsage(ctx, e.svc)
	}
	e.clock.Advance(10 * time.Second)
	got, err := e.svc.Usage.Of(ctx, a1, "web", began)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Series) != 3 {
		t.Fatalf("series = %+v, want the 3 samples", got.Series)
	}
	if s := got.Series[1]; math.Abs(s.CPUCores-0.5) > 1e-9 || s.MemoryBytes != 200<<20 || s.MemoryWorkingSetBytes != 180<<20 || s.NetTxBytes != 220 || !s.At.Equal(began.Add(10*time.Second)) {
		t.Errorf("second sample = %+v; want 0.5 cores (5 s of CPU in 10 s), 200 MiB (a 180 MiB working set), 220 bytes sent, at +10s", s)
	}
	if got.Series[0].CPUCores != 0 {
		t.Errorf("the first sample has no sample before it, but a rate %v", got.Series[0].CPUCores)
	}
	// Now: the latest reading again, 10 s after the last sample.
	if math.Abs(got.CPUCores) > 1e-9 || got.Processes != 2 || got.CPUSeconds != 8 || got.MemoryPeakBytes != 220<<20 {
		t.Errorf("current = %+v; want no CPU since the last sample, 2 processes, 8 CPU seconds, a 220 MiB peak", got.UsageSample)
	}
	if got.DiskBytes < 3000 || got.LimitMemoryBytes != sb.Resources.MemoryBytes || got.LimitMilliCPU != sb.Resources.MilliCPU || got.Status != sandbox.StatusRunning {
		t.Errorf("usage = disk %d, limits %d mCPU %d B, %s; want ≥ 3000 bytes on disk and the sandbox's size", got.DiskBytes, got.LimitMilliCPU, got.LimitMemoryBytes, got.Status)
	}
	if _, err := e.svc.Usage.Of(ctx, a2, sb.Name, time.Time{}); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("Usage of a1's sandbox as a2 = %v, want not_found", err)
	}
	if noSeries, _ := e.svc.Usage.Of(ctx, a1, "web", time.Time{}); noSeries.Series != nil {
		t.Errorf("without since the answer has a series: %+v", noSeries.Series)
	}

	if _, err := e.svc.Sandboxes.Sleep(ctx, a1, "web"); err != nil {
		t.Fatal(err)
	}
	asleep, err := e.svc.Usage.Of(ctx, a1, "web", began)
	if err != nil || asleep.Status != sandbox.StatusSleeping || asleep.CPUSeconds != 0 || len(asleep.Series) != 3 || asleep.DiskBytes < 3000 {
		t.Errorf("usage of the sleeping sandbox = %+v, %v; want its disk and its 3 past samples, no live figures", asleep, err)
	}
	if err := e.svc.Sandboxes.Destroy(ctx, a1, "web"); err != nil {
		t.Fatal(err)
	}
	lifecycle.SampleUsage(ctx, e.svc)
	e.create(t, a1, "web")
	if again, err := e.svc.Usage.Of(ctx, a1, "web", began); err != nil || len(again.Series) != 0 {
		t.Errorf("a new sandbox of the name has samples %+v, %v; want none of the destroyed one's", again.Series, err)
	}
}
