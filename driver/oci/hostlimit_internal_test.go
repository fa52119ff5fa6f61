package oci

import (
	"errors"
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
	f := hostFiles{filepath.Join(dir, "pid_max"), filepath.Join(dir, "threads-max"), filepath.Join(dir, "loadavg")}
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
