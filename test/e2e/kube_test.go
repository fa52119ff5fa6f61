package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/kube"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/kubetest"
	"github.com/hearth/hearth/testutil/pgtest"
	"github.com/hearth/hearth/testutil/testenv"
)

// kubeFleet is hearth on a Kubernetes control plane: control-plane
// replicas and hearth nodes on one Postgres store.
type kubeFleet struct {
	cluster *kubetest.Cluster
	k8s     kubernetes.Interface
	planes  []*daemon
	nodes   []*daemon
}

// newKubeFleet starts a Kubernetes control plane with kube-scheduler, a
// Postgres store, the hearth control-plane replicas (cp0, …) and one
// hearth node per entry of pools (hn0, …, in that pool when it is not
// ""), each registered as a Node, and waits until every Node is Ready.
func newKubeFleet(t testing.TB, replicas int, pools ...string) *kubeFleet {
	t.Helper()
	nodes := make([]fleetNode, len(pools))
	for i, p := range pools {
		nodes[i].pool = p
	}
	return newKubeFleetOf(t, replicas, nodes...)
}

// fleetNode is one hearth node of newKubeFleetOf: its pool ("" for none)
// and its further flags.
type fleetNode struct {
	pool string
	args []string
}

// newKubeFleetOf is newKubeFleet with a node per entry of nodes.
func newKubeFleetOf(t testing.TB, replicas int, nodes ...fleetNode) *kubeFleet {
	t.Helper()
	requireDaemon(t)
	rt := bins.Runtimes[0]
	if slices.Contains(bins.Runtimes, "runsc") {
		rt = "runsc" // what a fleet's nodes run
	}
	c := kubetest.Start(t, kubetest.Options{Scheduler: true})
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube.TuneClient(cfg) // as the daemons' own clients: the Pod-create baseline too
	f := &kubeFleet{cluster: c, k8s: kubernetes.NewForConfigOrDie(cfg)}
	dsn := pgtest.NewDatabase(t)
	key := filepath.Join(t.TempDir(), "hearth.key")
	if out, err := exec.Command(bins.Hearth, "key", "create", key).CombinedOutput(); err != nil {
		t.Fatalf("hearth key create: %v\n%s", err, out)
	}
	for i := range replicas {
		d := newDaemon(t, rt, "--store", dsn, "--key-file", key, "--node", fmt.Sprintf("cp%d", i), "--kubeconfig", c.Kubeconfig)
		if i > 0 {
			d.Token = f.planes[0].Token
		}
		f.planes = append(f.planes, d)
	}
	for i, n := range nodes {
		name := fmt.Sprintf("hn%d", i)
		args := []string{"--store", dsn, "--key-file", key, "--name", name, "--kubeconfig", c.Kubeconfig,
			"--kubelet-listen", fmt.Sprintf("127.0.0.1:%d", testenv.ReservedPort(t)), "--client-ca", c.CA}
		if n.pool != "" {
			args = append(args, "--pool", n.pool)
		}
		args = append(args, n.args...)
		d := &daemon{daemonproc.NewAs(t, "node", rt, args...)}
		d.Token = f.planes[0].Token
		f.nodes = append(f.nodes, d)
		t.Cleanup(func() { f.k8s.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range nodes {
		f.waitReady(t, ctx, fmt.Sprintf("hn%d", i))
	}
	return f
}

// schedulable says whether Node n is Ready and tainted by hearth alone:
// the controller manager lifts the not-ready taint a moment after the
// node turns Ready.
func schedulable(n *corev1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key != kube.TaintKey {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReady waits until Node name is Ready, with no taint but hearth's.
func (f *kubeFleet) waitReady(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := f.k8s.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil && schedulable(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s is not Ready after 30 s: %+v, %v", name, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kubectlLogs checks kubectl logs on sandbox name's Pod in namespace ns,
// whose calls so far include a file write through the API and two
// kubectl execs: one logfmt line per call, --tail, --timestamps and
// --previous (refused); and, with --follow, a call made through c (a
// stat of /tmp) arrives as the log runs.
func (f *kubeFleet) kubectlLogs(t *testing.T, ctx context.Context, ns, name string, c *client.Client) {
	t.Helper()
	out, err := f.kubectl(t, "logs", "-n", ns, name)
	if err != nil || !strings.Contains(out, "verb=fs.write door=api") || strings.Count(out, "verb=sandbox.exec door=kubernetes") != 2 {
		t.Fatalf("kubectl logs %s = %q, %v; want its calls: the API's write and two kubectl execs", name, out, err)
	}
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " status=") || !strings.Contains(line, " duration_ms=") {
			t.Errorf("kubectl logs line %q is not a call's logfmt line", line)
		}
	}
	if out, err := f.kubectl(t, "logs", "-n", ns, name, "--tail=1", "--timestamps"); err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, "Z time=") {
		t.Errorf("kubectl logs --tail=1 --timestamps = %q, %v; want one line, a timestamp first", out, err)
	}
	if out, err := f.kubectl(t, "logs", "-n", ns, name, "--previous"); err == nil || !strings.Contains(out, "one container") {
		t.Errorf("kubectl logs --previous = %q, %v; want it refused", out, err)
	}
	var follow testenv.Buffer
	fctx, stop := context.WithCancel(ctx)
	cmd := exec.CommandContext(fctx, filepath.Join(f.cluster.Bin, "kubectl"), "--kubeconfig", f.cluster.Kubeconfig, "logs", "-n", ns, name, "--follow", "--tail=1")
	cmd.Stdout, cmd.Stderr = &follow, &follow
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop() // kubectl logs --follow runs until it is killed
		cmd.Wait()
	}()
	follow.WaitFor(t, "\n", 10*time.Second) // the last call, first
	if _, err := c.Stat(ctx, name, "/tmp"); err != nil {
		t.Fatal(err)
	}
	follow.WaitFor(t, "verb=fs.stat", 10*time.Second)
}

// kubectl runs kubectl on the fleet's cluster and returns its output.
func (f *kubeFleet) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(f.cluster.Bin, "kubectl"), append([]string{"--kubeconfig", f.cluster.Kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// nodeNames is the fleet's hearth node names.
func (f *kubeFleet) nodeNames() []string {
	var out []string
	for i := range f.nodes {
		out = append(out, fmt.Sprintf("hn%d", i))
	}
	return out
}

// waitAudit waits until the audit log holds n events of door and verb on
// sandbox.
func (f *kubeFleet) waitAudit(t *testing.T, ctx context.Context, door, verb, sb string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, err := f.planes[0].Client().Admin().Audit(ctx, sandbox.AuditFilter{Limit: 10000})
		got := 0
		for _, e := range events {
			if e.Door == door && e.Verb == verb && e.Sandbox == sb {
				got++
			}
		}
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit events %s %s on %s = %d, %v; want %d", door, verb, sb, got, err, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitEvent waits until the pod ns/name has an event of type and reason.
func (f *kubeFleet) waitEvent(t *testing.T, ctx context.Context, ns, name, typ, reason string) {
	t.Helper()
	sel := fields.Set{"involvedObject.name": name, "type": typ, "reason": reason}.AsSelector().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := f.k8s.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil && len(evs.Items) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event %s on pod %s/%s 30 s on: %v", typ, reason, ns, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPodRunning waits until the pod ns/name is Running on node.
func (f *kubeFleet) waitPodRunning(t *testing.T, ctx context.Context, ns, name, node string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pod, err := f.k8s.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == node {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s is not Running on %s 30 s on: %+v, %v", ns, name, node, pod, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sandboxNode is the node that runs the sandbox name, as d reports it.
func (d *daemon) sandboxNode(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	sb, err := d.Client().Get(ctx, name)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return sb.Node
}

// waitPodGone waits until the pod ns/name is gone from the API server.
func (f *kubeFleet) waitPodGone(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := f.k8s.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s is still there 30 s on: %v", ns, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubeFleet: with two control-plane replicas and two hearth nodes on
// one Kubernetes cluster, a sandbox created through either replica is a
// Pod in its tenant's namespace that kube-scheduler bound to a hearth
// node, with hearth's labels, its requests and the node's taint
// tolerated; the sandbox runs on that node (its row names it) and
// answers exec, file writes and reads through both replicas, which
// forward to the node, and is checkpointed, restored, forked (the fork a
// Pod bound to the same node; a fork of a memory checkpoint with the
// checkpoint's process running), put to sleep and woken; kubectl exec runs a command in it through the
// node's kubelet API, which also serves its usage (kubeStats) to whom
// RBAC lets read it (kubeletAccess); destroying
// it through hearth deletes the Pod, and deleting a Pod with kubectl
// destroys its sandbox.
func TestKubeFleet(t *testing.T) {
	sampled := fleetNode{args: []string{"--usage-interval", "1s"}}
	f := newKubeFleetOf(t, 2, sampled, sampled)
	ctx := ctxT(t)
	a, b := f.planes[0].Client(), f.planes[1].Client()
	ns := kube.Namespace(sandbox.SystemTenant)
	for i, c := range []*struct {
		name string
		via  int
	}{{"web", 0}, {"api", 1}} {
		cp := []*daemon{f.planes[0], f.planes[1]}[c.via]
		sb, created, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: c.name})
		if err != nil || !created {
			t.Fatalf("create %s through cp%d = %v, %v", c.name, c.via, created, err)
		}
		if sb.Status != sandbox.StatusRunning || !slices.Contains(f.nodeNames(), sb.Node) {
			t.Fatalf("sandbox %d = %s on node %q; want running on a hearth node", i, sb.Status, sb.Node)
		}
		pod, err := f.k8s.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the sandbox's pod: %v", err)
		}
		if pod.Spec.NodeName != sb.Node || pod.Status.Phase != corev1.PodRunning {
			t.Fatalf("pod %s on %q, %s; want Running on the sandbox's node %s", c.name, pod.Spec.NodeName, pod.Status.Phase, sb.Node)
		}
		if pod.Labels[kube.LabelSandbox] != c.name || pod.Labels[kube.LabelTenant] != sandbox.SystemTenant || pod.Annotations[kube.AnnotationID] != sb.ID {
			t.Fatalf("pod labels %v, annotations %v; want the sandbox's", pod.Labels, pod.Annotations)
		}
		if cpu := pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue(); cpu != sb.Resources.MilliCPU {
			t.Fatalf("pod requests %dm CPU; the sandbox has %dm", cpu, sb.Resources.MilliCPU)
		}
	}
	// Calls through either replica reach the node.
	if _, err := a.WriteFile(ctx, "web", sandbox.WriteRequest{Path: "/tmp/note"}, strings.NewReader("from a")); err != nil {
		t.Fatalf("write through cp0: %v", err)
	}
	var got bytes.Buffer
	if err := b.ReadFile(ctx, "web", "/tmp/note", &got); err != nil || got.String() != "from a" {
		t.Fatalf("read through cp1 = %q, %v; want what cp0 wrote", got.String(), err)
	}
	var out bytes.Buffer
	res, err := b.Exec(ctx, "web", sandbox.ExecRequest{Argv: []string{"cat", "/tmp/note"}}, nil, &out, &out)
	if err != nil || res.ExitCode != 0 || out.String() != "from a" {
		t.Fatalf("exec through cp1 = %+v, %q, %v", res, out.String(), err)
	}
	// kubectl exec reaches the sandbox through the node's kubelet API.
	kout, err := f.kubectl(t, "exec", "-n", ns, "web", "--", "cat", "/tmp/note")
	if err != nil || kout != "from a" {
		t.Fatalf("kubectl exec = %q, %v; want the file", kout, err)
	}
	if kout, err := f.kubectl(t, "exec", "-n", ns, "web", "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(kout, "exit code 3") {
		t.Fatalf("kubectl exec of exit 3 = %q, %v; want exit code 3", kout, err)
	}
	f.waitAudit(t, ctx, sandbox.DoorKubernetes, "sandbox.exec", "web", 2)
	f.kubectlLogs(t, ctx, ns, "web", a)
	// Checkpoint, restore, fork, sleep and wake, through the replicas.
	webNode := f.planes[0].sandboxNode(t, ctx, "web")
	f.kubeStats(t, ctx, ns, "web", webNode)
	f.kubeletAccess(t, ctx, webNode)
	ck, err := a.Checkpoint(ctx, "web", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatalf("checkpoint through cp0: %v", err)
	}
	f.planes[1].sh(ctx, "web", "echo later > /tmp/note")
	if _, err := b.Restore(ctx, "web", ck.ID); err != nil {
		t.Fatalf("restore through cp1: %v", err)
	}
	if got := f.planes[0].sh(ctx, "web", "cat /tmp/note"); got != "from a" {
		t.Fatalf("note after the restore = %q; want the checkpoint's", got)
	}
	fork, err := a.Fork(ctx, "web", ck.ID, "web-fork")
	if err != nil || fork.Node != webNode {
		t.Fatalf("fork through cp0 = %+v, %v; want it on web's node %s", fork, err, webNode)
	}
	if got := f.planes[1].sh(ctx, "web-fork", "cat /tmp/note"); got != "from a" {
		t.Fatalf("note in the fork = %q; want the checkpoint's", got)
	}
	f.waitPodRunning(t, ctx, ns, "web-fork", webNode)
	// A fork of a memory checkpoint, on the checkpoint's node, resumes its
	// processes: a process started before it runs in the fork.
	f.planes[0].sh(ctx, "web", "sleep 86401 >/dev/null 2>&1 &")
	mck, err := b.Checkpoint(ctx, "web", sandbox.CheckpointRequest{Memory: true})
	if err != nil || !mck.Memory {
		t.Fatalf("memory checkpoint through cp1 = %+v, %v", mck, err)
	}
	twin, err := a.Fork(ctx, "web", mck.ID, "web-twin")
	if err != nil || twin.Node != webNode || !strings.HasSuffix(twin.Reason, "with its processes") {
		t.Fatalf("fork of the memory checkpoint through cp0 = %+v, %v; want it on %s with its processes", twin, err, webNode)
	}
	if got := strings.TrimSpace(f.planes[1].sh(ctx, "web-twin", "ps -eo args | grep -c '^sleep 86401' || true")); got != "1" {
		t.Errorf("processes of the memory checkpoint in its fork: %q sleep 86401, want 1", got)
	}
	f.waitPodRunning(t, ctx, ns, "web-twin", webNode)
	if err := a.Destroy(ctx, "web-twin"); err != nil {
		t.Fatalf("destroy the memory fork: %v", err)
	}
	if sb, err := b.Sleep(ctx, "web"); err != nil || sb.Status != sandbox.StatusSleeping {
		t.Fatalf("sleep through cp1 = %+v, %v", sb, err)
	}
	if got := f.planes[0].sh(ctx, "web", "cat /tmp/note"); got != "from a" {
		t.Fatalf("note after sleep and an exec's wake = %q", got)
	}
	if err := a.Destroy(ctx, "web-fork"); err != nil {
		t.Fatalf("destroy the fork: %v", err)
	}
	f.waitPodGone(t, ctx, ns, "web-fork")
	// kubectl lists the sandboxes, by hearth's labels.
	if kout, err := f.kubectl(t, "get", "pods", "-n", ns, "-l", kube.LabelSandbox+"=api", "-o", "name"); err != nil || strings.TrimSpace(kout) != "pod/api" {
		t.Fatalf("kubectl get pods -l sandbox=api = %q, %v", kout, err)
	}
	// Destroy through hearth deletes the Pod.
	if err := b.Destroy(ctx, "web"); err != nil {
		t.Fatalf("destroy web: %v", err)
	}
	f.waitPodGone(t, ctx, ns, "web")
	// Deleting the Pod destroys the sandbox.
	if kout, err := f.kubectl(t, "delete", "pod", "-n", ns, "api", "--wait=true", "--timeout=30s"); err != nil {
		t.Fatalf("kubectl delete pod api = %q, %v", kout, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := a.Get(ctx, "api")
		if sandbox.ErrorCode(err) == sandbox.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox api after its pod was deleted: %v; want not_found", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubeBudget: a tenant whose budget is 20 small sandboxes has a
// ResourceQuota of 20 CPUs (and their memory and disk) in its namespace,
// which holds for Pods made with kubectl too. With a kubectl Pod holding
// one CPU of it, hearth's 20th create is refused by Kubernetes as
// budget_exceeded with the quota's numbers, and nothing of it is left;
// once that Pod goes, the 20th is admitted; the 21st is refused as
// budget_exceeded, and so is a kubectl Pod that asks for one more CPU.
func TestKubeBudget(t *testing.T) {
	f := newKubeFleet(t, 1, "", "")
	ctx := ctxT(t)
	op := f.planes[0].Client()
	o := sandbox.PolicyOverrides{AgentQuota: intp(30), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(1000)}
	toks := guardedTenant(t, ctx, op, "acme", smalls(80), o, "bot", "bot2")
	bot := client.New(f.planes[0].URL, toks["bot"], nil)
	ns := kube.Namespace("acme")
	create := func(name string) (sandbox.Sandbox, error) {
		sb, _, err := bot.Create(ctx, sandbox.CreateRequest{Name: name, Size: "small"})
		return sb, err
	}
	if _, err := create("s0"); err != nil {
		t.Fatalf("first create: %v", err)
	}
	q, err := f.k8s.CoreV1().ResourceQuotas(ns).Get(ctx, kube.QuotaName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the tenant's quota: %v", err)
	}
	if cpu := q.Spec.Hard["requests.cpu"]; cpu.Value() != 20 {
		t.Fatalf("quota = %v; want requests.cpu 20 (the budget)", q.Spec.Hard)
	}
	errs := make(chan error, 18)
	for i := 1; i < 19; i++ {
		go func() { _, err := create(fmt.Sprintf("s%d", i)); errs <- err }()
	}
	for range 18 {
		if err := <-errs; err != nil {
			t.Fatalf("create within the budget: %v", err)
		}
	}
	// A Pod made with kubectl takes the last CPU: it selects no node, so
	// it stays Pending and counted.
	if out, err := f.squatter(t, ns, "squatter", "1"); err != nil {
		t.Fatalf("kubectl create pod within the quota: %v\n%s", err, out)
	}
	// The quota controller recounts the quota as the Pods come, from its
	// cache, which can lag the last of them and undercount for a moment
	// (a 20th create was once admitted then): the quota binds once its
	// count has caught up.
	quotaUsed(t, ctx, f, ns, "requests.cpu", 20)
	_, err = create("s19")
	if e := sandbox.AsError(err); e == nil || e.Code != sandbox.CodeBudgetExceeded || e.Details["resource"] != "requests.cpu" {
		t.Fatalf("create with the quota full = %v; want budget_exceeded on requests.cpu", e)
	}
	if _, err := bot.Get(ctx, "s19"); sandbox.ErrorCode(err) != sandbox.CodeNotFound {
		t.Fatalf("get of the refused sandbox = %v; want not_found", err)
	}
	if out, err := f.kubectl(t, "delete", "pod", "-n", ns, "squatter", "--wait=true"); err != nil {
		t.Fatalf("kubectl delete pod squatter: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := create("s19")
		if err == nil {
			break
		}
		if sandbox.ErrorCode(err) != sandbox.CodeBudgetExceeded || time.Now().After(deadline) {
			t.Fatalf("20th create once the kubectl pod went = %v", err)
		}
		time.Sleep(500 * time.Millisecond) // the quota controller gives the CPU back
	}
	// Kubernetes's quota controller recounts a quota when a Pod goes (the
	// squatter), from its cache, which can lag the Pod made just after
	// and undercount it for a moment; the quota binds once its count has
	// caught up.
	quotaUsed(t, ctx, f, ns, "requests.cpu", 20)
	bot2 := client.New(f.planes[0].URL, toks["bot2"], nil)
	if _, _, err := bot2.Create(ctx, sandbox.CreateRequest{Name: "s20", Size: "small"}); sandbox.ErrorCode(err) != sandbox.CodeBudgetExceeded {
		t.Fatalf("21st create (by another agent) = %v; want budget_exceeded", err)
	}
	if out, err := f.squatter(t, ns, "late", "1"); err == nil || !strings.Contains(out, "exceeded quota") {
		t.Fatalf("kubectl create pod over the quota = %v\n%s; want refused for the quota", err, out)
	}
	// A node's check before it sends a fork's root to another node is
	// a dry run the quota judges too: refused now, and it makes nothing.
	small, err := sandbox.LookupSize("small")
	if err != nil {
		t.Fatal(err)
	}
	fork := sandbox.Sandbox{ID: "dryrunfork", Name: "fork", Tenant: "acme", Owner: "bot", Image: "default", Size: "small", Node: "hn0", Resources: small}
	err = kube.NewFleet(kube.FleetOptions{Client: f.k8s}).PlaceOn(ctx, fork, true)
	if e := sandbox.AsError(err); e == nil || e.Code != sandbox.CodeBudgetExceeded {
		t.Fatalf("the dry run of a fork's pod with the quota full = %v; want budget_exceeded", err)
	}
	pods, err := f.k8s.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 20 {
		t.Fatalf("pods in %s = %d, %v; want the 20 sandboxes'", ns, len(pods.Items), err)
	}
}

// quotaUsed waits (up to 30 s) until the tenant's quota has counted want
// of resource as used for 2 s on end: longer than its controller's cache
// lags on a busy machine.
func quotaUsed(t *testing.T, ctx context.Context, f *kubeFleet, ns string, resource corev1.ResourceName, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var since time.Time // when the count last became want
	for {
		q, err := f.k8s.CoreV1().ResourceQuotas(ns).Get(ctx, kube.QuotaName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the tenant's quota: %v", err)
		}
		used := q.Status.Used[resource]
		switch {
		case used.Value() != want:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= 2*time.Second:
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota %s used = %s after 30 s; want %d", resource, used.String(), want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestKubeNodeFailure: a hearth node killed with SIGKILL has its
// sandboxes reported unavailable, with the reason, through the control
// plane, and its Node NotReady; Kubernetes does not evict them. Restarted,
// the node runs them again with their files, and their Pods are Running.
func TestKubeNodeFailure(t *testing.T) {
	f := newKubeFleet(t, 1, "", "")
	ctx := ctxT(t)
	cp := f.planes[0]
	sb, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	cp.sh(ctx, "kept", "echo kept > /home/sandbox/kept.txt")
	node := f.nodes[slices.Index(f.nodeNames(), sb.Node)]
	node.Kill()
	wantUnavailable(t, ctx, cp, "kept")
	deadline := time.Now().Add(30 * time.Second)
	for !f.nodeNotReady(t, ctx, sb.Node) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s is still Ready 30 s after its SIGKILL", sb.Node)
		}
		time.Sleep(200 * time.Millisecond)
	}
	node.Start()
	f.waitReady(t, ctx, sb.Node)
	if got := cp.sh(ctx, "kept", "cat /home/sandbox/kept.txt"); got != "kept\n" {
		t.Fatalf("kept after its node came back = %q", got)
	}
	pod, err := f.k8s.CoreV1().Pods(kube.Namespace(sandbox.SystemTenant)).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName != sb.Node {
		t.Fatalf("kept's pod after its node came back = %v; want Running on %s", err, sb.Node)
	}
}

// nodeNotReady says whether Node name's Ready condition is not True.
func (f *kubeFleet) nodeNotReady(t *testing.T, ctx context.Context, name string) bool {
	n, err := f.k8s.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue
		}
	}
	return true
}

// TestKubePools: three hearth nodes, hn0 in pool "a" and hn1 and hn2 in
// pool "b". A tenant pinned to "b" has every sandbox on hn1 or hn2, its
// Pods selecting the pool; an unpinned tenant may land anywhere; a tenant
// pinned to a pool no node is in is refused as unavailable, with the
// scheduler's reason, and nothing of the create is left.
func TestKubePools(t *testing.T) {
	f := newKubeFleet(t, 1, "a", "b", "b")
	ctx := ctxT(t)
	op := f.planes[0].Client()
	o := sandbox.PolicyOverrides{AgentQuota: intp(10), AgentSharePercent: intp(100)}
	pinned := client.New(f.planes[0].URL, guardedTenant(t, ctx, op, "pinned", smalls(40), o, "bot")["bot"], nil)
	nowhere := client.New(f.planes[0].URL, guardedTenant(t, ctx, op, "nowhere", smalls(40), o, "bot")["bot"], nil)
	for tenant, pool := range map[string]string{"pinned": "b", "nowhere": "c"} {
		if _, err := op.Admin().UpdateTenant(ctx, tenant, sandbox.TenantUpdate{Pool: &pool}); err != nil {
			t.Fatalf("pin %s to pool %s: %v", tenant, pool, err)
		}
	}
	for i := range 6 {
		sb, _, err := pinned.Create(ctx, sandbox.CreateRequest{Name: fmt.Sprintf("p%d", i)})
		if err != nil {
			t.Fatalf("create in the pinned tenant: %v", err)
		}
		if sb.Node != "hn1" && sb.Node != "hn2" {
			t.Fatalf("sandbox %s of the tenant pinned to pool b is on %s; want hn1 or hn2", sb.Name, sb.Node)
		}
		pod, err := f.k8s.CoreV1().Pods(kube.Namespace("pinned")).Get(ctx, sb.Name, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeSelector[kube.LabelPool] != "b" {
			t.Fatalf("pod of %s: %v, selector %v; want pool b", sb.Name, err, pod.Spec.NodeSelector)
		}
	}
	_, _, err := nowhere.Create(ctx, sandbox.CreateRequest{Name: "lost"})
	if !sandbox.IsCode(err, sandbox.CodeUnavailable) || !strings.Contains(err.Error(), "node(s) didn't match Pod's node affinity/selector") {
		t.Fatalf("create pinned to a pool of no node = %v; want unavailable with the scheduler's reason", err)
	}
	if list, err := nowhere.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("the refused tenant's sandboxes = %v, %v; want none", list, err)
	}
	f.waitPodGone(t, ctx, kube.Namespace("nowhere"), "agent-bot-lost")
	if sb, _, err := op.Create(ctx, sandbox.CreateRequest{Name: "free"}); err != nil || !slices.Contains(f.nodeNames(), sb.Node) {
		t.Fatalf("unpinned create = %+v, %v", sb, err)
	}
}

// waitPool waits until node d's warm pool has ready members of size.
func waitPool(t testing.TB, ctx context.Context, d *daemon, size string, ready int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sizes, err := d.Client().Pool(ctx)
		if err != nil {
			t.Fatalf("warm pool of %s: %v", d.URL, err)
		}
		for _, ps := range sizes {
			if ps.Size == size && ps.Ready >= ready {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm pool of %s 60 s on: %+v; want %d ready of %s", d.URL, sizes, ready, size)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubeWarmPool: a create at the control plane claims a member of a
// node's warm pool: it answers at once, on that node, "from the warm
// pool", its Pod bound to the node and Running; the node refills its pool;
// a claim the tenant's quota refuses is budget_exceeded and puts the
// member back; a cordoned node's members are not claimed.
func TestKubeWarmPool(t *testing.T) {
	f := newKubeFleetOf(t, 1, fleetNode{args: []string{"--warm-pool", "small=2"}}, fleetNode{})
	ctx := ctxT(t)
	node := f.nodes[0]
	waitPool(t, ctx, node, "small", 2)
	cp := f.planes[0].Client()
	sb, _, err := cp.Create(ctx, sandbox.CreateRequest{Name: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Node != "hn0" || !strings.Contains(sb.Reason, "warm pool") || sb.Status != sandbox.StatusRunning {
		t.Fatalf("create through the control plane = %+v; want hn0's warm-pool member, running", sb)
	}
	if got := f.planes[0].sh(ctx, "warm", "echo hi"); got != "hi\n" {
		t.Fatalf("exec in the claimed member = %q", got)
	}
	f.waitPodRunning(t, ctx, kube.Namespace(sandbox.SystemTenant), "warm", "hn0")
	waitPool(t, ctx, node, "small", 2) // refilled on the claim's notice
	// A tenant whose quota a kubectl pod fills: the claim is refused,
	// and the member is a member again.
	o := sandbox.PolicyOverrides{AgentQuota: intp(10), AgentSharePercent: intp(100)}
	bot := client.New(f.planes[0].URL, guardedTenant(t, ctx, cp, "tight", smalls(40), o, "bot")["bot"], nil)
	if _, _, err := bot.Create(ctx, sandbox.CreateRequest{Name: "first"}); err != nil {
		t.Fatalf("first create of tenant tight: %v", err)
	}
	waitPool(t, ctx, node, "small", 2)
	if out, err := f.squatter(t, kube.Namespace("tight"), "squatter", "9"); err != nil {
		t.Fatalf("kubectl create pod within the quota: %v\n%s", err, out)
	}
	if sb, _, err := bot.Create(ctx, sandbox.CreateRequest{Name: "second"}); sandbox.ErrorCode(err) != sandbox.CodeBudgetExceeded {
		t.Fatalf("claim over the quota = %s on %s, %v; want budget_exceeded", sb.Name, sb.Node, err)
	}
	sizes, err := node.Client().Pool(ctx)
	if err != nil || len(sizes) != 1 || sizes[0].Ready != 2 {
		t.Fatalf("warm pool after a refused claim = %+v, %v; want both members back", sizes, err)
	}
	// A cordoned node's members are not claimed: the create is placed
	// afresh, on the open node.
	if out, err := f.kubectl(t, "cordon", "hn0"); err != nil {
		t.Fatalf("kubectl cordon hn0: %v\n%s", err, out)
	}
	time.Sleep(3 * time.Second) // the control plane reads a node's cordon at most 2 s late
	sb, _, err = cp.Create(ctx, sandbox.CreateRequest{Name: "cold"})
	if err != nil || sb.Node != "hn1" || strings.Contains(sb.Reason, "warm pool") {
		t.Fatalf("create with hn0 cordoned = %+v, %v; want a fresh sandbox on hn1", sb, err)
	}
}

// TestKubeWarmClaimIdle: a warm-pool member that waited in the pool
// longer than the idle timeout, claimed through the control plane, is a
// new sandbox: it stays awake for its first idle timeout after the
// claim, and sleeps once that has passed with no call. (Its node's idle
// clock of the member dated from the member's start: the node put it to
// sleep at its first sweep after the claim, "idle", before this test.)
func TestKubeWarmClaimIdle(t *testing.T) {
	const idle = 8 * time.Second
	f := newKubeFleetOf(t, 1, fleetNode{args: []string{"--warm-pool", "small=1", "--idle-timeout", idle.String()}})
	ctx := ctxT(t)
	waitPool(t, ctx, f.nodes[0], "small", 1)
	time.Sleep(idle + time.Second) // the member is idle for longer than the timeout
	cp := f.planes[0].Client()
	sb, _, err := cp.Create(ctx, sandbox.CreateRequest{Name: "late"})
	if err != nil || !strings.Contains(sb.Reason, "warm pool") {
		t.Fatalf("create = %+v, %v; want the pool's member", sb, err)
	}
	time.Sleep(idle / 2) // two of the node's sweeps (a quarter of the timeout apart), no call
	if got, err := cp.Get(ctx, "late"); err != nil || got.Status != sandbox.StatusRunning {
		t.Fatalf("%s after the claim, without a call: %s (%s), %v; want running", idle/2, got.Status, got.Reason, err)
	}
	deadline := time.Now().Add(2 * idle)
	for {
		got, err := cp.Get(ctx, "late")
		if err == nil && got.Status == sandbox.StatusSleeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the claim, without a call: %s, %v; want it asleep", 2*idle+idle/2, got.Status, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// squatter makes, with kubectl, the Pod name in namespace ns asking for
// cpu CPUs (and a little memory and disk), which selects no node: it
// stays Pending, and its namespace's quota counts it. It returns
// kubectl's output.
func (f *kubeFleet) squatter(t *testing.T, ns, name, cpu string) (string, error) {
	t.Helper()
	pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q},"spec":{"nodeSelector":{"nowhere":"true"},"containers":[{"name":"c","image":"default","resources":{"requests":{"cpu":%q,"memory":"1Mi","ephemeral-storage":"1Mi"},"limits":{"cpu":%q,"memory":"1Mi","ephemeral-storage":"1Mi"}}}]}}`, name, ns, cpu, cpu)
	cmd := exec.Command(filepath.Join(f.cluster.Bin, "kubectl"), "--kubeconfig", f.cluster.Kubeconfig, "create", "-f", "-")
	cmd.Stdin = strings.NewReader(pod)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestKubeSleepFreesNode: on a node that offers 3.5 CPUs, three small
// sandboxes (1 CPU each) fill it and a fourth is refused by the
// scheduler; once one sleeps, its Pod asks almost nothing (resized in
// place, not ready) and the fourth is placed there; the sleeper wakes on
// its next call, with its files, and its Pod asks its size again.
func TestKubeSleepFreesNode(t *testing.T) {
	f := newKubeFleetOf(t, 1, fleetNode{args: []string{"--capacity", "cpu=3500m"}})
	ctx := ctxT(t)
	cp := f.planes[0]
	for i := range 3 {
		if _, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: fmt.Sprintf("s%d", i), Size: "small"}); err != nil {
			t.Fatalf("create s%d: %v", i, err)
		}
	}
	if _, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "s3", Size: "small"}); !sandbox.IsCode(err, sandbox.CodeUnavailable) || !strings.Contains(err.Error(), "Insufficient cpu") {
		t.Fatalf("4th create on a full node = %v; want unavailable, insufficient cpu", err)
	}
	cp.sh(ctx, "s0", "echo kept > /home/sandbox/kept.txt")
	if _, err := cp.Client().Sleep(ctx, "s0"); err != nil {
		t.Fatal(err)
	}
	ns := kube.Namespace(sandbox.SystemTenant)
	f.waitPodCPU(t, ctx, ns, "s0", 1, false)
	if _, _, err := cp.Client().Create(ctx, sandbox.CreateRequest{Name: "s3", Size: "small"}); err != nil {
		t.Fatalf("4th create once s0 sleeps: %v", err)
	}
	if got := cp.sh(ctx, "s0", "cat /home/sandbox/kept.txt"); got != "kept\n" {
		t.Fatalf("s0 after its wake = %q", got)
	}
	f.waitPodCPU(t, ctx, ns, "s0", 1000, true)
}

// waitPodCPU waits until the pod ns/name requests milli CPU and its node
// reports that resize done (its status holds milli CPU for the observed
// generation) and the pod ready or not.
func (f *kubeFleet) waitPodCPU(t *testing.T, ctx context.Context, ns, name string, milli int64, ready bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pod, err := f.k8s.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() == milli && isReady(pod) == ready &&
			pod.Status.ObservedGeneration == pod.Generation && pod.Status.ContainerStatuses[0].AllocatedResources.Cpu().MilliValue() == milli {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s 30 s on: %v, %v; want %dm CPU, ready %v", ns, name, pod.Spec.Containers, err, milli, ready)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isReady says whether pod's Ready condition is True.
func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestKubeForgedPods: Pods a Kubernetes user makes to reach sandboxes
// reach none beyond their namespace's tenant. A Pod in tenant acme's
// namespace that copies another tenant's sandbox (its name and id
// annotation), bound to that sandbox's node, is failed by the node and
// its deletion leaves the other tenant's sandbox running with its files;
// a Pod without hearth's annotation is failed too.
func TestKubeForgedPods(t *testing.T) {
	f := newKubeFleet(t, 1, "")
	ctx := ctxT(t)
	op := f.planes[0].Client()
	o := sandbox.PolicyOverrides{AgentQuota: intp(10), AgentSharePercent: intp(100)}
	victim := client.New(f.planes[0].URL, guardedTenant(t, ctx, op, "globex", smalls(40), o, "bot")["bot"], nil)
	guardedTenant(t, ctx, op, "acme", smalls(40), o, "bot")
	sb, _, err := victim.Create(ctx, sandbox.CreateRequest{Name: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if res, err := victim.Exec(ctx, "secret", sandbox.ExecRequest{Shell: "echo mine > /home/sandbox/x"}, nil, &out, &out); err != nil || res.ExitCode != 0 {
		t.Fatalf("write the victim's file: %+v, %v, %s", res, err, out.String())
	}
	// acme's namespace, which its first create would make.
	acme := kube.Namespace("acme")
	if _, err := f.k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: acme}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	forged := kube.PodFor(sb, "")
	forged.Namespace, forged.Spec.NodeName = acme, sb.Node
	plain := kube.PodFor(sb, "")
	plain.Namespace, plain.Name, plain.Spec.NodeName, plain.Annotations = acme, "plain", sb.Node, nil
	for _, pod := range []*corev1.Pod{forged, plain} {
		if _, err := f.k8s.CoreV1().Pods(acme).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", pod.Name, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := f.k8s.CoreV1().Pods(acme).Get(ctx, pod.Name, metav1.GetOptions{})
			if err == nil && got.Status.Phase == corev1.PodFailed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("forged pod %s 30 s on: %+v, %v; want Failed by the node", pod.Name, got.Status, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := f.kubectl(t, "exec", "-n", acme, pod.Name, "--", "cat", "/home/sandbox/x"); err == nil || strings.Contains(out, "mine") {
			t.Fatalf("kubectl exec in forged pod %s = %q, %v; want refused, nothing read", pod.Name, out, err)
		}
		if out, err := f.kubectl(t, "delete", "pod", "-n", acme, pod.Name, "--wait=true"); err != nil {
			t.Fatalf("delete forged pod: %v\n%s", err, out)
		}
	}
	// Each forged Pod the node failed has its Warning event; no Pod, the
	// victim's neither, has a Normal one from the node (the scheduler's
	// are the scheduler's).
	for _, pod := range []*corev1.Pod{forged, plain} {
		f.waitEvent(t, ctx, acme, pod.Name, corev1.EventTypeWarning, "ProviderCreateFailed")
	}
	for _, ns := range []string{acme, kube.Namespace("globex")} {
		evs, err := f.k8s.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=" + corev1.EventTypeNormal})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if strings.HasSuffix(ev.Source.Component, "/pod-controller") {
				t.Fatalf("Normal event %s %q in %s from %s; want none: a node records only its warnings", ev.Reason, ev.Message, ns, ev.Source.Component)
			}
		}
	}
	time.Sleep(2 * time.Second) // the node acts on the deletions
	out.Reset()
	if res, err := victim.Exec(ctx, "secret", sandbox.ExecRequest{Argv: []string{"cat", "/home/sandbox/x"}}, nil, &out, &out); err != nil || out.String() != "mine\n" {
		t.Fatalf("the victim's sandbox after the forged pods = %+v, %q, %v; want its file", res, out.String(), err)
	}
	if _, err := f.k8s.CoreV1().Pods(kube.Namespace("globex")).Get(ctx, sb.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the victim's own pod: %v", err)
	}
}
