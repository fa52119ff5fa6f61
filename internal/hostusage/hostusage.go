// Package hostusage reads the host's CPU time and memory from /proc/stat
// and /proc/meminfo (proc(5)): what a node offers and reports (its Node's
// capacity, its kubelet stats, how much memory its sandboxes may share)
// and what the load tests watch.
package hostusage

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	var c CPU
	b, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return c, fmt.Errorf("hostusage: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return c, fmt.Errorf("hostusage: %s/stat begins %q, not the cpu line", proc, line)
	}
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return c, fmt.Errorf("hostusage: %s/stat: field %d of the cpu line is %q", proc, i+1, v)
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
	b, err := os.ReadFile(filepath.Join(proc, "meminfo"))
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
