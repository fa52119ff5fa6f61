package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/sandbox"
)

// Sandboxes is what a node's Provider needs of lifecycle: its
// Sandboxes' StartPlaced, Get, Destroy and Calls, its Pool's Settled and
// its Processes' Exec.
type Sandboxes interface {
	StartPlaced(ctx context.Context, tenant, name, id string) (sandbox.Sandbox, error)
	Settled(ctx context.Context, id string)
	Get(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error)
	Destroy(ctx context.Context, p sandbox.Principal, ref string) error
	Calls(ctx context.Context, p sandbox.Principal, ref string, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error)
	Exec(ctx context.Context, p sandbox.Principal, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error)
}

// podActor is who a node acts as on a Pod's sandbox: the admin of the
// tenant whose namespace holds the Pod. Kubernetes decided who may touch
// the Pod (RBAC in that namespace); lifecycle's access decides which
// sandboxes that reaches: that tenant's only.
func podActor(tenant string) sandbox.Principal {
	return sandbox.Principal{Tenant: tenant, Role: sandbox.RoleTenantAdmin}
}

// Provider is a hearth node's Virtual Kubelet provider: the Pods bound to
// the node are its sandboxes. A Pod that a control plane made for a
// sandbox (see PodFor) is started as that sandbox; any other Pod fails,
// with the reason in its status. Deleting the Pod destroys the sandbox,
// and a sandbox destroyed through hearth has its Pod deleted (Released).
type Provider struct {
	svc    Sandboxes
	client kubernetes.Interface
	node   string
	log    *slog.Logger

	mu     sync.Mutex
	pods   map[string]*corev1.Pod // "ns/name" → the Pod as this node reports it
	notify func(*corev1.Pod)

	resizes  resizes
	audit    func(sandbox.AuditEvent)
	flush    func(context.Context) error // the audit recorder's, when set
	capacity corev1.ResourceList         // see SetCapacity
	fleet    *Fleet                      // binds the Pod of a sandbox that moved away (follow)
	stats    usageStats                  // see UsageFrom
}

// Recorder records audit events and appends those it holds to the store
// on Flush (audit.Recorder).
type Recorder interface {
	Record(sandbox.AuditEvent)
	Flush(context.Context) error
}

// AuditTo has the provider record each call Kubernetes makes on a
// sandbox (kubectl exec and logs, a Pod's deletion) with rec, as the
// doors record theirs (door Kubernetes), and flush rec before it reads a
// sandbox's calls (kubectl logs).
func (p *Provider) AuditTo(rec Recorder) { p.audit, p.flush = rec.Record, rec.Flush }

// record audits p's call verb on sandbox name as actor, begun at start,
// which ended with err.
func (p *Provider) record(actor sandbox.Principal, verb, name string, start time.Time, err error) {
	if p.audit == nil {
		return
	}
	code, status := sandbox.Code(""), http.StatusOK
	if err != nil {
		code = sandbox.ErrorCode(err)
		status = code.HTTPStatus()
	}
	p.audit(door.Event(actor, sandbox.DoorKubernetes, verb, name, code, status, start))
}

// NewProvider returns the provider of node name over svc; client deletes
// the Pods of sandboxes destroyed through hearth, and binds those of
// sandboxes that moved away.
func NewProvider(svc Sandboxes, client kubernetes.Interface, name string, log *slog.Logger) *Provider {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{svc: svc, client: client, node: name, log: log, pods: map[string]*corev1.Pod{}, notify: func(*corev1.Pod) {},
		fleet: NewFleet(FleetOptions{Client: client, Logger: log}),
		stats: usageStats{proc: hostusage.Proc, start: metav1.Now()}}
}

func key(ns, name string) string { return ns + "/" + name }

// NotifyPods registers the callback that pushes a Pod's status to the
// API server.
func (p *Provider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = f
	p.mu.Unlock()
}

// CreatePod starts the sandbox pod stands for and returns once it runs;
// an error fails the Pod with it as the reason.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	ref, err := refOf(pod)
	if err != nil {
		return errdefs.AsInvalidInput(err)
	}
	mine := pod.DeepCopy()
	mine.Status = corev1.PodStatus{Phase: corev1.PodPending, HostIP: pod.Status.HostIP}
	p.mu.Lock()
	p.pods[key(pod.Namespace, pod.Name)] = mine
	p.mu.Unlock()
	sb, err := p.svc.StartPlaced(ctx, ref.tenant, ref.name, ref.id)
	if err != nil {
		p.forget(pod)
		if moved, ok := p.movedAway(ctx, ref, err); ok {
			go p.follow(moved)
			return nil
		}
		return fmt.Errorf("sandbox %s/%s: %w", ref.tenant, ref.name, err)
	}
	switch {
	case sb.Status == sandbox.StatusSleeping:
		// A node back from a restart, or a sandbox moved here asleep: its
		// Pod gives back what it asks awake.
		p.report(pod, asleepStatus(pod, sb))
		p.Asleep(ctx, sb, true)
	case pod.Annotations[AnnotationBound] == "true":
		// Its caller has it already and runs its first commands now; the
		// report (a write to the API server, seen by every watcher of
		// Pods) waits for them, off the cores they run on.
		go func() {
			p.svc.Settled(context.WithoutCancel(ctx), sb.ID)
			p.reportFirst(pod, runningStatus(pod, sb))
		}()
	default:
		p.report(pod, runningStatus(pod, sb))
	}
	return nil
}

// movedAway returns the sandbox of ref when StartPlaced refused it with
// err because it runs on another node: it moved there, and this node
// stopped before its Pod followed it (lifecycle's Options.Moved), or came
// back after. The row decides, read as the tenant's actor (a forged Pod
// reaches no other tenant's sandbox): it must be ref's id, on another
// node.
func (p *Provider) movedAway(ctx context.Context, ref podRef, err error) (sandbox.Sandbox, bool) {
	if !sandbox.IsCode(err, sandbox.CodeFailedPrecondition) {
		return sandbox.Sandbox{}, false
	}
	sb, gerr := p.svc.Get(ctx, podActor(ref.tenant), ref.name)
	if gerr != nil || sb.ID != ref.id || sb.Node == "" || sb.Node == p.node || sb.Status == sandbox.StatusCreating {
		return sandbox.Sandbox{}, false
	}
	return sb, true
}

// follow binds a Pod for sb, which moved from this node, to its node (in
// place of the Pod of its name bound here), as the move would have, in
// the background: it deletes the Pod this node was handed.
func (p *Provider) follow(sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), resizeTimeout)
	defer cancel()
	if err := p.fleet.Bind(ctx, sb); err != nil {
		p.log.Error("bind the pod of a sandbox that moved away to its node", "sandbox", sb.Name, "id", sb.ID, "node", sb.Node, "err", err)
		return
	}
	p.log.Info("the pod of a sandbox that moved away follows it", "sandbox", sb.Name, "id", sb.ID, "node", sb.Node)
}

// runningStatus is the status of pod once its sandbox sb runs.
func runningStatus(pod *corev1.Pod, sb sandbox.Sandbox) corev1.PodStatus {
	started := metav1.NewTime(sb.CreatedAt)
	res := *pod.Spec.Containers[0].Resources.DeepCopy()
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	return corev1.PodStatus{
		// The spec acted on: a resize is done once this reaches the
		// Pod's generation.
		ObservedGeneration: pod.Generation,
		Phase:              corev1.PodRunning,
		HostIP:             pod.Status.HostIP,
		StartTime:          &started,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled), cond(corev1.PodInitialized), cond(corev1.ContainersReady), cond(corev1.PodReady),
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:        ContainerName,
			Image:       sb.Image,
			ImageID:     sb.ImageDigest,
			ContainerID: "hearth://" + sb.ID,
			Ready:       true,
			Started:     new(true),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			// What the sandbox holds is what its Pod asks (its size, or
			// its asleep requests): the scheduler counts these.
			AllocatedResources: res.Requests,
			Resources:          &res,
		}},
	}
}

// report records status as pod's and pushes it to the API server.
func (p *Provider) report(pod *corev1.Pod, status corev1.PodStatus) {
	p.reportIf(pod, status, func(corev1.PodStatus) bool { return true })
}

// reportFirst is report, made only while the node still reports pod as
// CreatePod took it up (Pending): a report made since (a sleep's
// resize, while the report waited for the sandbox to settle) is later
// than status.
func (p *Provider) reportFirst(pod *corev1.Pod, status corev1.PodStatus) {
	p.reportIf(pod, status, func(cur corev1.PodStatus) bool { return cur.Phase == corev1.PodPending })
}

// reportIf is report, made only while the status the node reports for
// pod satisfies now.
func (p *Provider) reportIf(pod *corev1.Pod, status corev1.PodStatus, now func(corev1.PodStatus) bool) {
	p.mu.Lock()
	mine, ok := p.pods[key(pod.Namespace, pod.Name)]
	ok = ok && mine.UID == pod.UID && now(mine.Status)
	if ok {
		mine = mine.DeepCopy()
		mine.Status = status
		p.pods[key(pod.Namespace, pod.Name)] = mine
	}
	notify := p.notify
	p.mu.Unlock()
	if ok {
		notify(mine)
	}
}

// forget drops pod from what the node reports, if it is still that Pod.
func (p *Provider) forget(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mine, ok := p.pods[key(pod.Namespace, pod.Name)]; ok && mine.UID == pod.UID {
		delete(p.pods, key(pod.Namespace, pod.Name))
	}
}

// UpdatePod accepts a Pod's new spec; nothing of a sandbox follows it.
func (p *Provider) UpdatePod(context.Context, *corev1.Pod) error { return nil }

// DeletePod destroys the sandbox pod stands for, if it is still that one
// (the same id), and reports the Pod terminated.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	ref, err := refOf(pod)
	if err != nil {
		p.forget(pod)
		return nil
	}
	actor := podActor(ref.tenant)
	sb, err := p.svc.Get(ctx, actor, ref.name)
	if err == nil && sb.ID == ref.id && sb.Node == p.node {
		start := time.Now()
		err := p.svc.Destroy(ctx, actor, ref.name)
		p.record(actor, "sandbox.destroy", ref.name, start, err)
		if err != nil && sandbox.ErrorCode(err) != sandbox.CodeNotFound {
			return err
		}
	}
	done := pod.DeepCopy()
	now := metav1.Now()
	done.Status.Phase = corev1.PodSucceeded
	done.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: ContainerName, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Destroyed", FinishedAt: now}},
	}}
	p.forget(pod)
	p.mu.Lock()
	notify := p.notify
	p.mu.Unlock()
	notify(done)
	return nil
}

// Released deletes the Pod of sandbox sb, which this node released
// (destroyed through hearth, reaped, or a create undone): the Pod of sb's
// name, if it stands for sb (the one this node reports, or, before the
// node has seen it, the API server's).
func (p *Provider) Released(ctx context.Context, sb sandbox.Sandbox) {
	ns := Namespace(sb.Tenant)
	p.resizes.forget(key(ns, sb.Name))
	p.mu.Lock()
	pod, ok := p.pods[key(ns, sb.Name)]
	if ok && pod.Annotations[AnnotationID] == sb.ID {
		delete(p.pods, key(ns, sb.Name))
	}
	p.mu.Unlock()
	if !ok {
		var err error
		if pod, err = p.client.CoreV1().Pods(ns).Get(ctx, sb.Name, metav1.GetOptions{}); err != nil {
			return // none, or the API server is away: the Pod fails when its node finds no sandbox
		}
	}
	if pod.Annotations[AnnotationID] != sb.ID {
		return
	}
	zero, uid := int64(0), types.UID(pod.UID)
	err := p.client.CoreV1().Pods(ns).Delete(ctx, sb.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		p.log.Error("delete a released sandbox's pod", "pod", key(ns, sb.Name), "err", err)
	}
}

// GetPod is the Pod of ns and name as this node reports it.
func (p *Provider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[key(ns, name)]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", ns, name)
	}
	return pod.DeepCopy(), nil
}

// GetPodStatus is the status of the Pod of ns and name.
func (p *Provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods is every Pod this node reports.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}

// RunInContainer runs cmd in the sandbox of the Pod (kubectl exec),
// through the same exec path as hearth's doors: a terminal is not offered.
func (p *Provider) RunInContainer(ctx context.Context, ns, name, _ string, cmd []string, attach api.AttachIO) error {
	tenant, ok := tenantOf(ns)
	if !ok {
		return errdefs.NotFoundf("namespace %s holds no hearth sandbox", ns)
	}
	if attach.TTY() {
		return errdefs.InvalidInput("hearth's kubectl exec offers no terminal: run it without -t")
	}
	var stdout, stderr io.Writer = io.Discard, io.Discard
	if w := attach.Stdout(); w != nil {
		stdout = w
	}
	if w := attach.Stderr(); w != nil {
		stderr = w
	}
	req := sandbox.ExecRequest{Argv: cmd}
	var stdin io.Reader
	if in := attach.Stdin(); in != nil {
		req.Stdin, stdin = true, in
	}
	start := time.Now()
	res, err := p.svc.Exec(ctx, podActor(tenant), name, req, stdin, stdout, stderr)
	p.record(podActor(tenant), "sandbox.exec", name, start, err)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return exitError(res.ExitCode)
	}
	return nil
}

// exitError is a command's non-zero exit, which kubectl exec passes on.
type exitError int

func (e exitError) Error() string   { return fmt.Sprintf("command terminated with exit code %d", int(e)) }
func (e exitError) String() string  { return e.Error() }
func (e exitError) Exited() bool    { return true }
func (e exitError) ExitStatus() int { return int(e) }

// AttachToContainer is not offered: a sandbox has no main process.
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("a hearth sandbox has no main process to attach to: use kubectl exec")
}

// PortForward is not offered yet: sandbox ports are served at hearth's
// sandbox URLs.
func (p *Provider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return errors.New("port forwarding to a hearth sandbox is not offered: use its hearth URL")
}
