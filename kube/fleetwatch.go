package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Watch keeps the Fleet's view of the hearth Nodes (LabelNode) from a
// watch of the API server until ctx ends, and returns then. Once that
// view has synced, Open answers from it: a warm-pool claim costs no call
// to the API server, and sees a cordon as soon as the watch delivers it.
// Until then, or without Watch, Open reads the Node itself (see
// openFresh).
func (f *Fleet) Watch(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(f.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{LabelNode: "true"}).String()
		}))
	nodes := factory.Core().V1().Nodes()
	lister, informer := nodes.Lister(), nodes.Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	f.mu.Lock()
	f.nodes = lister
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	f.nodes = nil
	f.mu.Unlock()
}

// watchedOpen is Open's answer from the watched Nodes, and whether there
// is one (Watch has synced).
func (f *Fleet) watchedOpen(node string) (open, known bool) {
	f.mu.Lock()
	nodes := f.nodes
	f.mu.Unlock()
	if nodes == nil {
		return false, false
	}
	n, err := nodes.Get(node)
	return err == nil && !n.Spec.Unschedulable, true
}
