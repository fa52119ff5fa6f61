package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hearth/hearth/sandbox"
)

// small is a small sandbox of tenant acme.
func small() sandbox.Sandbox {
	return sandbox.Sandbox{ID: "id1", Name: "agent-bot-web", Tenant: "acme", Owner: "bot", Image: "default", Resources: sandbox.Sizes()["small"]}
}

// TestPodFor: a sandbox's Pod is in its tenant's namespace, named and
// labelled as the sandbox, with its id, its size as requests and limits,
// hearth's node selector (and the pool's), hearth's toleration and
// NotReady and unreachable tolerated for ever.
func TestPodFor(t *testing.T) {
	pod := PodFor(small(), "gold")
	if pod.Namespace != "hearth-acme" || pod.Name != "agent-bot-web" || pod.Annotations[AnnotationID] != "id1" {
		t.Fatalf("pod %s/%s, annotations %v", pod.Namespace, pod.Name, pod.Annotations)
	}
	if pod.Labels[LabelTenant] != "acme" || pod.Labels[LabelAgent] != "bot" || pod.Labels[LabelSandbox] != "agent-bot-web" {
		t.Fatalf("labels %v", pod.Labels)
	}
	res := pod.Spec.Containers[0].Resources
	if res.Requests.Cpu().MilliValue() != 1000 || res.Limits.Memory().Value() != 512<<20 || res.Requests.StorageEphemeral().Value() != 2<<30 {
		t.Fatalf("resources %v", res)
	}
	if pod.Spec.NodeSelector[LabelNode] != "true" || pod.Spec.NodeSelector[LabelPool] != "gold" {
		t.Fatalf("selector %v", pod.Spec.NodeSelector)
	}
	keys := map[string]bool{}
	for _, tol := range pod.Spec.Tolerations {
		if tol.TolerationSeconds != nil {
			t.Fatalf("toleration %v is not for ever", tol)
		}
		keys[tol.Key] = true
	}
	for _, k := range []string{TaintKey, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		if !keys[k] {
			t.Errorf("no toleration of %s", k)
		}
	}
	if sel := PodFor(small(), "").Spec.NodeSelector; len(sel) != 1 {
		t.Errorf("selector without a pool = %v", sel)
	}
}

// TestRefOf: a Pod stands for a sandbox only in a tenant's namespace and
// with hearth's id.
func TestRefOf(t *testing.T) {
	pod := PodFor(small(), "")
	if ref, err := refOf(pod); err != nil || ref != (podRef{tenant: "acme", name: "agent-bot-web", id: "id1"}) {
		t.Fatalf("refOf = %+v, %v", ref, err)
	}
	pod.Namespace = "default"
	if _, err := refOf(pod); err == nil {
		t.Error("a pod outside hearth-<tenant> stands for a sandbox")
	}
	pod = PodFor(small(), "")
	delete(pod.Annotations, AnnotationID)
	if _, err := refOf(pod); err == nil {
		t.Error("a pod without hearth's id stands for a sandbox")
	}
	if err := checkNamespace("a-tenant-whose-name-is-far-too-long-for-a-namespace-label"); sandbox.ErrorCode(err) != sandbox.CodeFailedPrecondition {
		t.Errorf("checkNamespace of a long tenant = %v", err)
	}
}

// TestRefusal: the API server's quota refusal is budget_exceeded with the
// first resource, its limit, the use and the request; other refusals
// are unavailable.
func TestRefusal(t *testing.T) {
	f := NewFleet(FleetOptions{})
	pod := PodFor(small(), "")
	quota := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name,
		errors.New("exceeded quota: hearth-budget, requested: requests.cpu=1, used: requests.cpu=20, limited: requests.cpu=20"))
	e := sandbox.AsError(f.refusal(pod, quota))
	if e.Code != sandbox.CodeBudgetExceeded || e.Details["resource"] != "requests.cpu" || e.Details["limit"] != "20" || e.Details["used"] != "requests.cpu=20" {
		t.Fatalf("quota refusal = %+v", e)
	}
	other := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name, errors.New("not allowed"))
	if code := sandbox.ErrorCode(f.refusal(pod, other)); code != sandbox.CodeUnavailable {
		t.Errorf("other refusal = %s", code)
	}
}

// TestPlaced: the wait ends when the Pod runs, fails or is unschedulable.
func TestPlaced(t *testing.T) {
	sb := small()
	for _, tc := range []struct {
		status corev1.PodStatus
		done   bool
		code   sandbox.Code
	}{
		{corev1.PodStatus{Phase: corev1.PodPending}, false, ""},
		{corev1.PodStatus{Phase: corev1.PodRunning}, true, ""},
		{corev1.PodStatus{Phase: corev1.PodFailed, Message: "no sandbox"}, true, sandbox.CodeUnavailable},
		{corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes"}}}, true, sandbox.CodeUnavailable},
	} {
		done, err := placed(sb, &corev1.Pod{Status: tc.status})
		if done != tc.done || (err == nil) != (tc.code == "") || err != nil && sandbox.ErrorCode(err) != tc.code {
			t.Errorf("placed(%+v) = %v, %v", tc.status, done, err)
		}
	}
}

// TestSyncTenant: the tenant's namespace is made, its quota set to the
// budget, changed when the budget changes, and removed when there is
// none; it returns once the quota is counted.
func TestSyncTenant(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	// The fake counts a quota at once, as the controller manager does a
	// moment after it is set.
	count := func(action k8stesting.Action) (bool, runtime.Object, error) {
		q := action.(k8stesting.CreateAction).GetObject().(*corev1.ResourceQuota)
		q.Status.Hard = q.Spec.Hard
		return false, nil, nil
	}
	client.PrependReactor("create", "resourcequotas", count)
	client.PrependReactor("update", "resourcequotas", count)
	budget, limited := sandbox.Resources{MilliCPU: 20000, MemoryBytes: 10 << 30, DiskBytes: 40 << 30}, true
	f := NewFleet(FleetOptions{Client: client, Budget: func(context.Context, string) (sandbox.Resources, bool, error) {
		return budget, limited, nil
	}})
	hard := func() corev1.ResourceList {
		t.Helper()
		q, err := client.CoreV1().ResourceQuotas("hearth-acme").Get(ctx, QuotaName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return q.Spec.Hard
	}
	if err := f.SyncTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "hearth-acme", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace: %v", err)
	}
	if h := hard(); h.Name("requests.cpu", resource.DecimalSI).Value() != 20 || h.Name("requests.memory", resource.BinarySI).Value() != 10<<30 {
		t.Fatalf("quota = %v", h)
	}
	budget.MilliCPU = 4000
	if err := f.SyncTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if h := hard(); h.Name("requests.cpu", resource.DecimalSI).Value() != 4 {
		t.Fatalf("quota after the budget changed = %v", h)
	}
	limited = false
	if err := f.SyncTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if h := hard(); h != nil {
		t.Fatalf("quota of a tenant without a budget = %v", h)
	}
}

// TestBind: a bound Pod names the sandbox's node, and a node's Fleet
// (no budget) makes no namespace.
func TestBind(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	sb := small()
	sb.Node = "hn1"
	if err := NewFleet(FleetOptions{Client: client}).Bind(ctx, sb); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("hearth-acme").Get(ctx, sb.Name, metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName != "hn1" {
		t.Fatalf("bound pod = %v, %v", pod, err)
	}
	if ns, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil || len(ns.Items) != 0 {
		t.Fatalf("namespaces a node's fleet made = %v, %v", ns, err)
	}
}

// TestResizesOrder: of the calls on one Pod the last is the latest; once
// its sandbox is forgotten, none of the earlier calls is.
func TestResizesOrder(t *testing.T) {
	var r resizes
	first, lock := r.next("ns/a")
	second, again := r.next("ns/a")
	if lock != again || r.latest("ns/a", first) || !r.latest("ns/a", second) {
		t.Fatalf("after two calls: same lock %v, first latest %v, second latest %v", lock == again, r.latest("ns/a", first), r.latest("ns/a", second))
	}
	r.forget("ns/a")
	if r.latest("ns/a", second) {
		t.Fatal("a forgotten Pod's call is still the latest")
	}
	if len(r.gen) != 0 || len(r.locks) != 0 {
		t.Fatalf("kept after forget: %v, %v", r.gen, r.locks)
	}
}

// TestFits: a sandbox fits a node when its CPU and memory, with what the
// node's other Pods request now (a sleeping one's next to nothing), stay
// within the node's capacity; a node whose capacity names no resource
// bounds nothing.
func TestFits(t *testing.T) {
	p := NewProvider(nil, fake.NewSimpleClientset(), "hn0", nil)
	sb := small()
	if !p.Fits(t.Context(), sb) {
		t.Error("a sandbox on a node with no capacity set does not fit")
	}
	p.SetCapacity(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2100m"), corev1.ResourceMemory: resource.MustParse("64Gi")})
	add := func(name string, asleep bool) {
		other := small()
		other.ID, other.Name = "id-"+name, name
		pod := PodFor(other, "")
		if asleep {
			res := asleepRequests(other.Resources)
			pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: res, Limits: res}
		}
		p.pods[key(pod.Namespace, pod.Name)] = pod
	}
	p.pods[key("hearth-acme", sb.Name)] = PodFor(sb, "") // its own Pod counts not
	for i, step := range []struct {
		add    string
		asleep bool
		want   bool
	}{{"", false, true}, {"o1", false, true}, {"o2", true, true}, {"o3", false, false}} {
		if step.add != "" {
			add(step.add, step.asleep)
		}
		if got := p.Fits(t.Context(), sb); got != step.want {
			t.Errorf("step %d (added %q, asleep %v) on 2.1 CPUs: Fits = %v, want %v", i, step.add, step.asleep, got, step.want)
		}
	}
}

// TestPickNode: a moving sandbox goes to the node with the fewest Pods of
// those its Pod's selector matches that are Ready, not cordoned, not its
// own and have room for it awake (a sleeping Pod's request counts next to
// nothing); with none, unavailable.
func TestPickNode(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	sb := small()
	sb.Node = "hn0"
	selector := PodFor(sb, "").Spec.NodeSelector
	node := func(name string, ready, cordoned bool, labels map[string]string) {
		status := corev1.ConditionTrue
		if !ready {
			status = corev1.ConditionFalse
		}
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.NodeSpec{Unschedulable: cordoned},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2100m"), corev1.ResourceMemory: resource.MustParse("64Gi")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
			},
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := 0
	pod := func(on string, asleep bool) {
		pods++
		other := small()
		other.ID, other.Name = fmt.Sprintf("id-%d", pods), fmt.Sprintf("p%d", pods)
		p := PodFor(other, "")
		p.Spec.NodeName = on
		if asleep {
			res := asleepRequests(other.Resources)
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: res, Limits: res}
		}
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node("hn0", true, false, selector) // its own: never
	node("hn1", true, false, selector) // full: two awake
	pod("hn1", false)
	pod("hn1", false)
	node("hn2", true, false, selector) // room: three asleep
	pod("hn2", true)
	pod("hn2", true)
	pod("hn2", true)
	node("hn3", true, false, selector) // room: one awake, the fewest
	pod("hn3", false)
	node("hn4", true, true, selector)                        // cordoned
	node("hn5", false, false, selector)                      // not Ready
	node("hn6", true, false, map[string]string{"other": ""}) // not hearth's
	pod("", false)                                           // pending: on no node
	f := NewFleet(FleetOptions{Client: client})
	if got, err := f.PickNode(ctx, sb); err != nil || got != "hn3" {
		t.Errorf("PickNode = %q, %v; want hn3, the one with room and the fewest Pods", got, err)
	}
	pod("hn3", false) // hn3 is full now
	if got, err := f.PickNode(ctx, sb); err != nil || got != "hn2" {
		t.Errorf("PickNode with hn3 full = %q, %v; want hn2, whose Pods sleep", got, err)
	}
	pod("hn2", false)
	pod("hn2", false)
	if got, err := f.PickNode(ctx, sb); !sandbox.IsCode(err, sandbox.CodeUnavailable) {
		t.Errorf("PickNode with every node full = %q, %v; want unavailable", got, err)
	}
}

// movedSvc is lifecycle as a node's provider sees it after sandbox row
// moved to another node: StartPlaced refuses it as lifecycle does, naming
// that node.
type movedSvc struct{ row sandbox.Sandbox }

func (m movedSvc) StartPlaced(_ context.Context, tenant, name, id string) (sandbox.Sandbox, error) {
	if tenant != m.row.Tenant || name != m.row.Name || id != m.row.ID {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeNotFound, "sandbox %s/%s (id %s) is not in the store", tenant, name, id)
	}
	return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeFailedPrecondition, "sandbox %s/%s runs on node %s", tenant, name, m.row.Node).With("node", m.row.Node)
}

func (m movedSvc) Settled(context.Context, string) {}

func (m movedSvc) Get(_ context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	if p.Tenant != m.row.Tenant || ref != m.row.Name {
		return sandbox.Sandbox{}, sandbox.Errorf(sandbox.CodeNotFound, "no sandbox %q", ref)
	}
	return m.row, nil
}

func (m movedSvc) Destroy(context.Context, sandbox.Principal, string) error {
	return errors.New("a moved sandbox must not be destroyed by its old node")
}

func (m movedSvc) Exec(context.Context, sandbox.Principal, string, sandbox.ExecRequest, io.Reader, io.Writer, io.Writer) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, errors.New("no exec")
}

func (m movedSvc) Calls(context.Context, sandbox.Principal, string, sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	return nil, errors.New("no calls")
}

// TestPodFollowsMove: a node handed the Pod of a sandbox that moved to
// another node (it stopped between the move and its Pod's rebinding)
// binds a Pod of the sandbox to that node in place of its own; a forged
// Pod of another id, or of a row on no other node, moves nothing.
func TestPodFollowsMove(t *testing.T) {
	ctx := context.Background()
	sb := small()
	sb.Node, sb.Status = "hn1", sandbox.StatusSleeping
	client := fake.NewClientset()
	old := PodFor(sb, "")
	old.Spec.NodeName = "hn0"
	if _, err := client.CoreV1().Pods(old.Namespace).Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	forged := old.DeepCopy()
	forged.Annotations[AnnotationID] = "someone-else"
	p := NewProvider(movedSvc{row: sb}, client, "hn0", nil)
	if err := p.CreatePod(ctx, forged); err == nil {
		t.Error("CreatePod of a Pod of another id = nil; want its error")
	}
	if err := p.CreatePod(ctx, old); err != nil {
		t.Fatalf("CreatePod of a moved sandbox's Pod = %v; want it handed on", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pod, err := client.CoreV1().Pods(old.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
		if err == nil && pod.Spec.NodeName == "hn1" && pod.Annotations[AnnotationID] == sb.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after its old node was handed it, the Pod is %v, %v; want it bound to hn1", pod.Spec.NodeName, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	here := sb
	here.Node = "hn0" // the row names this node: nothing to follow
	p = NewProvider(movedSvc{row: here}, client, "hn0", nil)
	if _, ok := p.movedAway(ctx, podRef{tenant: sb.Tenant, name: sb.Name, id: sb.ID}, sandbox.Errorf(sandbox.CodeFailedPrecondition, "x")); ok {
		t.Error("a row on this node counts as moved away")
	}
}

// runningSvc is lifecycle as a node's provider sees it for a sandbox the
// node runs already: StartPlaced answers its row, and Settled returns
// once settle is closed.
type runningSvc struct {
	movedSvc
	settle chan struct{}
}

func (r runningSvc) StartPlaced(context.Context, string, string, string) (sandbox.Sandbox, error) {
	return r.row, nil
}

func (r runningSvc) Settled(context.Context, string) { <-r.settle }

// TestBoundPodReportedSettled: the Pod Fleet.Bind made for a sandbox its
// node runs already (a claim) is reported Running only once the sandbox
// has settled, after its caller's first commands; a Pod Place made is
// reported Running as soon as its sandbox runs.
func TestBoundPodReportedSettled(t *testing.T) {
	ctx := context.Background()
	sb := small()
	sb.Node, sb.Status = "hn0", sandbox.StatusRunning
	client := fake.NewClientset()
	if err := NewFleet(FleetOptions{Client: client}).Bind(ctx, sb); err != nil {
		t.Fatal(err)
	}
	bound, err := client.CoreV1().Pods(Namespace(sb.Tenant)).Get(ctx, sb.Name, metav1.GetOptions{})
	if err != nil || bound.Annotations[AnnotationBound] != "true" {
		t.Fatalf("the bound Pod = %v, %v; want it marked bound", bound, err)
	}
	svc := runningSvc{movedSvc{row: sb}, make(chan struct{})}
	p := NewProvider(svc, client, "hn0", nil)
	running := make(chan string, 4)
	p.NotifyPods(ctx, func(pod *corev1.Pod) {
		if cs := pod.Status.ContainerStatuses; pod.Status.Phase == corev1.PodRunning && len(cs) == 1 && cs[0].State.Running != nil {
			running <- pod.Name
		}
	})
	if err := p.CreatePod(ctx, bound); err != nil {
		t.Fatal(err)
	}
	// A second claim's sandbox falls asleep before it settles: the sleep's
	// report is later than the waiting one, which is dropped.
	nap := bound.DeepCopy()
	nap.Name, nap.UID = "nap", "uid-nap"
	if err := p.CreatePod(ctx, nap); err != nil {
		t.Fatal(err)
	}
	p.report(nap, asleepStatus(nap, sb))
	placed := PodFor(sb, "")
	placed.Name, placed.UID = "placed", "uid-placed"
	if err := p.CreatePod(ctx, placed); err != nil {
		t.Fatal(err)
	}
	if got := <-running; got != "placed" {
		t.Fatalf("first Pod reported Running = %s, want the placed one (the bound one waits for its sandbox to settle)", got)
	}
	select {
	case got := <-running:
		t.Fatalf("Pod %s reported Running before its sandbox settled", got)
	case <-time.After(100 * time.Millisecond):
	}
	close(svc.settle)
	select {
	case got := <-running:
		if got != sb.Name {
			t.Fatalf("Pod reported Running once the sandbox settled = %s, want %s", got, sb.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the bound Pod was not reported Running 10 s after its sandbox settled")
	}
	select {
	case got := <-running:
		t.Fatalf("Pod %s reported Running after its sandbox fell asleep", got)
	case <-time.After(100 * time.Millisecond):
	}
	if got, err := p.GetPod(ctx, nap.Namespace, nap.Name); err != nil || got.Status.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("the asleep claim's Pod as the node reports it = %+v, %v; want its container waiting, asleep", got.Status, err)
	}
}

// TestFleetWatch: before its watch of the Nodes has synced, Open reads
// the Node; after, it answers from the watch, with no call to the API
// server: a hearth Node open, then closed once cordoned, a Node without
// hearth's label or none at all closed; when its context ends, Open reads
// the Node again.
func TestFleetWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := func(name string, hearth bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if hearth {
			n.Labels[LabelNode] = "true"
		}
		return n
	}
	client := fake.NewClientset(node("hn0", true), node("other", false))
	f := NewFleet(FleetOptions{Client: client})
	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
				n++
			}
		}
		return n
	}
	if !f.Open(ctx, "hn0") || gets() != 1 {
		t.Fatalf("Open before the watch: %d gets; want the Node read once", gets())
	}
	watched := make(chan struct{})
	go func() { f.Watch(ctx); close(watched) }()
	eventually(t, "the watch to sync", func() bool { _, known := f.watchedOpen("hn0"); return known })
	before := gets()
	if !f.Open(ctx, "hn0") || f.Open(ctx, "other") || f.Open(ctx, "gone") {
		t.Fatal("from the watch: want hn0 open, a Node without hearth's label and a missing one closed")
	}
	cordoned := node("hn0", true)
	cordoned.Spec.Unschedulable = true
	if _, err := client.CoreV1().Nodes().Update(ctx, cordoned, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cordon to close hn0", func() bool { return !f.Open(ctx, "hn0") })
	if gets() != before {
		t.Errorf("Open from the watch read Nodes %d times", gets()-before)
	}
	cancel()
	<-watched
	if _, known := f.watchedOpen("hn0"); known {
		t.Error("Open still answers from a watch that has ended")
	}
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFleetWatchTenant: once the Fleet watches, a create's check of its
// tenant's namespace and quota asks the API server nothing while the
// watched view shows them at the budget, and makes them right when it
// shows them out of step: a changed budget, a quota deleted behind its
// back.
func TestFleetWatchTenant(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	count := func(action k8stesting.Action) (bool, runtime.Object, error) {
		var q *corev1.ResourceQuota
		switch a := action.(type) {
		case k8stesting.CreateAction:
			q = a.GetObject().(*corev1.ResourceQuota)
		case k8stesting.UpdateAction:
			q = a.GetObject().(*corev1.ResourceQuota)
		}
		q.Status.Hard = q.Spec.Hard
		return false, nil, nil
	}
	client.PrependReactor("create", "resourcequotas", count)
	client.PrependReactor("update", "resourcequotas", count)
	budget := sandbox.Resources{MilliCPU: 20000, MemoryBytes: 10 << 30, DiskBytes: 40 << 30}
	f := NewFleet(FleetOptions{Client: client, Budget: func(context.Context, string) (sandbox.Resources, bool, error) {
		return budget, true, nil
	}})
	go f.Watch(ctx)
	eventually(t, "the watch to sync", func() bool { return f.view() != nil })
	// ensure runs the check as a create after tenantFresh does, and
	// returns how many calls it made to the API server.
	ensure := func() int {
		t.Helper()
		f.mu.Lock()
		delete(f.checked, "acme")
		f.mu.Unlock()
		before := len(client.Actions())
		if err := f.ensureTenant(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		return len(client.Actions()) - before
	}
	cpu := func() int64 {
		q, err := client.CoreV1().ResourceQuotas("hearth-acme").Get(ctx, QuotaName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return q.Spec.Hard.Name("requests.cpu", resource.DecimalSI).Value()
	}
	if calls := ensure(); calls == 0 || cpu() != 20 {
		t.Fatalf("first check: %d calls, quota cpu %d; want the namespace and quota made", calls, cpu())
	}
	eventually(t, "the watch to see them", func() bool { return f.tenantInStep(ctx, "acme") })
	if calls := ensure(); calls != 0 {
		t.Errorf("check with the view in step: %d calls to the API server; want none", calls)
	}
	budget.MilliCPU = 4000
	if calls := ensure(); calls == 0 || cpu() != 4 {
		t.Errorf("check after the budget changed: %d calls, quota cpu %d; want it set to 4", calls, cpu())
	}
	eventually(t, "the watch to see the change", func() bool { return f.tenantInStep(ctx, "acme") })
	if err := client.CoreV1().ResourceQuotas("hearth-acme").Delete(ctx, QuotaName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watch to see the quota go", func() bool { return !f.tenantInStep(ctx, "acme") })
	if calls := ensure(); calls == 0 || cpu() != 4 {
		t.Errorf("check after the quota was deleted: %d calls, quota cpu %d; want it made again", calls, cpu())
	}
}
