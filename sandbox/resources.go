package sandbox

import (
	"sort"
	"strings"
)

// Resources are the limits a sandbox runs under, enforced by the runtime's
// cgroups (v1 or v2) and, under gVisor, by per-command rlimits in the agent.
type Resources struct {
	// MilliCPU is the CPU quota in thousandths of a core.
	MilliCPU int64 `json:"millicpu"`
	// MemoryBytes is the memory limit of the whole sandbox.
	MemoryBytes int64 `json:"memory_bytes"`
	// Pids caps the number of processes (tasks) in the sandbox.
	Pids int64 `json:"pids"`
	// DiskBytes caps what the sandbox writes to its root beyond its image
	// (0: no cap); a write past it fails in the sandbox with EDQUOT.
	DiskBytes int64 `json:"disk_bytes"`
	// NetBitsPerSec caps an egress sandbox's traffic, each way, in bits
	// per second; NetConns the TCP connections it may have open at once
	// (0: no cap). A sandbox without network has no traffic to cap.
	NetBitsPerSec int64 `json:"net_bits_per_sec,omitempty"`
	NetConns      int64 `json:"net_conns,omitempty"`
}

// DefaultSize is the preset used when create names none.
const DefaultSize = "small"

// Sizes returns the size presets by name.
func Sizes() map[string]Resources {
	const mib, gib = 1 << 20, 1 << 30
	return map[string]Resources{
		"small":  {MilliCPU: 1000, MemoryBytes: 512 * mib, Pids: 256, DiskBytes: 2 * gib, NetBitsPerSec: 100e6, NetConns: 256},
		"medium": {MilliCPU: 2000, MemoryBytes: 2048 * mib, Pids: 1024, DiskBytes: 10 * gib, NetBitsPerSec: 250e6, NetConns: 1024},
		"large":  {MilliCPU: 4000, MemoryBytes: 8192 * mib, Pids: 4096, DiskBytes: 40 * gib, NetBitsPerSec: 1000e6, NetConns: 4096},
	}
}

// LookupSize returns the preset called name, or invalid_argument listing the
// presets there are.
func LookupSize(name string) (Resources, error) {
	sizes := Sizes()
	if r, ok := sizes[name]; ok {
		return r, nil
	}
	names := make([]string, 0, len(sizes))
	for n := range sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	return Resources{}, Errorf(CodeInvalidArgument, "unknown size %q", name).
		WithHint("use one of: %s", strings.Join(names, ", "))
}

// PoolSize is the state of the warm pool for one size preset: sandboxes of
// Image started ahead of time, so that a create of that size is a claim.
type PoolSize struct {
	Size  string `json:"size"`
	Image string `json:"image"`
	// Target is how many members the pool keeps of this size.
	Target int `json:"target"`
	// Ready members can be claimed now; Starting ones are being created.
	// Ready below Target means a refill is under way, or memory is short
	// (the pool then stops refilling and gives members back).
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
}
