package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/hearth/hearth/driver"
	"github.com/hearth/hearth/internal/kernfile"
)

// Meter reads what a driver's running sandboxes use from the host's side
// (a driver.Meter): CPU time and memory from their cgroups, network bytes
// from the host's end of their veth, and processes from the pids cgroup
// (runc, crun) or gVisor's own count (runsc, asked only when wanted: it
// costs a runsc process). It holds no state of its own.
type Meter struct{ d *Driver }

var _ driver.Meter = Meter{}

// MeterOf is d's Meter.
func MeterOf(d *Driver) Meter { return Meter{d} }

// Usage implements driver.Meter.
func (m Meter) Usage(ctx context.Context, id string, processes bool) (driver.Usage, error) {
	if validID(id) != nil {
		return driver.Usage{}, driver.ErrNotFound
	}
	cg := m.d.cg
	cpu, err := cg.cpuNanos(id)
	if errors.Is(err, fs.ErrNotExist) {
		return driver.Usage{}, driver.ErrNotFound // no cgroup: not running
	}
	if err != nil {
		return driver.Usage{}, fmt.Errorf("oci: usage of %s: %w", id, err)
	}
	u := driver.Usage{CPUNanos: cpu, Processes: -1}
	u.MemoryBytes, u.MemoryPeakBytes, u.MemoryWorkingSetBytes = cg.memoryUsage(id)
	if h := m.d.net.host; h != nil {
		// The host's end receives what the sandbox sends. A sandbox with
		// no network has no link, and its counts stay 0: one failed open,
		// where asking whether it is attached took four lookups.
		link := filepath.Join("/sys/class/net", h.Link(id), "statistics")
		if rx, err := readUint(filepath.Join(link, "rx_bytes")); err == nil {
			u.NetTxBytes = rx
			u.NetRxBytes, _ = readUint(filepath.Join(link, "tx_bytes"))
		}
	}
	switch {
	case m.d.runtime != RuntimeRunsc:
		if n, err := cg.pids(id); err == nil {
			u.Processes = n
		}
	case processes:
		if n, err := m.runscPids(ctx, id); err == nil {
			u.Processes = n
		}
	}
	return u, nil
}

// runscPids is the number of tasks gVisor's kernel runs in sandbox id.
func (m Meter) runscPids(ctx context.Context, id string) (int64, error) {
	out, err := m.d.rt.run(ctx, id, "events", "--stats", id)
	if err != nil {
		return 0, err
	}
	var ev struct {
		Data struct {
			Pids struct {
				Current int64 `json:"current"`
			} `json:"pids"`
		} `json:"data"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &ev); err != nil {
		return 0, err
	}
	return ev.Data.Pids.Current, nil
}

// cpuNanos is sandbox id's CPU time: v1's cpuacct.usage, else v2's
// cpu.stat usage_usec. A sandbox without the cgroup is fs.ErrNotExist.
func (c *cgroups) cpuNanos(id string) (uint64, error) {
	if c.mounts.cpuacct != "" {
		return readUint(filepath.Join(c.mounts.cpuacct, c.rel(id), "cpuacct.usage"))
	}
	if c.mounts.v2 == "" {
		return 0, fs.ErrNotExist
	}
	b, err := kernfile.Read(filepath.Join(c.mounts.v2, c.rel(id), "cpu.stat"))
	if err != nil {
		return 0, err
	}
	us, ok := parseKeyed(b, "usage_usec")
	if !ok {
		return 0, fs.ErrNotExist
	}
	return uint64(us) * 1000, nil
}

// memoryUsage is the memory charged to sandbox id's cgroup now and at its
// peak (v1's usage and max usage; v2's current and peak), and its working
// set: now less the inactive file pages of its memory.stat (v1's
// total_inactive_file, v2's inactive_file), never below 0. 0 for what
// cannot be read.
func (c *cgroups) memoryUsage(id string) (now, peak, workingSet int64) {
	var dir, current, highest, inactive string
	if c.mounts.memory != "" {
		if d := filepath.Join(c.mounts.memory, c.rel(id)); exists(d) {
			dir, current, highest, inactive = d, "memory.usage_in_bytes", "memory.max_usage_in_bytes", "total_inactive_file"
		}
	}
	if dir == "" && c.mounts.v2 != "" {
		dir, current, highest, inactive = filepath.Join(c.mounts.v2, c.rel(id)), "memory.current", "memory.peak", "inactive_file"
	}
	if dir == "" {
		return 0, 0, 0
	}
	n, _ := readUint(filepath.Join(dir, current))
	p, _ := readUint(filepath.Join(dir, highest))
	now, peak, workingSet = int64(n), int64(p), int64(n)
	if b, err := kernfile.Read(filepath.Join(dir, "memory.stat")); err == nil {
		if v, ok := parseKeyed(b, inactive); ok {
			workingSet = max(now-v, 0)
		}
	}
	return now, peak, workingSet
}

// pids is the number of tasks in sandbox id's pids cgroup (v1, else v2).
func (c *cgroups) pids(id string) (int64, error) {
	for _, mnt := range []string{c.mounts.pids, c.mounts.v2} {
		if mnt == "" {
			continue
		}
		n, err := readUint(filepath.Join(mnt, c.rel(id), "pids.current"))
		if err == nil {
			return int64(n), nil
		}
	}
	return 0, fs.ErrNotExist
}

// readUint reads a file that holds one unsigned decimal number.
func readUint(path string) (uint64, error) {
	b, err := kernfile.Read(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
}
