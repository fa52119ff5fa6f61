package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearth/hearth/kube"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/benchstat"
)

// Benchmarks of hearth on Kubernetes (docs/BENCHMARKS.md, "On
// Kubernetes"), each against the one-machine daemon in the same run.

// BenchmarkFleetCreateToFirstOutput is create → first output through a
// control plane on Kubernetes, whose create is a Pod that kube-scheduler
// binds to a hearth node ("fleet-"), against a one-machine daemon
// ("one-machine-"), their iterations alternating.
func BenchmarkFleetCreateToFirstOutput(b *testing.B) {
	f := newKubeFleet(b, 1, "")
	lone := newDaemon(b, preferredRuntime(b))
	var fleet, one []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fleet = append(fleet, createToFirstOutput(b, f.planes[0], fmt.Sprintf("fleet-%d", i)))
		one = append(one, createToFirstOutput(b, lone, fmt.Sprintf("one-%d", i)))
	}
	benchstat.Report(b, "fleet-", fleet)
	benchstat.Report(b, "one-machine-", one)
}

// BenchmarkFleetExec is the round trip of `true` in a sandbox of a fleet,
// sent to the control plane, which forwards it to the sandbox's node
// ("fleet-"), sent to that node itself ("node-"), and in a sandbox of a
// one-machine daemon ("one-machine-"), alternating.
func BenchmarkFleetExec(b *testing.B) {
	f := newKubeFleet(b, 1, "")
	lone := newDaemon(b, preferredRuntime(b))
	ctx := context.Background()
	for _, d := range []*daemon{f.planes[0], lone} {
		if _, _, err := d.Client().Create(ctx, sandbox.CreateRequest{Name: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	run := func(d *daemon) time.Duration { return timeTrue(b, d, "bench") }
	run(f.planes[0]) // the first forwarded call dials the node
	var fleet, node, one []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fleet = append(fleet, run(f.planes[0]))
		node = append(node, run(f.nodes[0]))
		one = append(one, run(lone))
	}
	benchstat.Report(b, "fleet-", fleet)
	benchstat.Report(b, "node-", node)
	benchstat.Report(b, "one-machine-", one)
}

// BenchmarkFleetWarmCreateToFirstOutput is create → first output from a
// warm pool: through a control plane on Kubernetes, which claims a member
// of a node's pool and binds its Pod there ("fleet-"), and from a
// one-machine daemon's own pool ("one-machine-"), alternating, each pool
// full again and the host settled before each create. Its third figure is
// the Kubernetes part of a claim alone ("pod-create-"): client-go
// creating the Pod the control plane would make for such a sandbox, in
// the same namespace under the same quota, bound to a node that does not
// exist (so no node takes it up), and deleting it.
func BenchmarkFleetWarmCreateToFirstOutput(b *testing.B) {
	pool := []string{"--warm-pool", "small=1"}
	f := newKubeFleetOf(b, 1, fleetNode{args: pool})
	lone := newDaemon(b, preferredRuntime(b), pool...)
	ctx := context.Background()
	// Each create starts on a settled host, the timer stopped: both pools
	// full, and then poolSettle more, since a member counts as ready once
	// it runs, before its warm-up exec, and the last create's destroy and
	// refill, and a fresh member's first moments, would otherwise land on
	// the next create (one machine's p50: 32 ms without the pause, 26
	// with it).
	settled := func() {
		b.StopTimer()
		waitPool(b, ctx, f.nodes[0], "small", 1)
		waitPool(b, ctx, lone, "small", 1)
		time.Sleep(poolSettle)
		b.StartTimer()
	}
	var fleet, one, pods []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		settled()
		fleet = append(fleet, createToFirstOutput(b, f.planes[0], fmt.Sprintf("fleet-%d", i)))
		settled()
		one = append(one, createToFirstOutput(b, lone, fmt.Sprintf("one-%d", i)))
		pods = append(pods, f.podCreate(b, ctx, fmt.Sprintf("podbase-%d", i)))
	}
	benchstat.Report(b, "fleet-", fleet)
	benchstat.Report(b, "one-machine-", one)
	benchstat.Report(b, "pod-create-", pods)
}

// poolSettle is how long BenchmarkFleetWarmCreateToFirstOutput lets the
// host settle before each create.
const poolSettle = time.Second

// podCreate times client-go's create of the Pod a control plane makes for
// a small sandbox of the operator named name, bound to no node of the
// cluster, and deletes it.
func (f *kubeFleet) podCreate(b *testing.B, ctx context.Context, name string) time.Duration {
	pod := kube.PodFor(sandbox.Sandbox{ID: "x" + name, Name: name, Tenant: sandbox.SystemTenant, Owner: "bench", Image: "default", Resources: sandbox.Sizes()["small"]}, "")
	pod.Spec.NodeName = "no-such-node"
	pods := f.k8s.CoreV1().Pods(pod.Namespace)
	start := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		b.Fatal(err)
	}
	return took
}
