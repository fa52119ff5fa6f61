package kube

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// watched is what a control plane's Fleet keeps from watches of the API
// server (see Watch): the hearth Nodes, the namespaces hearth made, and
// the tenants' quotas.
type watched struct {
	nodes      corelisters.NodeLister
	namespaces corelisters.NamespaceLister
	quotas     corelisters.ResourceQuotaLister
}

// Watch keeps the Fleet's view of the hearth Nodes (LabelNode), of the
// namespaces hearth made and of their quotas (QuotaName) from watches of
// the API server until ctx ends, and returns then. Once that view has
// synced, a create's checks read it instead of asking the API server:
// Open (a warm-pool claim's node, which then sees a cordon as soon as the
// watch delivers it) and the check of a tenant's namespace and quota that
// each create makes once tenantFresh has passed, which calls SyncTenant
// only when the view shows them out of step with the tenant's budget.
// Until then, or without Watch, both ask the API server.
func (f *Fleet) Watch(ctx context.Context) {
	const resync = 0 // a watch that breaks is listed again; nothing is polled
	client := f.opts.Client
	selector := func(set labels.Set) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) { o.LabelSelector = labels.SelectorFromSet(set).String() }
	}
	nodes := coreinformers.NewFilteredNodeInformer(client, resync, cache.Indexers{}, selector(labels.Set{LabelNode: "true"}))
	namespaces := coreinformers.NewFilteredNamespaceInformer(client, resync, cache.Indexers{}, selector(labels.Set{"app.kubernetes.io/managed-by": "hearth"}))
	quotas := coreinformers.NewFilteredResourceQuotaInformer(client, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", QuotaName).String()
		})
	for _, inf := range []cache.SharedIndexInformer{nodes, namespaces, quotas} {
		go inf.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, namespaces.HasSynced, quotas.HasSynced) {
		return
	}
	f.mu.Lock()
	f.watched = &watched{
		nodes:      corelisters.NewNodeLister(nodes.GetIndexer()),
		namespaces: corelisters.NewNamespaceLister(namespaces.GetIndexer()),
		quotas:     corelisters.NewResourceQuotaLister(quotas.GetIndexer()),
	}
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	f.watched = nil
	f.mu.Unlock()
}

// view is the Fleet's synced view of the cluster, or nil.
func (f *Fleet) view() *watched {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watched
}

// watchedOpen is Open's answer from the watched Nodes, and whether there
// is one (Watch has synced).
func (f *Fleet) watchedOpen(node string) (open, known bool) {
	w := f.view()
	if w == nil {
		return false, false
	}
	n, err := w.nodes.Get(node)
	return err == nil && !n.Spec.Unschedulable, true
}

// tenantInStep says whether the watched view shows tenant's namespace and
// quota as SyncTenant would leave them for its budget now: the namespace
// there, and the quota at the budget and counted at it (or, for a tenant
// without a budget, none). False when it cannot tell.
func (f *Fleet) tenantInStep(ctx context.Context, tenant string) bool {
	w := f.view()
	if w == nil {
		return false
	}
	ns := Namespace(tenant)
	if _, err := w.namespaces.Get(ns); err != nil {
		return false
	}
	budget, limited, err := f.opts.Budget(ctx, tenant)
	if err != nil {
		return false
	}
	q, err := w.quotas.ResourceQuotas(ns).Get(QuotaName)
	if !limited {
		return apierrors.IsNotFound(err)
	}
	hard := quotaHard(budget)
	return err == nil && sameQuantities(q.Spec.Hard, hard) && sameQuantities(q.Status.Hard, hard)
}

// checkedNow records that tenant's namespace and quota were found in step.
func (f *Fleet) checkedNow(tenant string) {
	f.mu.Lock()
	f.checked[tenant] = time.Now()
	f.mu.Unlock()
}
