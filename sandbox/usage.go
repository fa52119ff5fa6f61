package sandbox

import "time"

// Usage is what a running sandbox uses, sampled on its node: the latest
// sample with the sandbox's limits beside it, and, when asked, the
// samples kept since a time (Series, oldest first; an hour at most).
type Usage struct {
	Sandbox string `json:"sandbox"`
	// Status is the sandbox's; a sandbox that does not run has no CPU,
	// memory, network or process figures.
	Status Status `json:"status"`
	UsageSample
	// LimitMilliCPU, LimitMemoryBytes and LimitDiskBytes are the
	// sandbox's size (Resources); 0 for no disk cap.
	LimitMilliCPU    int64 `json:"limit_millicpu"`
	LimitMemoryBytes int64 `json:"limit_memory_bytes"`
	LimitDiskBytes   int64 `json:"limit_disk_bytes"`
	// DiskBytes is what its root holds beyond its image (what the disk
	// cap counts), measured at the call.
	DiskBytes int64 `json:"disk_bytes"`
	// IntervalSeconds is how often the node samples a running sandbox.
	IntervalSeconds float64       `json:"interval_seconds"`
	Series          []UsageSample `json:"series,omitempty"`
}

// UsageSample is one sample of a running sandbox's use.
type UsageSample struct {
	At time.Time `json:"at"`
	// CPUSeconds is the CPU time its processes (and, under gVisor, its
	// kernel) used since it started; CPUCores the CPU it used per second
	// since the sample before (1.0: one core busy).
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUCores   float64 `json:"cpu_cores"`
	// MemoryBytes is the memory charged to it now; MemoryPeakBytes the
	// most since it started.
	MemoryBytes     int64 `json:"memory_bytes"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	// MemoryWorkingSetBytes is MemoryBytes less the file cache the host
	// may reclaim first (its inactive file pages): what Kubernetes counts
	// as a container's working set.
	MemoryWorkingSetBytes int64 `json:"memory_working_set_bytes"`
	// NetRxBytes and NetTxBytes are the bytes it received and sent on its
	// network since it started (0 without network).
	NetRxBytes uint64 `json:"net_rx_bytes"`
	NetTxBytes uint64 `json:"net_tx_bytes"`
	// Processes is how many processes (tasks) run in it; -1 when the
	// runtime cannot tell.
	Processes int64 `json:"processes"`
}
