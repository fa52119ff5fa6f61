package main

// The Kubernetes side of the daemon verbs: the flags and roles every hearth
// binary knows. Wiring a daemon into a cluster is in kube.go; the hearth
// binary that scripts/install.sh builds for the command line is built with
// the tag nokube and has kube_omitted.go instead, which hands a daemon in a
// cluster to hearth-kube (see inKube).

import (
	"flag"

	"github.com/hearth/hearth/node"
)

// kubeRole is what a daemon is in a Kubernetes cluster.
type kubeRole int

const (
	kubeNone         kubeRole = iota // not in one: it runs its own sandboxes
	kubeControlPlane                 // `hearth serve --kubeconfig`: its sandboxes are Pods on hearth nodes
	kubeNode                         // `hearth node`: a Node that runs the Pods bound to it
)

// kubeConfig is how a daemon reaches its cluster, and, for a node, how it
// registers.
type kubeConfig struct {
	role       kubeRole
	kubeconfig string
	inCluster  bool
	// pool labels a node's Node (hearth.dev/pool).
	pool string
	// kubeletListen and clientCA serve the kubelet API (kubectl exec).
	kubeletListen, clientCA string
	// capacity is what a node offers sandboxes: --capacity, checked by
	// parseNode and read by kubeConfig.resources.
	capacity string
}

// enabled says whether the flags name a cluster.
func (k kubeConfig) enabled() bool { return k.kubeconfig != "" || k.inCluster }

// kubeFlags defines the flags that name the cluster; what says what it is
// for.
func kubeFlags(fl *flag.FlagSet, cfg *serveConfig, env func(string) string, what string) {
	fl.StringVar(&cfg.kube.kubeconfig, "kubeconfig", env("HEARTH_KUBECONFIG"), "kubeconfig `FILE` of "+what)
	fl.BoolVar(&cfg.kube.inCluster, "in-cluster", false, "reach the cluster as the Pod this daemon runs in (its service account), instead of --kubeconfig")
}

// controlPlaneNode is a control plane's node.None: what its fleet's nodes
// offer, by the runtime --runtime names (runsc by default).
func controlPlaneNode(cfg serveConfig) node.None {
	caps := node.Capabilities{Runtime: cfg.runtime, Isolation: "container", Egress: true}
	if caps.Runtime == "" {
		caps.Runtime = "runsc"
	}
	if caps.Runtime == "runsc" {
		caps.Isolation, caps.MemoryCheckpoint = "gvisor", true
	}
	return node.None{Caps: caps}
}
