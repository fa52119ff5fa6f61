package mountinfo_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/testutil/testenv"
)

func TestParse(t *testing.T) {
	in := `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 30 0:27 / /cg/cpu\054cpuacct rw - cgroup cgroup rw,cpu,cpuacct
40 22 0:50 /sub /mnt/with\040space rw shared:9 - btrfs /dev/loop\0402 rw
garbage line
`
	got, err := mountinfo.Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountinfo.Mount{
		{Root: "/", Point: "/", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
		{Root: "/", Point: "/cg/cpu,cpuacct", FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,cpu,cpuacct"},
		{Root: "/sub", Point: "/mnt/with space", FSType: "btrfs", Source: "/dev/loop 2", SuperOptions: "rw"},
	}
	if len(got) != len(want) {
		t.Fatalf("Parse = %d mounts %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Parse[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadSelf(t *testing.T) {
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil || len(ms) == 0 {
		t.Fatalf("Read(/proc/self/mountinfo) = %d mounts, %v", len(ms), err)
	}
	for _, m := range ms {
		if m.Point == "/" {
			return
		}
	}
	t.Fatalf("Read(/proc/self/mountinfo) has no / mount: %+v", ms)
}

func TestUnder(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount")
	}
	dir := t.TempDir()
	deep := filepath.Join(dir, "a", "b")
	for _, p := range []string{filepath.Join(dir, "a"), deep} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(p, unix.MNT_DETACH)
	}
	got, err := mountinfo.Under(dir + "/")
	if err != nil || len(got) != 2 || got[0] != deep || got[1] != filepath.Join(dir, "a") {
		t.Fatalf("Under(%s) = %v, %v; want [%s %s/a], deepest first", dir, got, err, deep, dir)
	}
	if got, err := mountinfo.Under(filepath.Join(dir, "a", "bb")); err != nil || len(got) != 0 {
		t.Fatalf("Under(a/bb) = %v, %v; want none (a/b is not below a/bb)", got, err)
	}
}
