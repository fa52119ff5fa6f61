package load_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearth/hearth/driver/drivertest"
)

// bareFlags are the global flags of the bare runs: the driver's own for
// runsc (driver/oci runtimeFlags and networkFlags, no network), none for
// runc and crun.
var bareFlags = map[string][]string{
	"runsc": {"--platform=systrap", "--overlay2=none", "--network=none"},
}

// bareRuns is the creates scenario's baseline, measured in the same run:
// n runs of `<runtime> run` of /bin/true, conc at a time, on the default
// image's root (read-only: /bin/true writes nothing), each timed until the
// container has exited and the runtime returned. It is what the host can
// do with the runtime alone, with nothing of hearth (no daemon, no agent,
// no layer snapshot, no exec).
func bareRuns(t *testing.T, rt string, n, conc int) (*recorder, time.Duration) {
	t.Helper()
	bin, err := exec.LookPath(rt)
	if err != nil {
		t.Fatalf("the baseline needs %s: %v", rt, err)
	}
	dir := t.TempDir()
	t.Cleanup(func() { drivertest.UnmountUnder(t, dir) }) // runsc's null-netns
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	writeBareSpec(t, bin, bundle, drivertest.BaseRootFS(t))
	root := filepath.Join(dir, "state")
	rec := newRecorder(fmt.Sprintf("bare `%s run` of /bin/true (%d at %d)", rt, n, conc))
	start := time.Now()
	parallel(n, conc, func(i int) {
		args := append([]string{"--root", root}, bareFlags[rt]...)
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

// writeBareSpec writes bundle's config.json: the runtime's own default
// spec (`spec`), running /bin/true without a terminal on rootfs, read-only.
func writeBareSpec(t *testing.T, bin, bundle, rootfs string) {
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
	proc["args"], proc["terminal"] = []string{"/bin/true"}, false
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	if b, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
