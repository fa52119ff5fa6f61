package oci

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMemoryUsage reads a sandbox's memory from cgroup files laid out as
// a v1 memory controller and as the unified hierarchy: now, the peak, and
// the working set (now less the inactive file pages), which never goes
// below zero and is all of now when memory.stat cannot be read.
func TestMemoryUsage(t *testing.T) {
	write := func(dir string, files map[string]string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name                  string
		v1                    bool
		files                 map[string]string
		now, peak, workingSet int64
	}{
		{"v1", true, map[string]string{
			"memory.usage_in_bytes":     "61095936\n",
			"memory.max_usage_in_bytes": "64401408\n",
			"memory.stat":               "cache 44879872\ninactive_file 1000\ntotal_cache 44879872\ntotal_inactive_file 24236032\ntotal_active_file 19079168\n",
		}, 61095936, 64401408, 61095936 - 24236032},
		{"v2", false, map[string]string{
			"memory.current": "1048576\n",
			"memory.peak":    "2097152\n",
			"memory.stat":    "anon 524288\nfile 524288\ninactive_file 262144\n",
		}, 1048576, 2097152, 1048576 - 262144},
		{"inactive above usage", true, map[string]string{
			"memory.usage_in_bytes":     "4096\n",
			"memory.max_usage_in_bytes": "8192\n",
			"memory.stat":               "total_inactive_file 12288\n",
		}, 4096, 8192, 0},
		{"no memory.stat", false, map[string]string{
			"memory.current": "4096\n",
			"memory.peak":    "8192\n",
		}, 4096, 8192, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			c := &cgroups{parent: "hearth-test"}
			if tc.v1 {
				c.mounts.memory = root
			} else {
				c.mounts.v2 = root
			}
			write(filepath.Join(root, c.rel("sb1")), tc.files)
			now, peak, ws := c.memoryUsage("sb1")
			if now != tc.now || peak != tc.peak || ws != tc.workingSet {
				t.Errorf("memoryUsage = %d, %d, working set %d; want %d, %d, %d", now, peak, ws, tc.now, tc.peak, tc.workingSet)
			}
			if now, peak, ws := c.memoryUsage("gone"); now != 0 || peak != 0 || ws != 0 {
				t.Errorf("memoryUsage of a sandbox without a cgroup = %d, %d, %d; want zeros", now, peak, ws)
			}
		})
	}
}
