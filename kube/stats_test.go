package kube

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// statsProvider is a provider of node n1 reporting a running Pod for
// the sandboxes web (id1) and api (id2) of tenant acme, over a host
// whose /proc is a test directory holding stat and meminfo.
func statsProvider(t *testing.T) *Provider {
	t.Helper()
	p := NewProvider(nil, fake.NewClientset(), "n1", nil)
	proc := t.TempDir()
	p.stats.proc = proc
	writeProc(t, proc, 1000)
	started := metav1.NewTime(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	for i, name := range []string{"web", "api"} {
		sb := small()
		sb.Name, sb.ID = name, []string{"id1", "id2"}[i]
		pod := PodFor(sb, "")
		pod.UID = types.UID("uid-" + name)
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &started}
		p.pods[key(pod.Namespace, pod.Name)] = pod
	}
	return p
}

// writeProc writes proc's stat (user ticks of CPU, and as many of every
// other kind, idle and iowait among them) and meminfo (8 GiB, 2 GiB
// free, 5 GiB available).
func writeProc(t *testing.T, proc string, user int) {
	t.Helper()
	stat := "cpu  " + strconv.Itoa(user) + " 10 20 5000 300 1 2 3 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
	meminfo := "MemTotal:        8388608 kB\nMemFree:         2097152 kB\nMemAvailable:    5242880 kB\n"
	for name, text := range map[string]string{"stat": stat, "meminfo": meminfo} {
		if err := os.WriteFile(filepath.Join(proc, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatsSummary: the summary has the node's CPU (all but idle and
// iowait, with its rate between two readings) and memory from the host,
// and each running sandbox Pod with its sandbox's latest sample, as the
// Pod's and its one container's; a sample of a sandbox with no Pod here,
// or of a namesake with another id, is not taken for a Pod's.
func TestStatsSummary(t *testing.T) {
	p := statsProvider(t)
	at := time.Date(2026, 12, 5, 10, 5, 0, 0, time.UTC)
	sample := func(id, name string, cores, seconds float64, mem, ws int64, rx uint64) lifecycle.LatestUsage {
		return lifecycle.LatestUsage{ID: id, Tenant: "acme", Name: name, UsageSample: sandbox.UsageSample{
			At: at, CPUCores: cores, CPUSeconds: seconds, MemoryBytes: mem, MemoryWorkingSetBytes: ws, NetRxBytes: rx, NetTxBytes: rx * 2,
		}}
	}
	p.UsageFrom(func() []lifecycle.LatestUsage {
		return []lifecycle.LatestUsage{
			sample("id1", "web", 0.5, 12.25, 300<<20, 200<<20, 0),
			sample("id9", "api", 2, 99, 900<<20, 900<<20, 0), // a namesake, not api's sandbox
			sample("id3", "gone", 1, 1, 1, 1, 0),             // no Pod here
		}
	})
	ctx := context.Background()
	sum, err := p.GetStatsSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := sum.Node
	if n.NodeName != "n1" || *n.CPU.UsageCoreNanoSeconds != (1000+10+20+1+2+3)*1e7 {
		t.Errorf("node %s, CPU %d ns; want n1 and the ticks but idle and iowait", n.NodeName, *n.CPU.UsageCoreNanoSeconds)
	}
	if *n.Memory.AvailableBytes != 5<<30 || *n.Memory.UsageBytes != 6<<30 || *n.Memory.WorkingSetBytes != 3<<30 {
		t.Errorf("node memory available %d, usage %d, working set %d; want 5, 6 and 3 GiB", *n.Memory.AvailableBytes, *n.Memory.UsageBytes, *n.Memory.WorkingSetBytes)
	}
	if len(sum.Pods) != 1 {
		t.Fatalf("pods %+v, want web's alone", sum.Pods)
	}
	ps := sum.Pods[0]
	if ps.PodRef != (statsv1alpha1.PodReference{Namespace: "hearth-acme", Name: "web", UID: "uid-web"}) || ps.StartTime.Hour() != 10 || ps.Network != nil {
		t.Errorf("pod %+v started %v, network %v", ps.PodRef, ps.StartTime, ps.Network)
	}
	if *ps.CPU.UsageNanoCores != 5e8 || *ps.CPU.UsageCoreNanoSeconds != 12.25e9 || !ps.CPU.Time.Equal(&metav1.Time{Time: at}) {
		t.Errorf("pod CPU %d nanocores, %d ns at %v", *ps.CPU.UsageNanoCores, *ps.CPU.UsageCoreNanoSeconds, ps.CPU.Time)
	}
	if *ps.Memory.UsageBytes != 300<<20 || *ps.Memory.WorkingSetBytes != 200<<20 {
		t.Errorf("pod memory %d, working set %d", *ps.Memory.UsageBytes, *ps.Memory.WorkingSetBytes)
	}
	if len(ps.Containers) != 1 || ps.Containers[0].Name != ContainerName || *ps.Containers[0].Memory.WorkingSetBytes != 200<<20 {
		t.Errorf("containers %+v", ps.Containers)
	}

	// The node's CPU rate: 400 more ticks (4 s of CPU) in 2 s is 2 cores.
	p.stats.cpuAt = p.stats.cpuAt.Add(-2 * time.Second)
	writeProc(t, p.stats.proc, 1400)
	if sum, err = p.GetStatsSummary(ctx); err != nil {
		t.Fatal(err)
	}
	if got := float64(*sum.Node.CPU.UsageNanoCores) / 1e9; got < 1.9 || got > 2.1 {
		t.Errorf("node CPU rate %.2f cores, want about 2", got)
	}
	// Until the provider has a source of samples, the node alone.
	if sum, err := NewProvider(nil, fake.NewClientset(), "n2", nil).GetStatsSummary(ctx); err != nil || len(sum.Pods) != 0 || sum.Node.NodeName != "n2" {
		t.Errorf("without samples: %+v, %v", sum, err)
	}
	p.stats.proc = t.TempDir()
	if _, err := p.GetStatsSummary(ctx); err == nil {
		t.Error("a host without /proc/stat gave a summary")
	}
}

// TestMetricsResource: /metrics/resource has the node's and each running
// sandbox Pod's CPU seconds and working set under the kubelet's metric
// names and labels, each stamped with its sample's time.
func TestMetricsResource(t *testing.T) {
	p := statsProvider(t)
	at := time.Date(2026, 12, 5, 10, 5, 0, 0, time.UTC)
	p.UsageFrom(func() []lifecycle.LatestUsage {
		return []lifecycle.LatestUsage{{ID: "id2", Tenant: "acme", Name: "api", UsageSample: sandbox.UsageSample{
			At: at, CPUSeconds: 7.5, MemoryBytes: 64 << 20, MemoryWorkingSetBytes: 48 << 20, NetRxBytes: 10, NetTxBytes: 20,
		}}}
	})
	fams, err := p.GetMetricsResource(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	text := buf.String()
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	for _, want := range []string{
		"# TYPE node_cpu_usage_seconds_total counter",
		"node_cpu_usage_seconds_total 10.36 ",
		"node_memory_working_set_bytes 3.221225472e+09 ",
		`container_cpu_usage_seconds_total{container="sandbox",namespace="hearth-acme",pod="api"} 7.5 `,
		`container_memory_working_set_bytes{container="sandbox",namespace="hearth-acme",pod="api"} 5.0331648e+07 `,
		`pod_cpu_usage_seconds_total{namespace="hearth-acme",pod="api"} 7.5 `,
		`pod_memory_working_set_bytes{namespace="hearth-acme",pod="api"} 5.0331648e+07 `,
		`container_start_time_seconds{container="sandbox",namespace="hearth-acme",pod="api"} 1.7964648e+09 `,
		"scrape_error 0\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics/resource has no %q:\n%s", want, text)
		}
	}
	if !strings.Contains(text, ms+"\n") || strings.Contains(text, `pod="web"`) {
		t.Errorf("want the samples stamped …%s, and no web (no sample):\n%s", ms, text)
	}
}
