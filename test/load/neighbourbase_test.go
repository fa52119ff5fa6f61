package load_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/driver/oci"
	"github.com/hearth/hearth/internal/mountinfo"
)

// neighbourBaselines measures probe p beside the loaded neighbours' work
// without hearth, each of the lowest precedence this host's scheduler
// gives: 4 × k CPU-bound host processes (see idleBurners), and k sandboxes
// of the runtime rt alone, each running burn (see bareBurners). The first
// is what no demotion of sandboxes can improve on this host; the second
// is what the runtime's own CPU-bound sandboxes do to the probe when
// nothing of hearth runs beside them. It logs the ratios of each to the
// quiet probes, through the Go client and through the CLI.
func neighbourBaselines(t *testing.T, p probe, rt string, k int, quiet, quietCLI *recorder) {
	besideLoad(t, p, fmt.Sprintf("%d idle host processes", 4*k), func() func() { return idleBurners(t, 4*k) }, quiet, quietCLI)
	besideLoad(t, p, fmt.Sprintf("%d idle bare %s sandboxes", k, rt), func() func() { return bareBurners(t, rt, k) }, quiet, quietCLI)
}

// besideLoad measures probe p through the Go client and the CLI while the
// load that start starts runs (start returns what stops it), and logs
// both, named after what, with their ratios to the quiet probes.
func besideLoad(t *testing.T, p probe, what string, start func() (stop func()), quiet, quietCLI *recorder) {
	rec := newRecorder("baseline: probe beside " + what)
	recCLI := newRecorder("baseline: probe beside " + what + ", through the CLI")
	stop := start()
	time.Sleep(time.Second)
	busy := cpuBusy()
	p.measure(rec)
	loaded := busy()
	p.measureCLI(recCLI)
	stop()
	for _, r := range []*recorder{rec, recCLI} {
		r.report(t, 0)
		r.wantNoErrors(t)
	}
	t.Logf("load: neighbour baseline: probe beside %s: p50 %.1f ms, p99 %.1f ms (CPU %.0f%%); ratio to quiet p50 %.1fx, p99 %.1fx; through the CLI p50 %.1f ms, p99 %.1f ms, ratio p50 %.1fx, p99 %.1fx",
		what, rec.p(0.5), rec.p(0.99), 100*loaded, rec.p(0.5)/quiet.p(0.5), rec.p(0.99)/quiet.p(0.99),
		recCLI.p(0.5), recCLI.p(0.99), recCLI.p(0.5)/quietCLI.p(0.5), recCLI.p(0.99)/quietCLI.p(0.99))
	if loaded < 0.8 {
		t.Errorf("the host's CPUs were %.0f%% busy beside %s; want them loaded (>= 80%%)", 100*loaded, what)
	}
}

// idleBurners starts n CPU-bound host processes of the lowest precedence
// there is and returns what kills them; t's cleanup kills them too. Each
// is SCHED_IDLE, in a cpu cgroup of their own at the top of the hierarchy
// marked idle (see markIdle): SCHED_IDLE alone ranks them only among the
// tasks of their own group, which are the test's (the client's) and its
// daemon's, and beside 40 of them there a thread of the test woke 13 ms
// late at the p99 (0.2–0.5 ms quiet, and beside the same processes in a
// cgroup of their own).
func idleBurners(t *testing.T, n int) (stop func()) {
	t.Helper()
	cg := filepath.Join(cpuHierarchy(t), fmt.Sprintf("hearth-load-burners-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Errorf("remove the burners' cgroup: %v", err)
		}
	})
	markIdle(t, cg)
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		cmds = nil
	}
	t.Cleanup(stop) // before the cgroup's removal: cleanups run last first
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0); err != nil {
			t.Fatalf("a burner into %s: %v", cg, err)
		}
		if err := unix.SchedSetAttr(c.Process.Pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0); err != nil {
			t.Fatalf("SCHED_IDLE for a burner: %v", err)
		}
	}
	return stop
}

// bareBurners starts k sandboxes of the runtime rt alone (`rt run
// --detach`, the flags hearth gives it, no hearth), each running burn on
// the default image's root, and marks each one's cpu cgroup (the runtime
// makes one per sandbox, /<id>, when the spec names none) idle, as the
// driver demotes a CPU-bound sandbox. It returns what deletes them; t's
// cleanup deletes them too.
func bareBurners(t *testing.T, rt string, k int) (stop func()) {
	t.Helper()
	bin, dir, bundle := bareBundle(t, rt, "/bin/sh", "-c", burn)
	global := append([]string{"--root", filepath.Join(dir, "state")}, oci.BareFlags(rt)...)
	ids := make([]string, k)
	stop = func() {
		for _, id := range ids {
			if id != "" {
				exec.Command(bin, append(global, "delete", "--force", id)...).Run()
			}
		}
		ids = nil
	}
	t.Cleanup(stop)
	hier := cpuHierarchy(t)
	for i := range ids {
		id := fmt.Sprintf("burn%d-%d", i, os.Getpid())
		pidFile := filepath.Join(dir, id+".pid")
		if err := runDetached(bin, append(global, "run", "--detach", "--bundle", bundle, "--pid-file", pidFile, id), filepath.Join(dir, id+".log")); err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		markIdle(t, filepath.Join(hier, cgroupOf(t, pidFile)))
	}
	return stop
}

// cgroupOf returns the cpu cgroup (v1's cpu controller, else the unified
// hierarchy's) of the process whose pid is in pidFile.
func cgroupOf(t *testing.T, pidFile string) string {
	t.Helper()
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("/proc", string(bytes.TrimSpace(pid)), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	var v2 string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if slices.Contains(strings.Split(f[1], ","), "cpu") {
			return f[2]
		}
		if f[0] == "0" {
			v2 = f[2]
		}
	}
	if v2 == "" {
		t.Fatalf("no cpu cgroup in %s", b)
	}
	return v2
}

// cpuHierarchy returns the mount point of the host's cpu cgroup
// hierarchy: v1's cpu controller where it is mounted (a v1 or hybrid
// host), else the unified hierarchy.
func cpuHierarchy(t *testing.T) string {
	t.Helper()
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var v2 string
	for _, m := range mounts {
		if m.Root != "/" {
			continue
		}
		if m.FSType == "cgroup" && slices.Contains(strings.Split(m.SuperOptions, ","), "cpu") {
			return m.Point
		}
		if m.FSType == "cgroup2" && v2 == "" {
			v2 = m.Point
		}
	}
	if v2 == "" {
		t.Fatal("the baseline needs a cpu cgroup hierarchy; found none in /proc/self/mountinfo")
	}
	return v2
}

// markIdle marks cpu cgroup dir idle (cpu.idle), or gives it the lowest
// weight where the kernel has no cpu.idle, as the driver demotes a
// sandbox.
func markIdle(t *testing.T, dir string) {
	t.Helper()
	for _, knob := range [][2]string{{"cpu.idle", "1"}, {"cpu.shares", "2"}, {"cpu.weight", "1"}} {
		if err := os.WriteFile(filepath.Join(dir, knob[0]), []byte(knob[1]), 0); err == nil {
			return
		}
	}
	t.Fatalf("cgroup %s has neither cpu.idle nor a weight to lower", dir)
}
