package e2e_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/kube"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/postgres"
	"github.com/hearth/hearth/testutil/benchstat"
	"github.com/hearth/hearth/testutil/kubetest"
	"github.com/hearth/hearth/testutil/pgtest"
)

// The simulated fleet of TestKubeScale.
const (
	simNodes     = 50 // sim00 … sim49
	simGoldNodes = 10 // sim00 … sim09, in pool "gold"
	simPool      = "gold"
	simPods      = 200 // each node's pods capacity
	// scaleWidth is how many creates are in flight at once.
	scaleWidth = 32
)

// simAwakePercent is how much of TestKubeScale's sandboxes the fleet's
// CPU holds awake: the rest fit only because most of them sleep.
const simAwakePercent = 80

// simCapacity is what each simulated node offers to a fleet of sandboxes
// small sandboxes: simAwakePercent of their CPU, spread over the nodes.
func simCapacity(sandboxes int) corev1.ResourceList {
	small := sandbox.Sizes()[sandbox.DefaultSize].MilliCPU
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(int64(sandboxes)*small*simAwakePercent/100/simNodes, resource.DecimalSI),
		corev1.ResourceMemory:           resource.MustParse("256Gi"),
		corev1.ResourcePods:             *resource.NewQuantity(simPods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("2Ti"),
	}
}

// scaleTenants are TestKubeScale's tenants: "gold", pinned to the pool
// of that name, and nine unpinned ones; names no other test uses, since
// the cluster and its namespaces are shared by the whole test binary.
func scaleTenants() []string {
	out := []string{simPool}
	for i := range 9 {
		out = append(out, fmt.Sprintf("scale%d", i))
	}
	return out
}

// simNode is a simulated hearth node's side of its kube.Provider, over
// the shared store: a Pod bound to it is "started" by taking its
// sandbox's row over, as lifecycle.Sandboxes.StartPlaced does, and no
// runtime runs anything.
type simNode struct {
	store    store.Store
	name     string
	provider *kube.Provider
}

var _ kube.Sandboxes = (*simNode)(nil)

// StartPlaced takes the creating row of tenant's sandbox name over: it
// names this node and runs. A row of another id is not_found; a row this
// node holds already is returned as it is.
func (n *simNode) StartPlaced(ctx context.Context, tenant, name, id string) (sandbox.Sandbox, error) {
	sb, err := n.store.Sandboxes().Get(ctx, tenant, name)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && sb.ID != id:
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeNotFound, "sandbox %s/%s (id %s) is not in the store", tenant, name, id)
	case err != nil:
		return sandbox.Sandbox{}, err
	case sb.Node == n.name:
		return sb, nil // a repeated call
	}
	sb.Node, sb.Status, sb.Reason, sb.UpdatedAt = n.name, sandbox.StatusRunning, "created", time.Now().UTC()
	return sb, n.store.Sandboxes().Update(ctx, sb)
}

// Settled returns at once: nothing runs in a simulated sandbox.
func (n *simNode) Settled(context.Context, string) {}

// Get is the row of p's tenant's sandbox ref.
func (n *simNode) Get(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	return n.store.Sandboxes().Get(ctx, p.Tenant, ref)
}

// Destroy removes the row of p's tenant's sandbox ref.
func (n *simNode) Destroy(ctx context.Context, p sandbox.Principal, ref string) error {
	sb, err := n.store.Sandboxes().Get(ctx, p.Tenant, ref)
	if err != nil {
		return err
	}
	return n.store.Sandboxes().Delete(ctx, sb.ID)
}

// sleep puts the row of tenant's sandbox name to sleep, as a real node's
// lifecycle does, and tells the provider (lifecycle's Options.Asleep),
// which resizes its Pod to its asleep requests in the background.
func (n *simNode) sleep(ctx context.Context, tenant, name string) error {
	sb, err := n.store.Sandboxes().Get(ctx, tenant, name)
	if err != nil {
		return err
	}
	sb.Status, sb.Reason, sb.UpdatedAt = sandbox.StatusSleeping, "asked to sleep", time.Now().UTC()
	if err := n.store.Sandboxes().Update(ctx, sb); err != nil {
		return err
	}
	n.provider.Asleep(ctx, sb, true)
	return nil
}

// Exec is refused: a simulated node runs no command.
func (n *simNode) Exec(context.Context, sandbox.Principal, string, sandbox.ExecRequest, io.Reader, io.Writer, io.Writer) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, sandbox.Errorf(sandbox.CodeFailedPrecondition, "simulated node %s runs no command", n.name)
}

// Calls is refused: a simulated node keeps no audit log.
func (n *simNode) Calls(context.Context, sandbox.Principal, string, sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	return nil, sandbox.Errorf(sandbox.CodeFailedPrecondition, "simulated node %s keeps no audit log", n.name)
}

// simFleet is a real hearth control plane on the test binary's
// Kubernetes cluster whose nodes are simulated in the test process.
type simFleet struct {
	cluster *kubetest.Cluster
	k8s     kubernetes.Interface
	plane   *daemon
	store   *postgres.DB
	nodes   []string
	sims    map[string]*simNode
	gold    map[string]bool // the nodes of pool "gold"
}

// newSimFleet starts the cluster with kube-scheduler, a Postgres store,
// one control plane (cp0) and the simulated nodes (simNode through
// kube.RunNode, on a client with a raised rate limit), each offering
// simCapacity(sandboxes), and waits until
// every Node is Ready and schedulable. Its cleanup stops the nodes and deletes their
// Nodes, the Pods of tenants' namespaces and their rows, so that nothing
// of the fleet attracts or holds another test's Pods.
func newSimFleet(t *testing.T, tenants []string, sandboxes int) *simFleet {
	t.Helper()
	requireDaemon(t)
	c := kubetest.Start(t, kubetest.Options{Scheduler: true})
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// client-go's default rate (5 requests a second) would pace the
	// fleet's pod status updates and leases, and the cleanup's deletes.
	cfg.QPS, cfg.Burst = 2000, 4000
	f := &simFleet{cluster: c, k8s: kubernetes.NewForConfigOrDie(cfg), gold: map[string]bool{}, sims: map[string]*simNode{}}
	dsn := pgtest.NewDatabase(t)
	key := filepath.Join(t.TempDir(), "hearth.key")
	if out, err := exec.Command(bins.Hearth, "key", "create", key).CombinedOutput(); err != nil {
		t.Fatalf("hearth key create: %v\n%s", err, out)
	}
	rt := bins.Runtimes[0]
	if slices.Contains(bins.Runtimes, "runsc") {
		rt = "runsc"
	}
	f.plane = newDaemon(t, rt, "--store", dsn, "--key-file", key, "--node", "cp0", "--kubeconfig", c.Kubeconfig)
	if f.store, err = postgres.Open(t.Context(), dsn, nil); err != nil {
		t.Fatalf("open the store: %v", err)
	}
	t.Cleanup(func() { f.store.Close() })
	simDefaultImage(t, f.store)
	for i := range simNodes {
		f.nodes = append(f.nodes, fmt.Sprintf("sim%02d", i))
		if i < simGoldNodes {
			f.gold[f.nodes[i]] = true
		}
	}
	simCfg := *cfg
	simCfg.UserAgent = "hearth-sim"
	simClient := kubernetes.NewForConfigOrDie(&simCfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { f.tearDown(t, cancel, &wg, tenants) })
	ready := make(chan string, simNodes)
	for i, name := range f.nodes {
		pool := ""
		if f.gold[name] {
			pool = simPool
		}
		sim := &simNode{store: f.store, name: name}
		sim.provider = kube.NewProvider(sim, simClient, name, nil)
		f.sims[name] = sim
		wg.Go(func() {
			err := kube.RunNode(ctx, kube.NodeOptions{
				Client: simClient, Name: name, Pool: pool, Runtime: "runsc", Isolation: "gvisor",
				Capacity: simCapacity(sandboxes), Address: "127.0.0.1", Version: "sim",
				Provider: sim.provider,
			}, func() { ready <- name })
			if err != nil && ctx.Err() == nil {
				t.Errorf("simulated node %d (%s) stopped: %v", i, name, err)
			}
		})
	}
	f.waitReady(t, ready)
	return f
}

// simDefaultImage records the default image in st, as a real node does
// when it starts (lifecycle.Images.SetDefault): a control plane admits a
// create only of an image its store holds. The simulated nodes hold no
// layers, so its digest and layer name nothing.
func simDefaultImage(t *testing.T, st store.Store) {
	t.Helper()
	digest := "sha256:" + strings.Repeat("5", 64)
	err := st.Images().Put(t.Context(), sandbox.Image{
		Name: "default", Tenant: sandbox.SystemTenant, Digest: digest, Source: sandbox.ImageSourceDefault,
		Public: true, Layers: []string{"img-" + digest}, CreatedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatalf("record the default image: %v", err)
	}
}

// waitReady waits until every simulated Node has said it is Ready and
// the API server shows them all schedulable (see schedulable).
func (f *simFleet) waitReady(t *testing.T, ready <-chan string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for range simNodes {
		select {
		case <-ready:
		case <-deadline:
			t.Fatalf("the %d simulated nodes are not all Ready after 60 s", simNodes)
		}
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n, err := f.schedulable(t.Context())
		if err == nil && n == simNodes {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d of %d simulated Nodes are schedulable 30 s after they registered: %v", n, simNodes, err)
		}
	}
}

// schedulable counts the simulated Nodes that are Ready and carry no
// taint but hearth's own: a Node registers with the not-ready taint,
// which the node lifecycle controller lifts only once it sees the Node
// Ready, and until then kube-scheduler refuses it every sandbox Pod.
func (f *simFleet) schedulable(ctx context.Context) (int, error) {
	list, err := f.k8s.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kube.LabelNode + "=true"})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, node := range list.Items {
		if slices.Contains(f.nodes, node.Name) && schedulable(&node) {
			n++
		}
	}
	return n, nil
}

// tearDown stops the simulated nodes (cancel, then waits for wg) and
// removes what they leave: the Pods of the tenants' namespaces, the
// Nodes, and the sandboxes' rows (the control plane's own cleanup would
// otherwise try each on a node that is gone). A simulated Node that
// remains is an error: its label would draw the next test's Pods.
func (f *simFleet) tearDown(t *testing.T, cancel func(), wg *sync.WaitGroup, tenants []string) {
	cancel()
	wg.Wait()
	ctx, done := context.WithTimeout(context.Background(), time.Minute)
	defer done()
	f.deletePods(t, ctx, tenants)
	f.deleteNodes(t, ctx)
	f.deleteRows(t, ctx, tenants)
}

// deletePods deletes the Pods of the tenants' namespaces at once (grace
// period 0: no kubelet will finish them), a namespace at a time in
// parallel.
func (f *simFleet) deletePods(t *testing.T, ctx context.Context, tenants []string) {
	zero := int64(0)
	now := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	var wg sync.WaitGroup
	for _, tn := range tenants {
		ns := kube.Namespace(tn)
		wg.Go(func() {
			if err := f.k8s.CoreV1().Pods(ns).DeleteCollection(ctx, now, metav1.ListOptions{}); err != nil {
				t.Errorf("delete the pods of %s: %v", ns, err)
			}
		})
	}
	wg.Wait()
}

// deleteNodes deletes the simulated Nodes and checks that none remains.
func (f *simFleet) deleteNodes(t *testing.T, ctx context.Context) {
	for _, name := range f.nodes {
		if err := f.k8s.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete simulated node %s: %v", name, err)
		}
	}
	list, err := f.k8s.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("list the nodes after the simulated ones were deleted: %v", err)
		return
	}
	for _, n := range list.Items {
		if slices.Contains(f.nodes, n.Name) {
			t.Errorf("simulated node %s is still registered after its deletion", n.Name)
		}
	}
}

// deleteRows deletes the tenants' sandboxes' rows from the store.
func (f *simFleet) deleteRows(t *testing.T, ctx context.Context, tenants []string) {
	for _, tn := range tenants {
		rows, err := f.store.Sandboxes().List(ctx, store.Filter{Tenant: tn})
		if err != nil {
			t.Errorf("list the rows of %s: %v", tn, err)
			continue
		}
		for _, sb := range rows {
			if err := f.store.Sandboxes().Delete(ctx, sb.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Errorf("delete the row of %s/%s: %v", tn, sb.Name, err)
			}
		}
	}
}

// scaleCall is one create of TestKubeScale.
type scaleCall struct {
	tenant, name string
	sb           sandbox.Sandbox // as created: its name carries the agent's prefix
	err          error
	took         time.Duration
	asleep       bool // put to sleep after its wave
}

// TestKubeScale, simulated: a control plane on Kubernetes with 50
// hearth nodes simulated in the test process (10 in pool "gold"), and
// 1,000 creates of small sandboxes (200 with -short) by ten tenants,
// whose budgets hold exactly theirs, 32 at once, in two waves; after
// each wave nine of its ten sandboxes sleep. The fleet's CPU holds only
// simAwakePercent of the sandboxes awake, so the second wave is placed
// only if the sleeping Pods' requests were given back. Every create
// succeeds; every sandbox's Pod is Running on the node its row names,
// asleep ones requesting their asleep size; every sandbox of tenant
// "gold", pinned to that pool, is on a gold node; one more create in any
// tenant is budget_exceeded; no node holds more Pods or CPU than its
// capacity. It reports the creates' rate and latencies, the control
// plane's memory before and after, and the API server's request rate.
func TestKubeScale(t *testing.T) {
	perTenant := 100
	if testing.Short() {
		perTenant = 20
	}
	tenants := scaleTenants()
	f := newSimFleet(t, tenants, perTenant*len(tenants))
	ctx := ctxT(t)
	op := f.plane.Client()
	hc := &http.Client{Transport: wideTransport(scaleWidth)}
	o := sandbox.PolicyOverrides{AgentQuota: intp(perTenant), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(10 * perTenant)}
	// bot fills its tenant's budget, which is also its quota; other, with
	// room in its own quota, finds the budget full.
	bots, others := map[string]*client.Client{}, map[string]*client.Client{}
	for _, tn := range tenants {
		toks := guardedTenant(t, ctx, op, tn, smalls(int64(4*perTenant)), o, "bot", "other")
		bots[tn] = client.New(f.plane.URL, toks["bot"], &client.Options{HTTPClient: hc})
		others[tn] = client.New(f.plane.URL, toks["other"], nil)
	}
	pool := simPool
	if _, err := op.Admin().UpdateTenant(ctx, simPool, sandbox.TenantUpdate{Pool: &pool}); err != nil {
		t.Fatalf("pin tenant %s to pool %s: %v", simPool, simPool, err)
	}

	rssBefore, _ := memoryOf(t, f.plane.Cmd.Process.Pid)
	reqBefore := f.apiRequests(t)
	var waves [2][]*scaleCall
	for i := range perTenant {
		for _, tn := range tenants {
			w := 2 * i / perTenant
			waves[w] = append(waves[w], &scaleCall{tenant: tn, name: fmt.Sprintf("s%03d", i), asleep: i%10 != 0})
		}
	}
	began := time.Now()
	var wall, slept time.Duration
	for _, wave := range waves {
		wall += fire(ctx, wave, bots)
		slept += f.sleepMost(t, ctx, wave)
	}
	calls := append(waves[0], waves[1]...)
	reqAfter := f.apiRequests(t)
	rssAfter, rssPeak := memoryOf(t, f.plane.Cmd.Process.Pid)
	f.reportCreates(t, calls, wall, slept)
	t.Logf("control plane memory: VmRSS %d MiB before the creates, %d MiB after (VmHWM %d MiB)", rssBefore>>10, rssAfter>>10, rssPeak>>10)
	reportRequests(t, reqBefore, reqAfter, time.Since(began))

	f.checkPlacement(t, ctx, tenants, calls)
	for _, tn := range tenants {
		_, _, err := others[tn].Create(ctx, sandbox.CreateRequest{Name: "one-more", Size: "small"})
		if !sandbox.IsCode(err, sandbox.CodeBudgetExceeded) {
			t.Errorf("create %d+1 in tenant %s = %v; want budget_exceeded", perTenant, tn, err)
		}
	}
}

// reportCreates logs the creates' rate and latencies over wall, and how
// long the sleeps took; it fails the test now if any create failed.
func (f *simFleet) reportCreates(t *testing.T, calls []*scaleCall, wall, slept time.Duration) {
	t.Helper()
	var took []time.Duration
	failed := map[string]int{}
	for _, c := range calls {
		took = append(took, c.took)
		if c.err != nil {
			failed[string(sandbox.ErrorCode(c.err))]++
			if failed[string(sandbox.ErrorCode(c.err))] <= 3 {
				t.Errorf("Create(%s) in tenant %s = %v; want it created", c.name, c.tenant, c.err)
			}
		}
	}
	t.Logf("%d creates over %d simulated nodes, %d at once, in two waves: %s wall, %.1f creates/s; latency p50 %.0f ms, p99 %.0f ms, max %.0f ms; failed %v; nine in ten slept after their wave, their Pods resized in %s",
		len(calls), simNodes, scaleWidth, wall.Round(time.Millisecond), float64(len(calls))/wall.Seconds(),
		benchstat.Percentile(took, 0.5), benchstat.Percentile(took, 0.99), benchstat.Percentile(took, 1), failed, slept.Round(time.Millisecond))
	if len(failed) > 0 {
		t.FailNow()
	}
}

// sleepMost puts the sandboxes of calls marked asleep to sleep on their
// simulated nodes, scaleWidth at a time, and waits until each one's Pod
// requests its asleep CPU and reports it allocated, which is what
// kube-scheduler counts; it returns how long that took.
func (f *simFleet) sleepMost(t *testing.T, ctx context.Context, calls []*scaleCall) time.Duration {
	t.Helper()
	began := time.Now()
	work := make(chan *scaleCall)
	var wg sync.WaitGroup
	for range scaleWidth {
		wg.Go(func() {
			for c := range work {
				sb, err := f.store.Sandboxes().Get(ctx, c.tenant, c.sb.Name)
				if err == nil && f.sims[sb.Node] == nil {
					err = fmt.Errorf("its row names node %q, not a simulated one", sb.Node)
				}
				if err == nil {
					err = f.sims[sb.Node].sleep(ctx, c.tenant, c.sb.Name)
				}
				if err != nil {
					t.Errorf("sleep %s/%s: %v", c.tenant, c.sb.Name, err)
				}
			}
		})
	}
	for _, c := range calls {
		if c.asleep && c.err == nil {
			work <- c
		}
	}
	close(work)
	wg.Wait()
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		awake, err := f.resizing(ctx, calls)
		if err == nil && len(awake) == 0 {
			return time.Since(began)
		}
		if time.Now().After(end) {
			t.Fatalf("2 minutes after the sleeps, %d Pods still hold their awake CPU (%v), e.g. %v", len(awake), err, awake[:min(3, len(awake))])
		}
	}
}

// resizing lists the Pods of calls marked asleep, and created, that do
// not yet both request and report allocated their asleep CPU. A failed
// create has no Pod to wait for: reportCreates fails the test with its
// error.
func (f *simFleet) resizing(ctx context.Context, calls []*scaleCall) ([]string, error) {
	pods, listed := map[string]corev1.Pod{}, map[string]bool{}
	for _, c := range calls {
		ns := kube.Namespace(c.tenant)
		if listed[ns] {
			continue
		}
		listed[ns] = true
		list, err := f.k8s.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, p := range list.Items {
			pods[ns+"/"+p.Name] = p
		}
	}
	var out []string
	for _, c := range calls {
		k := kube.Namespace(c.tenant) + "/" + c.sb.Name
		if c.asleep && c.err == nil && !resizedAsleep(pods[k]) {
			out = append(out, k)
		}
	}
	return out, nil
}

// resizedAsleep says whether pod requests the CPU of an asleep sandbox
// and its status reports that allocated.
func resizedAsleep(pod corev1.Pod) bool {
	asleep := func(l corev1.ResourceList) bool { return l != nil && l.Cpu().MilliValue() <= 1 }
	return len(pod.Spec.Containers) == 1 && asleep(pod.Spec.Containers[0].Resources.Requests) &&
		len(pod.Status.ContainerStatuses) == 1 && asleep(pod.Status.ContainerStatuses[0].AllocatedResources)
}

// wideTransport is an HTTP transport that keeps width connections to a
// host open, where the default keeps two: a burst of creates does not
// open a connection per call.
func wideTransport(width int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = width
	return tr
}

// fire makes calls through each tenant's client, scaleWidth at a time
// in the order given, and returns how long they took in all.
func fire(ctx context.Context, calls []*scaleCall, bots map[string]*client.Client) time.Duration {
	work := make(chan *scaleCall)
	var wg sync.WaitGroup
	for range scaleWidth {
		wg.Go(func() {
			for c := range work {
				began := time.Now()
				c.sb, _, c.err = bots[c.tenant].Create(ctx, sandbox.CreateRequest{Name: c.name, Size: "small"})
				c.took = time.Since(began)
			}
		})
	}
	began := time.Now()
	for _, c := range calls {
		work <- c
	}
	close(work)
	wg.Wait()
	return time.Since(began)
}

// checkPlacement checks each tenant's Pods against its rows and calls:
// one of each per call, every Pod Running on the simulated node its row
// names, each row running or, if its call was put to sleep, sleeping,
// with its Pod at its asleep size; the gold tenant's Pods on gold nodes;
// and that no simulated node holds more Pods (any namespace's) or CPU
// requests than its capacity, though the sandboxes' full sizes are more
// than the whole fleet's CPU.
func (f *simFleet) checkPlacement(t *testing.T, ctx context.Context, tenants []string, calls []*scaleCall) {
	t.Helper()
	want := map[string]*scaleCall{} // "tenant/name" → its call
	for _, c := range calls {
		want[c.tenant+"/"+c.sb.Name] = c
	}
	onGold, full := 0, int64(0)
	for _, tn := range tenants {
		rows, err := f.store.Sandboxes().List(ctx, store.Filter{Tenant: tn})
		if err != nil {
			t.Fatalf("the rows of %s: %v", tn, err)
		}
		pods, err := f.k8s.CoreV1().Pods(kube.Namespace(tn)).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("the pods of %s: %v", tn, err)
		}
		if n := len(calls) / len(tenants); len(rows) != n || len(pods.Items) != n {
			t.Errorf("tenant %s has %d rows and %d pods; want %d of each", tn, len(rows), len(pods.Items), n)
		}
		node := map[string]string{} // sandbox name → its row's node
		for _, sb := range rows {
			node[sb.Name] = sb.Node
			full += sb.Resources.MilliCPU
			status := sandbox.StatusRunning
			if c := want[tn+"/"+sb.Name]; c != nil && c.asleep {
				status = sandbox.StatusSleeping
			}
			if sb.Status != status || !slices.Contains(f.nodes, sb.Node) {
				t.Errorf("row %s/%s is %s on %q; want %s on a simulated node", tn, sb.Name, sb.Status, sb.Node, status)
			}
		}
		for _, pod := range pods.Items {
			on := pod.Spec.NodeName
			if on != node[pod.Name] || pod.Status.Phase != corev1.PodRunning {
				t.Errorf("pod %s/%s is %s on %q; its row names node %q", pod.Namespace, pod.Name, pod.Status.Phase, on, node[pod.Name])
			}
			if c := want[tn+"/"+pod.Name]; c != nil && c.asleep != resizedAsleep(pod) {
				t.Errorf("pod %s/%s requests %v; its sandbox asleep: %v", pod.Namespace, pod.Name, pod.Spec.Containers[0].Resources.Requests, c.asleep)
			}
			if tn == simPool && !f.gold[on] {
				t.Errorf("pod %s/%s of the tenant pinned to pool %s is on %s, not a gold node", pod.Namespace, pod.Name, simPool, on)
			}
			if f.gold[on] {
				onGold++
			}
		}
	}
	least, most := f.checkNodes(t, ctx)
	fleet := simCapacity(len(calls))[corev1.ResourceCPU]
	if fleet.MilliValue()*simNodes >= full {
		t.Errorf("the sandboxes' full sizes (%d mCPU) fit the fleet's CPU (%d mCPU) awake: the test shows nothing of sleep", full, fleet.MilliValue()*simNodes)
	}
	t.Logf("pods per simulated node: %d to %d; %d on the %d gold nodes (%d of them the gold tenant's); the sandboxes' full sizes %.1f× the fleet's CPU",
		least, most, onGold, simGoldNodes, len(calls)/len(tenants), float64(full)/float64(fleet.MilliValue()*simNodes))
}

// checkNodes checks that no simulated node holds more Pods (any
// namespace's) or CPU requests than its capacity, and returns the fewest
// and most Pods a node holds.
func (f *simFleet) checkNodes(t *testing.T, ctx context.Context) (least, most int) {
	t.Helper()
	all, err := f.k8s.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list every pod: %v", err)
	}
	held, cpu := map[string]int{}, map[string]int64{}
	for _, pod := range all.Items {
		held[pod.Spec.NodeName]++
		for _, c := range pod.Spec.Containers {
			cpu[pod.Spec.NodeName] += c.Resources.Requests.Cpu().MilliValue()
		}
	}
	nodes, err := f.k8s.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kube.LabelNode + "=true"})
	if err != nil {
		t.Fatalf("list the nodes: %v", err)
	}
	least = len(all.Items)
	for _, n := range nodes.Items {
		if !slices.Contains(f.nodes, n.Name) {
			continue
		}
		least, most = min(least, held[n.Name]), max(most, held[n.Name])
		if held[n.Name] > simPods {
			t.Errorf("node %s holds %d pods, over its capacity of %d", n.Name, held[n.Name], simPods)
		}
		if c := n.Status.Allocatable.Cpu().MilliValue(); cpu[n.Name] > c {
			t.Errorf("node %s's pods request %d mCPU, over its %d", n.Name, cpu[n.Name], c)
		}
	}
	return least, most
}

// requestLine is one sample of the API server's apiserver_request_total.
var requestLine = regexp.MustCompile(`^apiserver_request_total\{(.*)\} (\S+)$`)

// apiRequests is the API server's apiserver_request_total, by "VERB
// resource[/subresource]", read from its /metrics as the admin.
func (f *simFleet) apiRequests(t *testing.T) map[string]float64 {
	t.Helper()
	hc, err := f.cluster.Client()
	if err != nil {
		t.Fatalf("the API server's admin client: %v", err)
	}
	resp, err := hc.Get(f.cluster.URL + "/metrics")
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the API server's metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := requestLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("apiserver_request_total sample %q: %v", sc.Text(), err)
		}
		l := labels(m[1])
		what := l["resource"]
		if l["subresource"] != "" {
			what += "/" + l["subresource"]
		}
		out[l["verb"]+" "+what] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	return out
}

// labelPair is one label of a Prometheus sample.
var labelPair = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// labels are the labels of a Prometheus sample's braces.
func labels(s string) map[string]string {
	out := map[string]string{}
	for _, m := range labelPair.FindAllStringSubmatch(s, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// reportRequests logs the API server's requests between before and
// after over wall: in all, by verb, the busiest kinds, and kube-
// scheduler's bindings.
func reportRequests(t *testing.T, before, after map[string]float64, wall time.Duration) {
	t.Helper()
	type count struct {
		what string
		n    float64
	}
	var kinds []count
	verbs := map[string]float64{}
	total := 0.0
	for k, v := range after {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		total += d
		verb, _, _ := strings.Cut(k, " ")
		verbs[verb] += d
		kinds = append(kinds, count{k, d})
	}
	slices.SortFunc(kinds, func(a, b count) int { return cmp.Compare(b.n, a.n) })
	var byVerb, busiest []string
	for _, v := range slices.Sorted(maps.Keys(verbs)) {
		byVerb = append(byVerb, fmt.Sprintf("%s %.0f", v, verbs[v]))
	}
	for _, k := range kinds[:min(8, len(kinds))] {
		busiest = append(busiest, fmt.Sprintf("%s %.0f", k.what, k.n))
	}
	bound := after["POST pods/binding"] - before["POST pods/binding"]
	t.Logf("API server: %.0f requests during the creates and sleeps, %.0f/s; by verb: %s; busiest: %s; kube-scheduler bound %.0f pods, %.1f/s",
		total, total/wall.Seconds(), strings.Join(byVerb, ", "), strings.Join(busiest, ", "), bound, bound/wall.Seconds())
}

// memoryOf is process pid's resident set (VmRSS) and its peak (VmHWM),
// in KiB.
func memoryOf(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("the control plane's memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			peak = n
		}
	}
	return rss, peak
}
