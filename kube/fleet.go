package kube

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// FleetOptions configure a Fleet.
type FleetOptions struct {
	// Client reaches the cluster's API server.
	Client kubernetes.Interface
	// Budget is a tenant's budget (lifecycle.Tenancy.Budget), which its
	// namespace's ResourceQuota is kept at. Without it the Fleet makes no
	// namespace and sets no quota: a node's, which only binds Pods in
	// namespaces a control plane made.
	Budget func(ctx context.Context, tenant string) (sandbox.Resources, bool, error)
	// Pool is the node pool a tenant's sandboxes are pinned to ("" for
	// none); nil pins none.
	Pool func(ctx context.Context, tenant string) (string, error)
	// Logger receives what goes wrong in the background.
	Logger *slog.Logger
}

// QuotaName names the ResourceQuota of each tenant's namespace.
const QuotaName = "hearth-budget"

// tenantFresh is how long a tenant's namespace and quota, once checked,
// are taken as in step before a create checks them again: a change of
// the tenant's budget reaches its quota at its first create after that.
const tenantFresh = 10 * time.Second

// Fleet is a control plane's lifecycle.Fleet on Kubernetes: a sandbox is
// a Pod in its tenant's namespace, whose ResourceQuota is the tenant's
// budget, and kube-scheduler chooses the hearth node that runs it.
type Fleet struct {
	opts FleetOptions
	log  *slog.Logger

	mu      sync.Mutex
	checked map[string]time.Time // tenant → when its namespace and quota were last made right
	open    map[string]openness  // node → whether it takes sandboxes, as last read
	watched *watched             // the cluster as watched, once synced (see Watch)
}

// openness is whether a Node took new Pods when it was read, at.
type openness struct {
	open bool
	at   time.Time
}

// openFresh is how long a Node's openness, once read, is taken as is
// when the Fleet does not watch Nodes: a cordon stops warm-pool claims on
// its node within it.
const openFresh = 2 * time.Second

// Open says whether Node node takes new Pods: it exists and is not
// cordoned (spec.unschedulable). A Node that cannot be read is not open.
// It answers from the watched Nodes once Watch has synced.
func (f *Fleet) Open(ctx context.Context, node string) bool {
	if open, known := f.watchedOpen(node); known {
		return open
	}
	f.mu.Lock()
	o, ok := f.open[node]
	f.mu.Unlock()
	if ok && time.Since(o.at) < openFresh {
		return o.open
	}
	n, err := f.opts.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	o = openness{open: err == nil && !n.Spec.Unschedulable, at: time.Now()}
	f.mu.Lock()
	f.open[node] = o
	f.mu.Unlock()
	return o.open
}

var _ lifecycle.Fleet = (*Fleet)(nil)

// NewFleet returns the Fleet of opts.
func NewFleet(opts FleetOptions) *Fleet {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fleet{opts: opts, log: log, checked: map[string]time.Time{}, open: map[string]openness{}}
}

// PlaceTimeout bounds Place's wait for a node to run a sandbox, whatever
// the caller's deadline: a node that took the Pod and died must not hang
// the create.
const PlaceTimeout = 2 * time.Minute

// Place makes sb's Pod and waits until its node runs sb (the Pod is
// Running), the Pod fails, or ctx ends (PlaceTimeout at most). A refusal
// of the tenant's ResourceQuota is budget_exceeded with the quota's
// numbers; a Pod no node fits is unavailable with the scheduler's reason.
func (f *Fleet) Place(ctx context.Context, sb sandbox.Sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, PlaceTimeout)
	defer cancel()
	pod, err := f.podOf(ctx, sb)
	if err != nil {
		return err
	}
	return f.run(ctx, sb, pod)
}

// podOf is sb's Pod, in its tenant's pool, its namespace and quota made
// right first.
func (f *Fleet) podOf(ctx context.Context, sb sandbox.Sandbox) (*corev1.Pod, error) {
	if err := f.ensureTenant(ctx, sb.Tenant); err != nil {
		return nil, err
	}
	pool, err := f.pool(ctx, sb.Tenant)
	if err != nil {
		return nil, err
	}
	return PodFor(sb, pool), nil
}

// pool is the node pool tenant's sandboxes are pinned to (FleetOptions.Pool).
func (f *Fleet) pool(ctx context.Context, tenant string) (string, error) {
	if f.opts.Pool == nil {
		return "", nil
	}
	return f.opts.Pool(ctx, tenant)
}

// PlaceOn is a node's lifecycle.Options.PlaceOn: sb's Pod, bound to node
// sb.Node, which holds sb's root, made as Place makes one and waited for
// (check: created as a dry run, for the tenant's quota to judge it).
func (f *Fleet) PlaceOn(ctx context.Context, sb sandbox.Sandbox, check bool) error {
	ctx, cancel := context.WithTimeout(ctx, PlaceTimeout)
	defer cancel()
	pod, err := f.podOf(ctx, sb)
	if err != nil {
		return err
	}
	pod.Spec.NodeName = sb.Node
	if !check {
		return f.run(ctx, sb, pod)
	}
	_, err = f.opts.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return f.refusal(pod, err)
	}
	return nil
}

// run creates pod, sb's, and waits until its node runs sb, as Place says.
func (f *Fleet) run(ctx context.Context, sb sandbox.Sandbox, pod *corev1.Pod) error {
	pods := f.opts.Client.CoreV1().Pods(pod.Namespace)
	pod, err := f.createPod(ctx, pod)
	if err != nil {
		return err
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
		ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		return f.apiErr("watch the sandbox's pod", err)
	}
	defer w.Stop()
	for {
		if done, err := placed(sb, pod); done {
			return err
		}
		select {
		case <-ctx.Done():
			return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q was not running on a node before the call's deadline or %s (pod %s/%s: %s)", sb.Name, PlaceTimeout, pod.Namespace, pod.Name, podState(pod)).
				WithHint("retry the create; if it keeps timing out, an operator should check the node the pod is bound to").With("node", pod.Spec.NodeName)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return sandbox.Errorf(sandbox.CodeUnavailable, "lost the watch of sandbox %q's pod", sb.Name).WithHint("retry the create")
			}
			switch ev.Type {
			case watch.Deleted:
				return sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q's pod was deleted before it ran", sb.Name).WithHint("retry the create")
			case watch.Added, watch.Modified:
				if p, ok := ev.Object.(*corev1.Pod); ok && p.UID == pod.UID {
					pod = p
				}
			}
		}
	}
}

// Bind records sb, which its node (sb.Node) already runs (a fork the node
// made, a warm-pool member a control plane claimed), as its Pod, bound to
// that node: the tenant's quota counts it (a refusal is budget_exceeded),
// kubectl shows it, and deleting it destroys sb. It does not wait for the
// node to report the Pod running.
func (f *Fleet) Bind(ctx context.Context, sb sandbox.Sandbox) error {
	if err := f.ensureTenant(ctx, sb.Tenant); err != nil {
		return err
	}
	pod := PodFor(sb, "")
	pod.Spec.NodeName = sb.Node
	pod.Annotations[AnnotationBound] = "true"
	_, err := f.createPod(ctx, pod)
	return err
}

// createPod creates pod; a Pod of its name that stands for an earlier
// sandbox (its node is still removing it) is deleted and waited for
// first.
func (f *Fleet) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := f.opts.Client.CoreV1().Pods(pod.Namespace)
	for {
		made, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			return made, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, f.refusal(pod, err)
		}
		zero := int64(0)
		if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			return nil, f.apiErr("delete an earlier sandbox's pod", err)
		}
		select {
		case <-ctx.Done():
			return nil, sandbox.Errorf(sandbox.CodeUnavailable, "an earlier sandbox's pod %s/%s is still being removed", pod.Namespace, pod.Name).WithHint("retry the create")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// placed says whether the wait for pod is over, and how: nil once it
// runs, a coded error once it failed or no node fits it.
func placed(sb sandbox.Sandbox, pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return true, nil
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, sandbox.Errorf(sandbox.CodeUnavailable, "sandbox %q failed to start on node %s: %s", sb.Name, pod.Spec.NodeName, podState(pod)).
			With("node", pod.Spec.NodeName).WithHint("retry the create; if it keeps failing, the node's log has the runtime's error")
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true, sandbox.Errorf(sandbox.CodeUnavailable, "no node can run sandbox %q now: %s", sb.Name, c.Message).
				WithHint("destroy or sleep sandboxes, choose a smaller size, or ask an operator to add nodes")
		}
	}
	return false, nil
}

// podState is what a Pod's status says, for an error.
func podState(pod *corev1.Pod) string {
	s := string(pod.Status.Phase)
	if s == "" {
		s = "Pending"
	}
	if pod.Spec.NodeName == "" {
		s += ", not yet scheduled"
	}
	if pod.Status.Message != "" {
		s += ": " + pod.Status.Message
	}
	return s
}

// quotaMessage is the API server's refusal of a Pod over a
// ResourceQuota: "exceeded quota: NAME, requested: R, used: U, limited: L",
// each a comma-separated list of resource=quantity.
var quotaMessage = regexp.MustCompile(`exceeded quota: [^,]+, requested: (.*), used: (.*), limited: (.*)$`)

// refusal is the error of a Pod create the API server refused: a
// ResourceQuota's refusal is budget_exceeded, with the first resource it
// names.
func (f *Fleet) refusal(pod *corev1.Pod, err error) error {
	m := quotaMessage.FindStringSubmatch(err.Error())
	if !apierrors.IsForbidden(err) || m == nil {
		return f.apiErr("create the sandbox's pod", err)
	}
	requested, used, limited := m[1], m[2], m[3]
	resource, lim, _ := strings.Cut(strings.Split(limited, ",")[0], "=")
	return sandbox.Errorf(sandbox.CodeBudgetExceeded, "budget exceeded: tenant %s's namespace %s would use more %s than its quota of %s (requested %s; used %s)",
		pod.Labels[LabelTenant], pod.Namespace, resource, lim, requested, used).
		WithHint("destroy a sandbox, choose a smaller size, or ask an operator to raise the tenant's allocation").
		With("resource", resource).With("limit", lim).With("used", used).With("requested", requested)
}

// apiErr is an API server failure: unavailable, with its message.
func (f *Fleet) apiErr(what string, err error) error {
	f.log.Error("kubernetes: "+what, "err", err)
	return sandbox.Errorf(sandbox.CodeUnavailable, "%s: the Kubernetes API server refused or failed: %v", what, err).
		WithHint("retry; if it keeps failing, an operator should check the control plane's access to the cluster")
}

// Unplace deletes sb's Pod at once (its node removes what is left).
func (f *Fleet) Unplace(ctx context.Context, sb sandbox.Sandbox) error {
	zero := int64(0)
	err := f.opts.Client.CoreV1().Pods(Namespace(sb.Tenant)).Delete(ctx, sb.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: delete pod of %s/%s: %w", sb.Tenant, sb.Name, err)
	}
	return nil
}

// ensureTenant makes tenant's namespace and quota right, unless that was
// done within tenantFresh, or the watched view shows them right already
// (see Watch).
func (f *Fleet) ensureTenant(ctx context.Context, tenant string) error {
	if err := checkNamespace(tenant); err != nil || f.opts.Budget == nil {
		return err
	}
	f.mu.Lock()
	at, ok := f.checked[tenant]
	f.mu.Unlock()
	if ok && time.Since(at) < tenantFresh {
		return nil
	}
	if !f.tenantInStep(ctx, tenant) {
		if err := f.SyncTenant(ctx, tenant); err != nil {
			return err
		}
	}
	f.checkedNow(tenant)
	return nil
}

// SyncTenant makes tenant's namespace if it has none, and sets its
// ResourceQuota to the tenant's budget (CPU, memory and disk requests),
// returning once the controller manager has counted it (see
// waitCounted); a tenant with no budget has no quota. A create calls it
// (ensureTenant) when the tenant was last checked more than tenantFresh
// ago and the watched view (see Watch) does not show it in step.
func (f *Fleet) SyncTenant(ctx context.Context, tenant string) error {
	if err := checkNamespace(tenant); err != nil {
		return err
	}
	ns := Namespace(tenant)
	_, err := f.opts.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{LabelTenant: tenant, "app.kubernetes.io/managed-by": "hearth"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return f.apiErr("create the tenant's namespace "+ns, err)
	}
	budget, limited, err := f.opts.Budget(ctx, tenant)
	if err != nil {
		return err
	}
	quotas := f.opts.Client.CoreV1().ResourceQuotas(ns)
	if !limited {
		if err := quotas.Delete(ctx, QuotaName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return f.apiErr("remove the quota of "+ns, err)
		}
		return nil
	}
	hard := quotaHard(budget)
	cur, err := quotas.Get(ctx, QuotaName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = quotas.Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Labels: map[string]string{"app.kubernetes.io/managed-by": "hearth"}},
			Spec:       corev1.ResourceQuotaSpec{Hard: hard},
		}, metav1.CreateOptions{})
	case err == nil && !sameQuantities(cur.Spec.Hard, hard):
		cur.Spec.Hard = hard
		_, err = quotas.Update(ctx, cur, metav1.UpdateOptions{})
	case err == nil && sameQuantities(cur.Status.Hard, hard):
		return nil // in step, and counted
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return f.apiErr("set the quota of "+ns, err)
	}
	f.waitCounted(ctx, ns, hard)
	return nil
}

// quotaHard is the hard limits of the quota of a tenant whose budget is
// budget: its CPU, memory and disk as requests.
func quotaHard(budget sandbox.Resources) corev1.ResourceList {
	hard := corev1.ResourceList{}
	for name, q := range requests(budget) {
		hard["requests."+name] = q
	}
	return hard
}

// quotaCountWait bounds how long SyncTenant waits for the controller
// manager to count a quota it set.
const quotaCountWait = 10 * time.Second

// waitCounted waits until the quota of namespace ns is counted at hard:
// the resource quota controller's first count of a new or changed quota
// recomputes its use from what it has seen of the namespace's Pods, and
// a Pod admitted before that count can be missed by it, and a later one
// admitted over the quota. A quota still uncounted after quotaCountWait
// is logged, and creates go on.
func (f *Fleet) waitCounted(ctx context.Context, ns string, hard corev1.ResourceList) {
	ctx, cancel := context.WithTimeout(ctx, quotaCountWait)
	defer cancel()
	for {
		q, err := f.opts.Client.CoreV1().ResourceQuotas(ns).Get(ctx, QuotaName, metav1.GetOptions{})
		if err == nil && sameQuantities(q.Status.Hard, hard) {
			return
		}
		select {
		case <-ctx.Done():
			f.log.Warn("kubernetes: the quota is not counted yet (is kube-controller-manager's resourcequota controller running?)", "namespace", ns, "err", err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sameQuantities says whether a and b hold the same quantities.
func sameQuantities(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if r, ok := b[k]; !ok || q.Cmp(r) != 0 {
			return false
		}
	}
	return true
}
