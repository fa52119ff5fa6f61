package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/hearth/hearth/kube"
)

// kubeStats checks the kubelet's resource endpoints of sandbox name's
// node, read as metrics-server reads them (kubeletGet): /stats/summary
// lists the sandbox's Pod with CPU and memory, and
// after the sandbox burns a CPU for 3 s and holds 100 MB, its CPU time
// has grown by seconds and its working set by the 100 MB;
// /metrics/resource has the Pod's CPU seconds and working set under the
// kubelet's names and labels. The node samples every second (its
// --usage-interval).
func (f *kubeFleet) kubeStats(t *testing.T, ctx context.Context, ns, name, node string) {
	t.Helper()
	before := f.podStats(t, ctx, node, ns, name, func(*statsv1alpha1.PodStats) bool { return true })
	if *before.Memory.WorkingSetBytes == 0 || *before.Memory.WorkingSetBytes > *before.Memory.UsageBytes || len(before.Containers) != 1 || before.Containers[0].Name != kube.ContainerName {
		t.Fatalf("stats of %s: memory %d (working set %d), containers %+v", name, *before.Memory.UsageBytes, *before.Memory.WorkingSetBytes, before.Containers)
	}
	f.planes[0].sh(ctx, name, `nohup python3 -c 'import time; b = bytearray(100 << 20); time.sleep(600)' >/dev/null 2>&1 &
		timeout 3 sh -c 'while :; do :; done'; sleep 1`)
	after := f.podStats(t, ctx, node, ns, name, func(ps *statsv1alpha1.PodStats) bool {
		return *ps.CPU.UsageCoreNanoSeconds >= *before.CPU.UsageCoreNanoSeconds+2e9 &&
			*ps.Memory.WorkingSetBytes >= *before.Memory.WorkingSetBytes+95<<20
	})
	t.Logf("stats of %s: CPU %.2f → %.2f s, working set %d → %d MiB", name,
		float64(*before.CPU.UsageCoreNanoSeconds)/1e9, float64(*after.CPU.UsageCoreNanoSeconds)/1e9,
		*before.Memory.WorkingSetBytes>>20, *after.Memory.WorkingSetBytes>>20)
	metrics, err := f.kubeletGet(ctx, node, "/metrics/resource")
	if err != nil {
		t.Fatalf("/metrics/resource of %s: %v: %s", node, err, metrics)
	}
	for _, want := range []string{
		fmt.Sprintf(`container_cpu_usage_seconds_total{container="%s",namespace="%s",pod="%s"} `, kube.ContainerName, ns, name),
		fmt.Sprintf(`container_memory_working_set_bytes{container="%s",namespace="%s",pod="%s"} `, kube.ContainerName, ns, name),
		fmt.Sprintf(`pod_memory_working_set_bytes{namespace="%s",pod="%s"} `, ns, name),
		"node_cpu_usage_seconds_total ", "node_memory_working_set_bytes ",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics/resource of %s has no %q:\n%s", node, want, metrics)
		}
	}
}

// podStats polls node's /stats/summary until it lists the Pod ns/name
// with CPU and memory figures that satisfy ok, and returns them; it fails
// t after 30 s.
func (f *kubeFleet) podStats(t *testing.T, ctx context.Context, node, ns, name string, ok func(*statsv1alpha1.PodStats) bool) *statsv1alpha1.PodStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		out, err := f.kubeletGet(ctx, node, "/stats/summary")
		last = out
		var sum statsv1alpha1.Summary
		if err == nil && json.Unmarshal([]byte(out), &sum) == nil {
			if sum.Node.NodeName != node || sum.Node.CPU == nil || sum.Node.Memory == nil || *sum.Node.Memory.WorkingSetBytes == 0 {
				t.Fatalf("/stats/summary of %s: node %+v", node, sum.Node)
			}
			for i, ps := range sum.Pods {
				if ps.PodRef.Namespace == ns && ps.PodRef.Name == name && ps.CPU != nil && ps.Memory != nil && ok(&sum.Pods[i]) {
					return &sum.Pods[i]
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("/stats/summary of %s never showed %s/%s as wanted; last: %s", node, ns, name, last)
	return nil
}

// kubeletGet reads path from the kubelet API of node, at the address and
// port its Node reports, as metrics-server does: straight to the node
// (the API server's node proxy refuses a node on a loopback address),
// authenticated by the admin's client certificate of the cluster's CA.
// The node's serving certificate is its own (kube.RunNode), so it is not
// checked, as metrics-server's --kubelet-insecure-tls does not.
func (f *kubeFleet) kubeletGet(ctx context.Context, node, path string) (string, error) {
	n, err := f.k8s.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	host := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			host = a.Address
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.cluster.Kubeconfig)
	if err != nil {
		return "", err
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return "", err
	}
	tlsCfg.InsecureSkipVerify, tlsCfg.RootCAs, tlsCfg.ServerName = true, nil, ""
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	url := fmt.Sprintf("https://%s%s", net.JoinHostPort(host, strconv.Itoa(int(n.Status.DaemonEndpoints.KubeletEndpoint.Port))), path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}
