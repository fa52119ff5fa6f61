package mountinfo_test

import (
	"strings"
	"testing"

	"github.com/hearth/hearth/internal/mountinfo"
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
