// Package mountinfo parses /proc/<pid>/mountinfo (proc(5)), which both the
// runtime driver (to find cgroup hierarchies) and the tests (to find what a
// runtime left mounted) read.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo:
//
//	36 35 98:0 /root /mountpoint opts optional... - fstype source superopts
type Mount struct {
	// Root is the path within the file system that is mounted.
	Root string
	// Point is the mount point, unescaped.
	Point string
	// FSType, Source and SuperOptions follow the " - " separator.
	FSType, Source, SuperOptions string
}

// Read parses the mountinfo file at path (e.g. /proc/self/mountinfo).
func Read(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses mountinfo text. Lines that are not mountinfo are skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, after := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(after) < 3 {
			continue
		}
		out = append(out, Mount{
			Root:         unescape(fields[3]),
			Point:        unescape(fields[4]),
			FSType:       after[0],
			Source:       unescape(after[1]),
			SuperOptions: after[2],
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Under lists the mount points at or below dir in /proc/self/mountinfo,
// deepest first (a point mounted twice is listed twice, in mount order), the
// order in which they can be unmounted.
func Under(dir string) ([]string, error) {
	mounts, err := Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var points []string
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			points = append(points, m.Point)
		}
	}
	slices.SortStableFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points, nil
}
