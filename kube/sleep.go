package kube

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearth/hearth/sandbox"
)

// asleepRequests is what a sleeping sandbox's Pod requests: almost no CPU
// and memory (its processes are stopped), and its disk, which stays (an
// in-place resize changes CPU and memory only).
func asleepRequests(r sandbox.Resources) corev1.ResourceList {
	res := requests(r)
	res[corev1.ResourceCPU] = *resource.NewMilliQuantity(1, resource.DecimalSI)
	res[corev1.ResourceMemory] = *resource.NewQuantity(1<<20, resource.BinarySI)
	return res
}

// resizeTimeout bounds one resize of a Pod.
const resizeTimeout = 30 * time.Second

// resizes orders the resizes of each Pod: the last call wins.
type resizes struct {
	mu    sync.Mutex
	gen   map[string]uint64      // "ns/name" → the generation of its latest call
	locks map[string]*sync.Mutex // "ns/name" → held while one resize of it runs
}

// next records a new call for key and returns its generation and the
// key's lock.
func (r *resizes) next(key string) (uint64, *sync.Mutex) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == nil {
		r.gen, r.locks = map[string]uint64{}, map[string]*sync.Mutex{}
	}
	r.gen[key]++
	if r.locks[key] == nil {
		r.locks[key] = &sync.Mutex{}
	}
	return r.gen[key], r.locks[key]
}

// forget drops what is kept of key, whose sandbox is gone: a call still
// waiting for it finds it is no longer the latest, and does nothing.
func (r *resizes) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.gen, key)
	delete(r.locks, key)
}

// latest says whether gen is still key's latest call.
func (r *resizes) latest(key string, gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen[key] == gen
}

// Asleep resizes the Pod of sb, which fell asleep (asleep) or woke, in
// place, in the background: asleep, it requests almost no CPU and memory,
// so that the scheduler may place other sandboxes on the node; awake, its
// size again. The status reports the sandbox not ready while it sleeps.
// A resize the API server refuses (the quota, on a wake) is logged; the
// sandbox runs regardless.
func (p *Provider) Asleep(_ context.Context, sb sandbox.Sandbox, asleep bool) {
	k := key(Namespace(sb.Tenant), sb.Name)
	gen, lock := p.resizes.next(k)
	go func() {
		lock.Lock()
		defer lock.Unlock()
		if !p.resizes.latest(k, gen) {
			return // a later sleep or wake decides
		}
		ctx, cancel := context.WithTimeout(context.Background(), resizeTimeout)
		defer cancel()
		p.resize(ctx, sb, asleep)
	}()
}

// resize sets the Pod of sb to its asleep or awake requests, and reports
// its status so.
func (p *Provider) resize(ctx context.Context, sb sandbox.Sandbox, asleep bool) {
	ns := Namespace(sb.Tenant)
	p.mu.Lock()
	mine, ok := p.pods[key(ns, sb.Name)]
	p.mu.Unlock()
	if !ok || mine.Annotations[AnnotationID] != sb.ID {
		return
	}
	res := requests(sb.Resources)
	if asleep {
		res = asleepRequests(sb.Resources)
	}
	pod := mine.DeepCopy()
	pod.ResourceVersion = "" // the last call wins
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: res, Limits: res}
	resized, err := p.client.CoreV1().Pods(ns).UpdateResize(ctx, sb.Name, pod, metav1.UpdateOptions{})
	if err != nil {
		p.log.Warn("resize a sandbox's pod", "pod", key(ns, sb.Name), "asleep", asleep, "err", err)
		return
	}
	pod.Generation = resized.Generation
	status := runningStatus(pod, sb)
	if asleep {
		status = asleepStatus(pod, sb)
	}
	p.mu.Lock()
	if cur, ok := p.pods[key(ns, sb.Name)]; ok && cur.UID == pod.UID {
		cur = cur.DeepCopy()
		cur.Spec.Containers[0].Resources = pod.Spec.Containers[0].Resources
		cur.Generation = pod.Generation
		p.pods[key(ns, sb.Name)] = cur
	}
	p.mu.Unlock()
	p.report(pod, status)
}

// asleepStatus is the status of pod while its sandbox sb sleeps: the Pod
// runs (its sandbox exists, with its disk), its container waits and is
// not ready, holding what it requests asleep.
func asleepStatus(pod *corev1.Pod, sb sandbox.Sandbox) corev1.PodStatus {
	st := runningStatus(pod, sb)
	for i := range st.Conditions {
		if st.Conditions[i].Type == corev1.PodReady || st.Conditions[i].Type == corev1.ContainersReady {
			st.Conditions[i].Status = corev1.ConditionFalse
			st.Conditions[i].Reason = "Asleep"
		}
	}
	cs := &st.ContainerStatuses[0]
	cs.Ready, cs.Started = false, new(false)
	cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "Asleep", Message: "the sandbox sleeps: its next call wakes it"}}
	return st
}
