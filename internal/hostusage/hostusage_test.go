package hostusage_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/internal/hostusage"
)

func proc(t *testing.T, stat, meminfo string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"stat": stat, "meminfo": meminfo} {
		if text == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReadCPU: busy is all but idle and iowait; guest time, already in
// user and nice, is not counted twice; the per-CPU lines are not added.
func TestReadCPU(t *testing.T) {
	dir := proc(t, "cpu  100 10 20 5000 300 1 2 3 40 4\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 5\n", "")
	c, err := hostusage.ReadCPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Busy != 1360*time.Millisecond || c.Total != 54360*time.Millisecond {
		t.Errorf("busy %v, total %v; want 1.36s, 54.36s", c.Busy, c.Total)
	}
	if c, err := hostusage.ReadCPU(hostusage.Proc); err != nil || c.Busy <= 0 || c.Total <= c.Busy {
		t.Errorf("this host: %+v, %v", c, err)
	}
	for _, bad := range []string{"cpu0 1 2 3 4 5 6 7 8\n", "cpu  1 2 3\n", "cpu  1 2 3 4 5 6 7 x\n", "cpu  1 2 3 4 5 6 7 -8\n", ""} {
		if c, err := hostusage.ReadCPU(proc(t, bad, "")); err == nil {
			t.Errorf("stat %q: %+v, no error", bad, c)
		}
	}
}

// TestReadMemory: the three fields in bytes; a meminfo without MemTotal
// or MemFree, or whose free or available memory exceeds the total, is
// refused.
func TestReadMemory(t *testing.T) {
	m, err := hostusage.ReadMemory(proc(t, "", "MemTotal:        8388608 kB\nMemFree:         2097152 kB\nMemAvailable:    5242880 kB\nBuffers: 1 kB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total != 8<<30 || m.Free != 2<<30 || m.Available != 5<<30 {
		t.Errorf("%+v", m)
	}
	// A kernel before MemAvailable.
	if m, err := hostusage.ReadMemory(proc(t, "", "MemFree: 512 kB\nMemTotal: 1024 kB\n")); err != nil || m.Total != 1<<20 || m.Free != 1<<19 || m.Available != 0 {
		t.Errorf("no MemAvailable: %+v, %v", m, err)
	}
	for _, bad := range []string{"MemFree: 1 kB\n", "MemTotal: 1 kB\n", "MemTotal: 0 kB\nMemFree: 0 kB\n", "MemTotal: 2 kB\nMemFree: 1 kB\nMemAvailable: 3 kB\n", "MemTotal: 1 kB\nMemFree: 2 kB\n", "MemTotal: lots\nMemFree: 1 kB\n", "MemTotal: -4 kB\nMemFree: 1 kB\n", ""} {
		if m, err := hostusage.ReadMemory(proc(t, "", bad)); err == nil {
			t.Errorf("meminfo %q: %+v, no error", strings.TrimSpace(bad), m)
		}
	}
	if m, err := hostusage.ReadMemory(hostusage.Proc); err != nil || m.Total <= 0 || m.Available <= 0 {
		t.Errorf("this host: %+v, %v", m, err)
	}
}

// TestReadCPUs: the whole host's time as ReadCPU tells it, and each CPU's
// by its number (numbers need not be contiguous: CPUs may be offline); a
// malformed per-CPU line is refused.
func TestReadCPUs(t *testing.T) {
	dir := proc(t, "cpu  100 10 20 5000 300 1 2 3 40 4\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu3 10 0 0 90 0 0 0 0 0 0\nintr 5\nctxt 7\n", "")
	all, each, err := hostusage.ReadCPUs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if all.Busy != 1360*time.Millisecond || all.Total != 54360*time.Millisecond {
		t.Errorf("all: busy %v, total %v; want 1.36s, 54.36s", all.Busy, all.Total)
	}
	want := map[int]hostusage.CPU{0: {Total: 360 * time.Millisecond, Busy: 270 * time.Millisecond}, 3: {Total: time.Second, Busy: 100 * time.Millisecond}}
	if len(each) != len(want) || each[0] != want[0] || each[3] != want[3] {
		t.Errorf("each: %+v, want %+v", each, want)
	}
	if _, each, err := hostusage.ReadCPUs(hostusage.Proc); err != nil || len(each) == 0 {
		t.Errorf("this host: %d CPUs, %v", len(each), err)
	}
	for _, bad := range []string{"cpu  1 2 3 4 5 6 7 8\ncpu0 1 2 3\n", "cpu  1 2 3 4 5 6 7 8\ncpux 1 2 3 4 5 6 7 8\n", "cpu  1 2 3 4 5 6 7 8\ncpu-1 1 2 3 4 5 6 7 8\n"} {
		if _, each, err := hostusage.ReadCPUs(proc(t, bad, "")); err == nil {
			t.Errorf("stat %q: %+v, no error", bad, each)
		}
		if _, err := hostusage.ReadCPU(proc(t, bad, "")); err != nil {
			t.Errorf("stat %q: ReadCPU, which reads the first line only: %v", bad, err)
		}
	}
}

// TestParseCPUList: cpuset(7)'s list format both ways; anything else is
// refused.
func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "0-3": "0-3", "0-1,3,5-7": "0-1,3,5-7", "3,1,2": "1-3", "0-2,1-4": "0-4", "8,10": "8,10"} {
		l, err := hostusage.ParseCPUList(in)
		if err != nil || l.String() != want {
			t.Errorf("hostusage.ParseCPUList(%q) = %v (%q), %v; want %q", in, l, l.String(), err, want)
		}
	}
	for _, bad := range []string{"x", "1-", "-1", "3-1", "1,,2", "0-99999999", " 1"} {
		if l, err := hostusage.ParseCPUList(bad); err == nil {
			t.Errorf("hostusage.ParseCPUList(%q) = %v, no error", bad, l)
		}
	}
}
