// Package hostusage reads the host's CPU time and memory from /proc/stat
// and /proc/meminfo (proc(5)): what a node offers and reports (its Node's
// capacity, its kubelet stats, how much memory its sandboxes may share),
// what the driver's quiet neighbours judge by, and what the load tests
// watch; and it parses the lists of CPUs cpuset cgroups hold.
package hostusage

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hearth/hearth/internal/kernfile"
)

// Proc is the host's proc filesystem; tests pass a directory of their own.
const Proc = "/proc"

// tick is one USER_HZ tick of /proc/stat: 100 a second in Linux's ABI,
// whatever the kernel's own HZ.
const tick = time.Second / 100

// CPU is the CPU time the host has spent since boot, summed over its CPUs.
type CPU struct {
	// Total is every state's time: user, nice, system, idle, iowait, irq,
	// softirq and steal (guest time is already in user and nice).
	Total time.Duration
	// Busy is Total less idle and iowait.
	Busy time.Duration
}

// ReadCPU reads the host's CPU time from the first ("cpu") line of
// proc/stat.
func ReadCPU(proc string) (CPU, error) {
	all, _, err := readStat(proc, false)
	return all, err
}

// ReadCPUs reads the host's CPU time from proc/stat: all of it (the first,
// "cpu" line) and each CPU's (the "cpuN" lines after it), by CPU number.
func ReadCPUs(proc string) (all CPU, each map[int]CPU, err error) {
	return readStat(proc, true)
}

// readStat reads proc/stat's first line, and each CPU's line after it if
// each is set.
func readStat(proc string, perCPU bool) (all CPU, each map[int]CPU, err error) {
	b, err := kernfile.Read(filepath.Join(proc, "stat"))
	if err != nil {
		return all, nil, fmt.Errorf("hostusage: %w", err)
	}
	line, rest, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) == 0 || f[0] != "cpu" {
		return all, nil, fmt.Errorf("hostusage: %s/stat begins %q, not the cpu line", proc, line)
	}
	if all, err = parseCPU(f); err != nil || !perCPU {
		return all, nil, wrapStat(proc, err)
	}
	each = map[int]CPU{}
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		f := strings.Fields(string(line))
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			break // the per-CPU lines follow the first, before the rest
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || n < 0 {
			return all, nil, fmt.Errorf("hostusage: %s/stat: a line begins %q", proc, f[0])
		}
		if each[n], err = parseCPU(f); err != nil {
			return all, nil, wrapStat(proc, err)
		}
	}
	return all, each, nil
}

// wrapStat names proc/stat in err, if any.
func wrapStat(proc string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("hostusage: %s/stat: %w", proc, err)
}

// parseCPU parses the fields of a cpu line of proc/stat: its name, then
// at least eight counts of clock ticks.
func parseCPU(f []string) (CPU, error) {
	var c CPU
	if len(f) < 9 {
		return c, fmt.Errorf("the %s line has %d fields, want 9 or more", f[0], len(f))
	}
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return c, fmt.Errorf("field %d of the %s line is %q", i+1, f[0], v)
		}
		c.Total += time.Duration(n) * tick
		if i != 3 && i != 4 { // idle, iowait
			c.Busy += time.Duration(n) * tick
		}
	}
	return c, nil
}

// Memory is the host's memory, in bytes.
type Memory struct {
	Total     int64 // MemTotal
	Free      int64 // MemFree: not used at all
	Available int64 // MemAvailable: what can be had without swapping
}

// ReadMemory reads the host's memory from proc/meminfo (see ParseMemory).
func ReadMemory(proc string) (Memory, error) {
	b, err := kernfile.Read(filepath.Join(proc, "meminfo"))
	if err != nil {
		return Memory{}, fmt.Errorf("hostusage: %w", err)
	}
	m, err := ParseMemory(b)
	if err != nil {
		return m, fmt.Errorf("hostusage: %s/meminfo: %w", proc, err)
	}
	return m, nil
}

// ParseMemory parses a meminfo file. Its contract: MemTotal and MemFree
// are there, Total is above zero, and Free and Available are at most
// Total (Available 0 if the kernel does not report it).
func ParseMemory(b []byte) (Memory, error) {
	var m Memory
	fields := map[string]*int64{"MemTotal": &m.Total, "MemFree": &m.Free, "MemAvailable": &m.Available}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, _ := strings.Cut(sc.Text(), ":")
		p := fields[key]
		if p == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil || kb < 0 || kb > 1<<53 {
			return m, fmt.Errorf("%s is %q", key, strings.TrimSpace(rest))
		}
		*p = kb << 10
		if key != "MemAvailable" {
			seen++
		}
	}
	if seen < 2 || m.Total == 0 || m.Free > m.Total || m.Available > m.Total {
		return m, fmt.Errorf("no usable MemTotal, MemFree and MemAvailable (%d, %d, %d bytes)", m.Total, m.Free, m.Available)
	}
	return m, nil
}

// CPUList is a set of CPU numbers, ascending: a cpuset cgroup's.
type CPUList []int

// ParseCPUList parses a cgroup's list of CPUs (cpuset(7)'s "list
// format": "0-3,8,10-11"; empty for none).
func ParseCPUList(s string) (CPUList, error) {
	var l CPUList
	if s == "" {
		return l, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		last := first
		if err == nil && isRange {
			last, err = strconv.Atoi(hi)
		}
		if err != nil || first < 0 || last < first || last-first > 1<<16 {
			return nil, fmt.Errorf("hostusage: CPU list %q: %q is no CPU or range of CPUs", s, part)
		}
		for n := first; n <= last; n++ {
			l = append(l, n)
		}
	}
	slices.Sort(l)
	return slices.Compact(l), nil
}

// String is l in the list format, ranges joined ("0-3,8").
func (l CPUList) String() string {
	var b strings.Builder
	for i := 0; i < len(l); {
		j := i
		for j+1 < len(l) && l[j+1] == l[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(l[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(l[j]))
		}
		i = j + 1
	}
	return b.String()
}
