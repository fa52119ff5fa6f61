package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hearth/hearth/driver"
)

// TestCheckTasks: a start is refused, with the numbers, once fewer than a
// sandbox's tasks and the host's reserve are free under the lower of
// pid_max and threads-max; and let through when the files say nothing.
func TestCheckTasks(t *testing.T) {
	dir := t.TempDir()
	f := hostFiles{filepath.Join(dir, "pid_max"), filepath.Join(dir, "threads-max"), filepath.Join(dir, "loadavg"), filepath.Join(dir, "meminfo")}
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		pidMax, threadsMax, tasks string
		free                      int // -1: let through
	}{
		{"32768", "192730", "3 3000/31800 99", 968},
		{"32768", "192730", "3 3000/20000 99", -1},
		{"4194304", "20000", "3 3000/19000 99", 1000},
		{"32768", "192730", "garbage", -1},
	} {
		write(f.pidMax, tc.pidMax+"\n")
		write(f.threadsMax, tc.threadsMax+"\n")
		write(f.loadavg, "0.5 0.4 "+tc.tasks+"\n")
		err := f.checkTasks()
		var hl *driver.HostLimitError
		switch {
		case tc.free < 0 && err != nil:
			t.Errorf("%+v: checkTasks() = %v, want nil", tc, err)
		case tc.free >= 0 && (!errors.As(err, &hl) || hl.Free != tc.free || hl.Need != sandboxTasks+hostTasks):
			t.Errorf("%+v: checkTasks() = %v, want a HostLimitError with %d free", tc, err, tc.free)
		}
	}
	if err := procFiles.checkTasks(); err != nil {
		t.Errorf("this host: %v", err)
	}
}

// TestCheckMemory: a start is refused, with the numbers in MiB, once the
// host's MemAvailable is below the reserve (given, or the default for its
// total) plus a start's memory; let through at or above it, with a
// negative reserve, and when the kernel does not say.
func TestCheckMemory(t *testing.T) {
	dir := t.TempDir()
	f := hostFiles{meminfo: filepath.Join(dir, "meminfo")}
	const gib = 1 << 30
	meminfo := func(total, avail int64) string { // avail rounded up to whole kB
		return fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\nBuffers:  0 kB\n", total>>10, (avail+1023)>>10, (avail+1023)>>10)
	}
	for _, tc := range []struct {
		meminfo string
		reserve int64
		free    int // -1: let through
		need    int64
	}{
		// 24 GiB: the default reserve is 1.2 GiB.
		{meminfo(24*gib, 24*gib/20+StartMemory), 0, -1, 0},
		{meminfo(24*gib, 24*gib/20+StartMemory-1<<20), 0, 24*1024/20 + 64 - 1, 24*gib/20 + StartMemory},
		// 2 GiB: at least 256 MiB; 100 GiB: at most 2 GiB.
		{meminfo(2*gib, 300<<20), 0, 300, 256<<20 + StartMemory},
		{meminfo(100*gib, 2*gib), 0, 2048, 2*gib + StartMemory},
		{meminfo(100*gib, 3*gib), 0, -1, 0},
		// A reserve given.
		{meminfo(24*gib, 10*gib), 12 * gib, 10 * 1024, 12*gib + StartMemory},
		{meminfo(24*gib, 10*gib), 8 * gib, -1, 0},
		// Short by less than a MiB, within one MiB: free and need still differ.
		{meminfo(24*gib, 10*gib+100<<10), 10*gib + 512<<10 - StartMemory, 10 * 1024, 10*gib + 1<<20},
		{meminfo(24*gib, 10*gib-100<<10), 10*gib - StartMemory, 10*1024 - 1, 10 * gib},
		// No check, or nothing to go by.
		{meminfo(24*gib, 1<<20), -1, -1, 0},
		{"MemTotal: 1000 kB\nMemFree: 10 kB\n", 0, -1, 0},
		{"garbage", 0, -1, 0},
	} {
		if err := os.WriteFile(f.meminfo, []byte(tc.meminfo), 0o644); err != nil {
			t.Fatal(err)
		}
		err := f.checkMemory(tc.reserve)
		var hl *driver.HostLimitError
		switch {
		case tc.free < 0 && err != nil:
			t.Errorf("%q, reserve %d: checkMemory() = %v, want nil", tc.meminfo, tc.reserve, err)
		case tc.free >= 0 && (!errors.As(err, &hl) || hl.Free != tc.free || hl.Need != int((tc.need+1<<20-1)>>20) || hl.Free >= hl.Need || hl.What != "MiB of memory"):
			t.Errorf("%q, reserve %d: checkMemory() = %#v, want a HostLimitError with %d MiB free of %d needed", tc.meminfo, tc.reserve, err, tc.free, (tc.need+1<<20-1)>>20)
		}
	}
	if err := os.Remove(f.meminfo); err != nil {
		t.Fatal(err)
	}
	if err := f.checkMemory(0); err != nil {
		t.Errorf("no meminfo: checkMemory() = %v, want nil", err)
	}
	if err := (hostRoom{files: procFiles}).check(); err != nil {
		t.Errorf("this host: %v", err)
	}
}
