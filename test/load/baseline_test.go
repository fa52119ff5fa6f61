package load_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
	"github.com/hearth/hearth/driver/oci"
)

// bareRuns is the creates scenario's baseline, measured in the same run:
// n runs of `<runtime> run` of /bin/true, conc at a time, on the default
// image's root (read-only: /bin/true writes nothing), each timed until the
// container has exited and the runtime returned. It is what the host can
// do with the runtime alone, with nothing of hearth (no daemon, no agent,
// no layer snapshot, no exec).
func bareRuns(t *testing.T, rt string, n, conc int) (*recorder, time.Duration) {
	t.Helper()
	bin, dir, bundle := bareBundle(t, rt, "/bin/true")
	root := filepath.Join(dir, "state")
	rec := newRecorder(fmt.Sprintf("bare `%s run` of /bin/true (%d at %d)", rt, n, conc))
	start := time.Now()
	parallel(n, conc, func(i int) {
		args := append([]string{"--root", root}, oci.BareFlags(rt)...)
		args = append(args, "run", "--bundle", bundle, fmt.Sprintf("bare%d", i))
		rec.time(func() error {
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s run: %w: %s", rt, err, out)
			}
			return nil
		})
	})
	elapsed := time.Since(start)
	rec.report(t, elapsed)
	rec.wantNoErrors(t)
	return rec, elapsed
}

// bareStays is the creates scenario's second baseline, the closer one:
// n sandboxes started with `<runtime> run --detach` of a process that
// stays (sleep), conc at a time, each timed until run returns with the
// container running, and all kept running until the last has started, as
// hearth's are. Each has a --root of its own, as hearth's do (runsc's
// --shared-root is one for all). It differs from hearth's create by the
// daemon, the agent, the layer snapshot and the first exec: a sandbox
// that stays holds its memory, so the next one's is fresh memory rather
// than the pages the one before freed, and this baseline tells whether
// that, and not hearth, is what slows creates. With settle above zero,
// the host memory each takes is measured too: MemAvailable before the
// first start and settle after the last, over n (0 without settle).
func bareStays(t *testing.T, rt string, n, conc int, settle time.Duration) (*recorder, time.Duration, int64) {
	t.Helper()
	bin, dir, bundle := bareBundle(t, rt, "/bin/sleep", "1000000")
	global := func(i int) []string {
		args := []string{"--root", filepath.Join(dir, "roots", strconv.Itoa(i))}
		if rt == "runsc" {
			args = append(args, "--shared-root", filepath.Join(dir, "shared"))
		}
		return append(args, oci.BareFlags(rt)...)
	}
	remove := func(i int) {
		exec.Command(bin, append(global(i), "delete", "--force", fmt.Sprintf("stay%d", i))...).Run()
	}
	// Removed once the last has started, or in t's cleanup if the test
	// ends before.
	removeAll := sync.OnceFunc(func() { parallel(n, conc, remove) })
	t.Cleanup(removeAll)
	rec := newRecorder(fmt.Sprintf("bare `%s run --detach` of a sandbox that stays (%d at %d)", rt, n, conc))
	before := memAvailable(t)
	start := time.Now()
	parallel(n, conc, func(i int) {
		log := filepath.Join(dir, fmt.Sprintf("stay%d.log", i))
		rec.time(func() error {
			return runDetached(bin, append(global(i), "run", "--detach", "--bundle", bundle, fmt.Sprintf("stay%d", i)), log)
		})
	})
	elapsed := time.Since(start)
	rec.report(t, elapsed)
	rec.wantNoErrors(t)
	var each int64
	if settle > 0 {
		time.Sleep(settle)
		each = (before - memAvailable(t)) / int64(n)
	}
	removeAll()
	return rec, elapsed, each
}

// runDetached runs the runtime bin with args, a `run --detach`, with its
// output and the sandbox's stdio in the file log: the sandbox inherits
// its stdio, and a pipe there would keep the test waiting until the
// sandbox ends. Its error carries what log says.
func runDetached(bin string, args []string, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log)
		return fmt.Errorf("%s: %w: %s", filepath.Base(bin), err, out)
	}
	return nil
}

// bareBundle returns the runtime rt's binary, a directory of the test's,
// and a bundle in it that runs argv on the default image's root.
func bareBundle(t *testing.T, rt string, argv ...string) (bin, dir, bundle string) {
	t.Helper()
	bin, err := exec.LookPath(rt)
	if err != nil {
		t.Fatalf("the baseline needs %s: %v", rt, err)
	}
	dir = t.TempDir()
	t.Cleanup(func() { drivertest.UnmountUnder(t, dir) }) // runsc's null-netns
	bundle = filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	writeBareSpec(t, bin, bundle, drivertest.BaseRootFS(t), argv...)
	return bin, dir, bundle
}

// writeBareSpec writes bundle's config.json: the runtime's own default
// spec (`spec`), running argv without a terminal on rootfs, read-only.
func writeBareSpec(t *testing.T, bin, bundle, rootfs string, argv ...string) {
	t.Helper()
	if out, err := exec.Command(bin, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("%s spec: %v: %s", bin, err, out)
	}
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	proc, _ := spec["process"].(map[string]any)
	if proc == nil {
		t.Fatalf("%s spec: no process in %s", bin, b)
	}
	proc["args"], proc["terminal"] = argv, false
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	if b, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
