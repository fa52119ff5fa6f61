package e2e_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// kubeletGet reads path from the kubelet API of node as the admin (see
// kubeletAs), and fails unless the node answers 200.
func (f *kubeFleet) kubeletGet(ctx context.Context, node, path string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", f.cluster.Kubeconfig)
	if err != nil {
		return "", err
	}
	admin, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		if admin, err = tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile); err != nil {
			return "", err
		}
	}
	status, body, err := f.kubeletAs(ctx, node, path, []tls.Certificate{admin})
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("GET %s of %s: %d", path, node, status)
	}
	return body, err
}

// kubeletAs reads path from the kubelet API of node presenting certs
// (none: no client certificate), at the address and port its Node
// reports, as metrics-server does: straight to the node (the API
// server's node proxy refuses a node on a loopback address). The node's
// serving certificate is its own (kube.RunNode), so it is not checked,
// as metrics-server's --kubelet-insecure-tls does not.
func (f *kubeFleet) kubeletAs(ctx context.Context, node, path string, certs []tls.Certificate) (int, string, error) {
	n, err := f.k8s.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, "", err
	}
	host := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			host = a.Address
		}
	}
	tlsCfg := &tls.Config{Certificates: certs, InsecureSkipVerify: true}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	url := fmt.Sprintf("https://%s%s", net.JoinHostPort(host, strconv.Itoa(int(n.Status.DaemonEndpoints.KubeletEndpoint.Port))), path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// kubeletAccess checks who may read node's usage: a caller without a
// client certificate of the cluster's CA is turned away at the
// handshake; a user the cluster's RBAC grants nothing gets 403 from both
// endpoints; another, granted get on nodes/stats alone, reads
// /stats/summary and is still refused /metrics/resource (nodes/metrics).
// (Two users, because the node caches a refusal for half a minute.)
func (f *kubeFleet) kubeletAccess(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	if status, body, err := f.kubeletAs(ctx, node, "/stats/summary", nil); err == nil {
		t.Errorf("/stats/summary without a client certificate = %d %q; want the handshake refused", status, body)
	}
	userCert := func(name string) []tls.Certificate {
		cert, err := f.cluster.ClientCertificate(name)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{cert}
	}
	nobody := userCert("usage-nobody")
	for _, path := range []string{"/stats/summary", "/metrics/resource"} {
		if status, body, err := f.kubeletAs(ctx, node, path, nobody); err != nil || status != http.StatusForbidden {
			t.Errorf("%s as a user without a role = %d %q, %v; want 403", path, status, body, err)
		}
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "usage-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/stats"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "usage-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "usage-reader"}},
	}
	if _, err := f.k8s.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.k8s.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.k8s.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		f.k8s.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	reader := userCert("usage-reader")
	// The API server's RBAC sees the binding a moment after it is made;
	// the node is asked once it does (a refusal it got would be cached).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		review, err := f.k8s.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:               "usage-reader",
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "stats", Name: node},
		}}, metav1.CreateOptions{})
		if err == nil && review.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never allowed the binding: %+v, %v", review, err)
		}
	}
	if status, body, err := f.kubeletAs(ctx, node, "/stats/summary", reader); err != nil || status != http.StatusOK {
		t.Errorf("/stats/summary granted nodes/stats = %d %q, %v; want 200", status, body, err)
	}
	if status, _, err := f.kubeletAs(ctx, node, "/metrics/resource", reader); err != nil || status != http.StatusForbidden {
		t.Errorf("/metrics/resource granted nodes/stats alone = %d, %v; want 403", status, err)
	}
}
