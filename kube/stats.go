package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/lifecycle"
)

// A node's resource usage as the kubelet serves it, at /stats/summary
// and /metrics/resource (which metrics-server scrapes for `kubectl top`):
// the node's own from its host (/proc/stat and /proc/meminfo), and each
// running sandbox Pod's from the usage the node samples of its sandboxes
// (lifecycle.Usage, every `--usage-interval`): CPU time and rate, memory
// and its working set, network bytes. A Pod whose sandbox does not run
// (asleep, starting) has no sample and is left out, as the kubelet
// leaves out a Pod without containers.

// usageStats are what a Provider keeps for its stats: where the latest
// samples come from, and the host's CPU reading before, for its rate.
type usageStats struct {
	latest func() []lifecycle.LatestUsage
	proc   string // the host's /proc
	start  metav1.Time

	mu      sync.Mutex
	cpuAt   time.Time // when cpuUsed was read
	cpuUsed uint64    // the host's CPU time then, in nanoseconds
	cpuRate uint64    // nanocores between the two readings before
}

// UsageFrom has p serve its Pods' usage (GetStatsSummary and
// GetMetricsResource) from latest: the latest usage sample of each
// running sandbox of the node (lifecycle.Usage.Latest). Until it is
// set, they report the node alone.
func (p *Provider) UsageFrom(latest func() []lifecycle.LatestUsage) {
	p.stats.mu.Lock()
	p.stats.latest = latest
	p.stats.mu.Unlock()
}

// GetStatsSummary is the node's and its running sandbox Pods' usage, as
// the kubelet's /stats/summary reports it.
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	now := time.Now()
	cpu, err := hostusage.ReadCPU(p.stats.proc)
	if err != nil {
		return nil, fmt.Errorf("kube: node stats: %w", err)
	}
	mem, err := hostusage.ReadMemory(p.stats.proc)
	if err != nil {
		return nil, fmt.Errorf("kube: node stats: %w", err)
	}
	sum := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{
		NodeName:  p.node,
		StartTime: p.stats.start,
		CPU:       p.stats.hostCPU(now, uint64(cpu.Busy)),
		Memory: &statsv1alpha1.MemoryStats{
			Time:            metav1.NewTime(now),
			AvailableBytes:  new(uint64(mem.Available)),
			UsageBytes:      new(uint64(mem.Total - mem.Free)),
			WorkingSetBytes: new(uint64(mem.Total - mem.Available)),
		},
	}}
	for _, pu := range p.podUsages() {
		sum.Pods = append(sum.Pods, pu.stats())
	}
	return sum, nil
}

// hostCPU is the host's CPU reading used (nanoseconds of CPU time) at
// now, with its rate since the reading before (a reading less than a
// second after that one keeps the rate it had).
func (s *usageStats) hostCPU(now time.Time, used uint64) *statsv1alpha1.CPUStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if elapsed := now.Sub(s.cpuAt); elapsed >= time.Second && used >= s.cpuUsed {
		if !s.cpuAt.IsZero() {
			s.cpuRate = uint64(float64(used-s.cpuUsed) / elapsed.Seconds())
		}
		s.cpuAt, s.cpuUsed = now, used
	}
	return &statsv1alpha1.CPUStats{Time: metav1.NewTime(now), UsageNanoCores: new(s.cpuRate), UsageCoreNanoSeconds: new(used)}
}

// podUsage is one sandbox Pod of the node with its sandbox's latest
// usage sample.
type podUsage struct {
	namespace, name, uid string
	start                metav1.Time
	lifecycle.LatestUsage
}

// podUsages pairs each Pod p reports with the latest sample of the
// sandbox it stands for (by the sandbox's id, so that a namesake that
// replaced it is not taken for it), sorted by namespace and name.
func (p *Provider) podUsages() []podUsage {
	p.stats.mu.Lock()
	latest := p.stats.latest
	p.stats.mu.Unlock()
	if latest == nil {
		return nil
	}
	byID := map[string]lifecycle.LatestUsage{}
	for _, u := range latest() {
		byID[u.ID] = u
	}
	p.mu.Lock()
	var out []podUsage
	for _, pod := range p.pods {
		ref, err := refOf(pod)
		u, ok := byID[ref.id]
		if err != nil || !ok || u.Tenant != ref.tenant || u.Name != ref.name {
			continue
		}
		start := pod.CreationTimestamp
		if pod.Status.StartTime != nil {
			start = *pod.Status.StartTime
		}
		out = append(out, podUsage{namespace: pod.Namespace, name: pod.Name, uid: string(pod.UID), start: start, LatestUsage: u})
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b podUsage) int {
		return strings.Compare(a.namespace+"/"+a.name, b.namespace+"/"+b.name)
	})
	return out
}

// stats is pu as the summary's PodStats: the Pod's and its one
// container's CPU and memory (the sandbox's), and its network.
func (pu podUsage) stats() statsv1alpha1.PodStats {
	at := metav1.NewTime(pu.At)
	cpu := &statsv1alpha1.CPUStats{Time: at, UsageNanoCores: new(uint64(pu.CPUCores * 1e9)), UsageCoreNanoSeconds: new(uint64(pu.CPUSeconds * 1e9))}
	mem := &statsv1alpha1.MemoryStats{Time: at, UsageBytes: new(uint64(pu.MemoryBytes)), WorkingSetBytes: new(uint64(pu.MemoryWorkingSetBytes))}
	ps := statsv1alpha1.PodStats{
		PodRef:     statsv1alpha1.PodReference{Name: pu.name, Namespace: pu.namespace, UID: pu.uid},
		StartTime:  pu.start,
		Containers: []statsv1alpha1.ContainerStats{{Name: ContainerName, StartTime: pu.start, CPU: cpu, Memory: mem}},
		CPU:        cpu,
		Memory:     mem,
	}
	if pu.NetRxBytes+pu.NetTxBytes > 0 {
		ps.Network = &statsv1alpha1.NetworkStats{Time: at, InterfaceStats: statsv1alpha1.InterfaceStats{
			Name: "eth0", RxBytes: new(pu.NetRxBytes), TxBytes: new(pu.NetTxBytes),
		}}
	}
	return ps
}

// GetMetricsResource is the summary's CPU and memory as the kubelet's
// /metrics/resource serves them (the metric names and labels
// metrics-server reads), each sample stamped with its reading's time.
func (p *Provider) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	sum, err := p.GetStatsSummary(ctx)
	if err != nil {
		return nil, err
	}
	counter, gauge := dto.MetricType_COUNTER, dto.MetricType_GAUGE
	fam := func(name, help string, typ dto.MetricType) *dto.MetricFamily {
		return &dto.MetricFamily{Name: new(name), Help: new(help), Type: &typ}
	}
	nodeCPU := fam("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", counter)
	nodeMem := fam("node_memory_working_set_bytes", "Current working set of the node in bytes", gauge)
	ctrCPU := fam("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", counter)
	ctrMem := fam("container_memory_working_set_bytes", "Current working set of the container in bytes", gauge)
	ctrStart := fam("container_start_time_seconds", "Start time of the container since unix epoch in seconds", gauge)
	podCPU := fam("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", counter)
	podMem := fam("pod_memory_working_set_bytes", "Current working set of the pod in bytes", gauge)
	scrapeErr := fam("scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", gauge)

	n := sum.Node
	add(nodeCPU, float64(*n.CPU.UsageCoreNanoSeconds)/1e9, n.CPU.Time)
	add(nodeMem, float64(*n.Memory.WorkingSetBytes), n.Memory.Time)
	for _, ps := range sum.Pods {
		pod := []string{"namespace", ps.PodRef.Namespace, "pod", ps.PodRef.Name}
		ctr := append([]string{"container", ContainerName}, pod...)
		cpuSec := float64(*ps.CPU.UsageCoreNanoSeconds) / 1e9
		ws := float64(*ps.Memory.WorkingSetBytes)
		add(ctrCPU, cpuSec, ps.CPU.Time, ctr...)
		add(ctrMem, ws, ps.Memory.Time, ctr...)
		add(ctrStart, float64(ps.StartTime.Unix()), ps.StartTime, ctr...)
		add(podCPU, cpuSec, ps.CPU.Time, pod...)
		add(podMem, ws, ps.Memory.Time, pod...)
	}
	add(scrapeErr, 0, metav1.Time{})
	return []*dto.MetricFamily{nodeCPU, nodeMem, ctrCPU, ctrMem, ctrStart, podCPU, podMem, scrapeErr}, nil
}

// add appends to f a sample of value at t (no time when t is zero),
// labelled by the name/value pairs of labels.
func add(f *dto.MetricFamily, value float64, t metav1.Time, labels ...string) {
	m := &dto.Metric{}
	for i := 0; i+1 < len(labels); i += 2 {
		m.Label = append(m.Label, &dto.LabelPair{Name: new(labels[i]), Value: new(labels[i+1])})
	}
	if f.GetType() == dto.MetricType_COUNTER {
		m.Counter = &dto.Counter{Value: &value}
	} else {
		m.Gauge = &dto.Gauge{Value: &value}
	}
	if !t.IsZero() {
		m.TimestampMs = new(t.UnixMilli())
	}
	f.Metric = append(f.Metric, m)
}
