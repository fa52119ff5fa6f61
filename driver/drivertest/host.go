package drivertest

import (
	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/testutil/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// DefaultRootFS is where hearth caches the default image's root filesystem
// on a development host: Debian bookworm with python3 and a user sandbox
// (uid 1000, home /home/sandbox). It is read-only to tests.
const DefaultRootFS = "/var/cache/hearth/images/default/rootfs"

// RequireRoot skips the test unless it runs as root, which real runtimes,
// cgroups and overlay mounts need.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root (OCI runtimes, cgroups and overlay mounts); run `sudo go test`")
	}
}

// BaseRootFS returns the read-only image root that sandbox roots are built
// on: $HEARTH_TEST_ROOTFS, or DefaultRootFS. It skips the test when there is
// none.
func BaseRootFS(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("HEARTH_TEST_ROOTFS")
	if dir == "" {
		dir = DefaultRootFS
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin", "sh")); err != nil || fi.IsDir() {
		testenv.Skip(t, "no test root filesystem at %s (set HEARTH_TEST_ROOTFS to a Debian root with /bin/sh, python3 and user sandbox)", dir)
	}
	return dir
}

// OverlayRootFS returns a writable root filesystem for one sandbox: an
// overlayfs mount with lower as its read-only lower layer and its upper and
// work directories in t.TempDir(), unmounted in t's cleanup. Writes never
// reach lower. It needs root.
func OverlayRootFS(t testing.TB, lower string) string {
	t.Helper()
	dir := t.TempDir()
	upper, work, merged := filepath.Join(dir, "u"), filepath.Join(dir, "w"), filepath.Join(dir, "m")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mount overlay on %s: %v", merged, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", merged, err)
		}
	})
	return merged
}

// BuildAgent returns a static hearth-agent for sandboxes: $HEARTH_TEST_AGENT
// when set, else one built from this module into t.TempDir().
func BuildAgent(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HEARTH_TEST_AGENT"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "hearth-agent")
	cmd := exec.Command(goBinary(), "build", "-o", out, "github.com/hearth/hearth/cmd/hearth-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build hearth-agent: %v\n%s", err, b)
	}
	return out
}

// goBinary is the go command of this toolchain.
func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// UnmountUnder unmounts every mount whose mount point is dir or below it,
// deepest first and stacked ones too, so that dir can be removed. Tests
// call it in the cleanup of a state directory that a runtime mounted into:
// runsc bind-mounts the empty network namespace its gofers share at
// <root>/null-netns and leaves it there for the next sandbox.
func UnmountUnder(t testing.TB, dir string) {
	t.Helper()
	dir = filepath.Clean(dir)
	for range 100 {
		points := mountsUnder(t, dir)
		if len(points) == 0 {
			return
		}
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
				t.Errorf("unmount %s: %v", p, err)
				return
			}
		}
	}
	t.Errorf("mounts under %s keep coming back", dir)
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(t testing.TB, dir string) []string {
	points, err := mountinfo.Under(dir)
	if err != nil {
		t.Errorf("mounts under %s: %v", dir, err)
	}
	return points
}

// CgroupDirs returns cgroup parent's directory in every cgroup hierarchy
// (v1 and unified) where it exists, each once. It takes no testing.TB, so
// that a TestMain can call it.
func CgroupDirs(parent string) ([]string, error) {
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var dirs []string
	seen := map[string]bool{}
	for _, m := range mounts {
		if (m.FSType != "cgroup" && m.FSType != "cgroup2") || m.Root != "/" {
			continue
		}
		dir := filepath.Join(m.Point, parent)
		if _, err := os.Stat(dir); err == nil && !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}
