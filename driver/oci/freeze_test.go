package oci_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
)

// TestFreezeCgroup freezes and thaws a cgroup holding a spinning shell, in
// the v1 freezer hierarchy and in the unified one (whichever this host
// has: the sandboxes of the conformance suite only exercise the one the
// driver picks), and wants its CPU time to stand still while frozen only.
func TestFreezeCgroup(t *testing.T) {
	drivertest.RequireRoot(t)
	v1, v2, err := oci.FreezerMounts("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mnt  string
		v2   bool
	}{
		{"v1", v1, false},
		{"v2", v2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mnt == "" {
				t.Skipf("no %s cgroup freezer on this host", tc.name)
			}
			dir := filepath.Join(tc.mnt, fmt.Sprintf("hearth-freezetest-%d", os.Getpid()))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				oci.ThawCgroup(dir, tc.v2)
				cmd.Process.Kill()
				cmd.Wait()
				if err := os.Remove(dir); err != nil {
					t.Errorf("remove cgroup: %v", err)
				}
			})
			pid := cmd.Process.Pid
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			for i := range 2 {
				began := time.Now()
				if err := oci.FreezeCgroup(ctx, dir, tc.v2); err != nil {
					t.Fatalf("freeze #%d = %v", i+1, err)
				}
				t.Logf("freeze #%d took %v", i+1, time.Since(began).Round(time.Microsecond))
			}
			if ran := cpuTimeOver(t, pid, 200*time.Millisecond); ran != 0 {
				t.Errorf("a frozen spinning process ran %d ticks in 200ms, want 0", ran)
			}
			for i := range 2 {
				if err := oci.ThawCgroup(dir, tc.v2); err != nil {
					t.Fatalf("thaw #%d = %v", i+1, err)
				}
			}
			if ran := cpuTimeOver(t, pid, 200*time.Millisecond); ran == 0 {
				t.Errorf("a thawed spinning process ran no tick in 200ms")
			}
		})
	}
}

// cpuTimeOver returns the clock ticks of CPU time process pid used during
// d.
func cpuTimeOver(t *testing.T, pid int, d time.Duration) int {
	t.Helper()
	before := cpuTicks(t, pid)
	time.Sleep(d)
	return cpuTicks(t, pid) - before
}

// cpuTicks returns utime+stime of process pid (proc(5)).
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after "pid (comm) ": state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return utime + stime
}
