package kube

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hearth/hearth/sandbox"
)

// Cordon marks hearth's Node node unschedulable (on) or schedulable
// again: kube-scheduler places no new sandbox there, a warm-pool claim
// skips it, and moves do not choose it. A Node that is not hearth's is
// not_found.
func (f *Fleet) Cordon(ctx context.Context, node string, on bool) error {
	nodes := f.opts.Client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && n.Labels[LabelNode] != "true":
		return sandbox.Errorf(sandbox.CodeNotFound, "no hearth node is called %q", node).
			WithHint("GET /v1/health, or kubectl get nodes -l %s=true, lists them", LabelNode)
	case err != nil:
		return f.apiErr("read node "+node, err)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": on}})
	if _, err := nodes.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return f.apiErr("cordon node "+node, err)
	}
	f.mu.Lock()
	delete(f.open, node)
	f.mu.Unlock()
	return nil
}

// PickNode chooses where sandbox sb, on its node sb.Node, moves to: a
// hearth Node other than its own that its Pod's node selector matches
// (hearth's nodes, its tenant's pool), or, for one without a Pod yet (a
// fork), the one FleetOptions.Pool gives, Ready, not cordoned, and with
// room for sb awake (its allocatable CPU and memory less what its Pods
// request now); of those, the one running the fewest Pods (then by name).
// None is unavailable.
func (f *Fleet) PickNode(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	pool, err := f.pool(ctx, sb.Tenant)
	if err != nil {
		return "", err
	}
	selector := PodFor(sb, pool).Spec.NodeSelector
	if pod, err := f.opts.Client.CoreV1().Pods(Namespace(sb.Tenant)).Get(ctx, sb.Name, metav1.GetOptions{}); err == nil && pod.Annotations[AnnotationID] == sb.ID {
		selector = pod.Spec.NodeSelector
	}
	list, err := f.opts.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()})
	if err != nil {
		return "", f.apiErr("list nodes", err)
	}
	type candidate struct {
		name string
		pods int
	}
	var cs []candidate
	specs, err := f.podSpecsByNode(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range list.Items {
		if n.Name == sb.Node || !takesPods(&n) {
			continue
		}
		if fits(n.Status.Allocatable, specs[n.Name], requests(sb.Resources)) {
			cs = append(cs, candidate{n.Name, len(specs[n.Name])})
		}
	}
	if len(cs) == 0 {
		return "", sandbox.Errorf(sandbox.CodeUnavailable, "no other hearth node can take sandbox %q (nodes matching %v that are Ready, not cordoned and with room for it: none)", sb.Name, selector).
			WithHint("add or uncordon a node in the sandbox's pool, or make room on one")
	}
	best := slices.MinFunc(cs, func(a, b candidate) int {
		if a.pods != b.pods {
			return a.pods - b.pods
		}
		return strings.Compare(a.name, b.name)
	})
	return best.name, nil
}

// ImageNode is a control plane's door.Options.ImageNode: the hearth Node
// that makes an image a call asks this control plane for (a pull, an
// import, a build), which the fleet's other nodes fetch from it when they
// need it: one that is Ready and not cordoned, the first by name. None is
// unavailable.
func (f *Fleet) ImageNode(ctx context.Context) (string, error) {
	list, err := f.opts.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{LabelNode: "true"}).String()})
	if err != nil {
		return "", f.apiErr("list nodes", err)
	}
	var names []string
	for _, n := range list.Items {
		if takesPods(&n) {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return "", sandbox.Errorf(sandbox.CodeUnavailable, "no hearth node is Ready and uncordoned to make the image").
			WithHint("retry once a node is up, or send the call to a node's own address")
	}
	return slices.Min(names), nil
}

// podSpecsByNode lists every Pod bound to a node, in one call, and
// returns their specs by node.
func (f *Fleet) podSpecsByNode(ctx context.Context) (map[string][]corev1.PodSpec, error) {
	pods, err := f.opts.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermNotEqualSelector("spec.nodeName", "").String()})
	if err != nil {
		return nil, f.apiErr("list the pods bound to nodes", err)
	}
	out := map[string][]corev1.PodSpec{}
	for i := range pods.Items {
		spec := pods.Items[i].Spec
		out[spec.NodeName] = append(out[spec.NodeName], spec)
	}
	return out, nil
}

// takesPods says whether n takes new Pods now: Ready and not cordoned.
func takesPods(n *corev1.Node) bool { return !n.Spec.Unschedulable && nodeReady(n) }

// nodeReady says whether n's Ready condition is true.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// fits says whether want fits within capacity's CPU and memory besides
// what the Pods of specs request (a resource capacity does not name
// bounds nothing).
func fits(capacity corev1.ResourceList, specs []corev1.PodSpec, want corev1.ResourceList) bool {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		limit, ok := capacity[r]
		if !ok {
			continue
		}
		used := want[r].DeepCopy()
		for _, spec := range specs {
			for _, c := range spec.Containers {
				used.Add(c.Resources.Requests[r])
			}
		}
		if used.Cmp(limit) > 0 {
			return false
		}
	}
	return true
}

// SetCapacity tells the provider what its node offers sandboxes (what
// RunNode registers), for Fits.
func (p *Provider) SetCapacity(c corev1.ResourceList) {
	p.mu.Lock()
	p.capacity = c
	p.mu.Unlock()
}

// Fits says whether sandbox sb, asleep on this node, fits here awake: its
// size's CPU and memory, besides what the other Pods on this node request
// now (a sleeping one's next to nothing), within the node's capacity
// (lifecycle's Options.Fits). Without a capacity everything fits.
func (p *Provider) Fits(_ context.Context, sb sandbox.Sandbox) bool {
	own := key(Namespace(sb.Tenant), sb.Name)
	p.mu.Lock()
	defer p.mu.Unlock()
	var specs []corev1.PodSpec
	for k, pod := range p.pods {
		if k != own {
			specs = append(specs, pod.Spec)
		}
	}
	return fits(p.capacity, specs, requests(sb.Resources))
}
