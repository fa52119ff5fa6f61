// Package kube runs hearth on Kubernetes: every sandbox machine is a
// Node, registered by `hearth node` through the Virtual Kubelet library,
// and every sandbox is a Pod in its tenant's namespace, placed by
// kube-scheduler and counted against the tenant's ResourceQuota.
//
// The control plane's side is Fleet (lifecycle.Fleet): a create writes
// the sandbox's row, and Fleet makes its Pod and waits until the node the
// scheduler bound it to runs it. The node's side is Provider (a Virtual
// Kubelet provider): a Pod bound to the node is started as the sandbox
// its annotation names (lifecycle.Sandboxes.StartPlaced), and its status
// is the sandbox's. Every later call on the sandbox reaches its node
// through the control plane's forwarding (package cluster), not through
// Kubernetes: the fast path stays hearth's own.
package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearth/hearth/sandbox"
)

// The labels, annotations and taint of hearth's Pods and Nodes.
const (
	// LabelTenant, LabelAgent and LabelSandbox are each sandbox Pod's
	// tenant, owning agent and sandbox name.
	LabelTenant  = "hearth.dev/tenant"
	LabelAgent   = "hearth.dev/agent"
	LabelSandbox = "hearth.dev/sandbox"
	// LabelNode marks hearth's Nodes ("true"); every sandbox Pod selects
	// it.
	LabelNode = "hearth.dev/node"
	// LabelPool is a Node's pool (`hearth node --pool`); a tenant pinned
	// to a pool has its Pods select it.
	LabelPool = "hearth.dev/pool"
	// LabelRuntime and LabelIsolation are a Node's runtime and isolation
	// (node.Capabilities).
	LabelRuntime   = "hearth.dev/runtime"
	LabelIsolation = "hearth.dev/isolation"
	// AnnotationID is a sandbox Pod's sandbox id: the row its node starts.
	AnnotationID = "hearth.dev/id"
	// AnnotationBound marks ("true") the Pod Fleet.Bind makes for a
	// sandbox its node runs already (a claimed warm-pool member, a fork
	// the node made, a sandbox that moved there): its node reports it
	// Running once the sandbox has settled (Pool.Settled), not at
	// once, as its caller is about to run its first commands.
	AnnotationBound = "hearth.dev/bound"
	// TaintKey is the NoSchedule taint of every hearth Node, which only
	// sandbox Pods tolerate: nothing else lands on a sandbox machine
	// through it.
	TaintKey = "hearth.dev/sandbox"
	// ContainerName is the one container of a sandbox Pod.
	ContainerName = "sandbox"
)

// namespacePrefix begins every tenant's namespace.
const namespacePrefix = "hearth-"

// Namespace is tenant's namespace: hearth-<tenant>.
func Namespace(tenant string) string { return namespacePrefix + tenant }

// tenantOf is the tenant whose namespace ns is, or false.
func tenantOf(ns string) (string, bool) {
	if len(ns) <= len(namespacePrefix) || ns[:len(namespacePrefix)] != namespacePrefix {
		return "", false
	}
	return ns[len(namespacePrefix):], true
}

// checkNamespace refuses a tenant whose namespace would be no DNS label.
func checkNamespace(tenant string) error {
	if ns := Namespace(tenant); len(ns) > sandbox.MaxNameLen {
		return sandbox.Errorf(sandbox.CodeFailedPrecondition, "tenant %q is too long for a Kubernetes namespace: %q has %d characters, over %d", tenant, ns, len(ns), sandbox.MaxNameLen).
			WithHint("run this tenant's sandboxes under a tenant of at most %d characters", sandbox.MaxNameLen-len(namespacePrefix))
	}
	return nil
}

// requests are a sandbox's resources as a Pod's requests (and limits):
// CPU, memory and disk.
func requests(r sandbox.Resources) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(r.MemoryBytes, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(r.DiskBytes, resource.BinarySI),
	}
}

// PodFor is the Pod that stands for sandbox sb in the fleet: in its
// tenant's namespace, named as sb, with sb's resources as its requests,
// the hearth Node selector (and pool's, when pool is not ""), the
// tolerations, and sb's id in its annotation. Its image is sb's hearth
// image name, which only a hearth node understands.
func PodFor(sb sandbox.Sandbox, pool string) *corev1.Pod {
	res := requests(sb.Resources)
	selector := map[string]string{LabelNode: "true"}
	if pool != "" {
		selector[LabelPool] = pool
	}
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      sb.Name,
			Namespace: Namespace(sb.Tenant),
			Labels: map[string]string{
				LabelTenant: sb.Tenant, LabelAgent: sb.Owner, LabelSandbox: sb.Name,
				"app.kubernetes.io/managed-by": "hearth",
			},
			Annotations: map[string]string{AnnotationID: sb.ID},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      ContainerName,
				Image:     sb.Image,
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
			}},
			NodeSelector:                 selector,
			Tolerations:                  tolerations(),
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
		},
	}
}

// tolerations are a sandbox Pod's: hearth's taint, and, for ever, a
// NotReady or unreachable node's. A sandbox's disk is on its node, so
// Kubernetes must not evict it when the node stops answering: hearth
// reports it unavailable, and it runs again with its files when the node
// is back (or an operator drains the node).
func tolerations() []corev1.Toleration {
	return []corev1.Toleration{
		{Key: TaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
}

// podRef is the sandbox a Pod stands for: its tenant, name and id.
type podRef struct {
	tenant, name, id string
}

// refOf is the sandbox pod stands for, or an error when it stands for
// none (not in a tenant's namespace, or without hearth's id).
func refOf(pod *corev1.Pod) (podRef, error) {
	tenant, ok := tenantOf(pod.Namespace)
	if !ok {
		return podRef{}, fmt.Errorf("pod %s/%s is not in a hearth tenant's namespace (%s<tenant>)", pod.Namespace, pod.Name, namespacePrefix)
	}
	id := pod.Annotations[AnnotationID]
	if id == "" {
		return podRef{}, fmt.Errorf("pod %s/%s has no %s annotation: create sandboxes through hearth's API", pod.Namespace, pod.Name, AnnotationID)
	}
	return podRef{tenant: tenant, name: pod.Name, id: id}, nil
}
