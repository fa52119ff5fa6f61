//go:build !nokube

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hearth/hearth/audit"
	"github.com/hearth/hearth/internal/hostusage"
	"github.com/hearth/hearth/kube"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
)

// client is the API server client of k.
func (k kubeConfig) client() (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if k.inCluster {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	cfg.UserAgent = "hearth/" + version()
	kube.TuneClient(cfg)
	return kubernetes.NewForConfig(cfg)
}

// quietKlog sends the Kubernetes libraries' own logging (klog) to log,
// warnings and errors only: their informational lines are theirs, not
// the daemon's.
func quietKlog(stderr io.Writer) {
	klog.SetSlogLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "kubernetes"))
}

// runNode runs `hearth node`: a daemon that runs sandboxes, as serve
// does, on the store its control plane shares, registered as the
// Kubernetes Node --name; the Pods bound to it are its sandboxes.
func runNode(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseNode(args, env, stderr)
	if err != nil {
		return err
	}
	return serveDaemon(ctx, cfg, stdout, stderr)
}

// inKube lets the daemon verb run here: this binary links the Kubernetes
// libraries (see kube_omitted.go for the one that does not).
func inKube(string, []string) error { return nil }

// parseNode parses the flags of `hearth node`.
func parseNode(args []string, env func(string) string, stderr io.Writer) (serveConfig, error) {
	fl := flag.NewFlagSet("hearth node", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfg := serveConfig{gatewayPort: -1, dnsPort: -1}
	serveFlags(fl, &cfg, env)
	kubeFlags(fl, &cfg, env, "the Kubernetes cluster to register this machine in, as a Node")
	fl.StringVar(&cfg.node, "name", env("HEARTH_NODE"), "`NAME` of this machine's Kubernetes Node, and of this daemon among those of its store (default: the host name)")
	fl.StringVar(&cfg.kube.pool, "pool", "", "node `POOL` this machine belongs to (the Node's label hearth.dev/pool): tenants pinned to a pool land only on its nodes")
	fl.StringVar(&cfg.kube.kubeletListen, "kubelet-listen", "", "`HOST:PORT` of the kubelet API the API server calls for kubectl exec (TLS; needs --client-ca); none by default")
	fl.StringVar(&cfg.kube.clientCA, "client-ca", "", "`FILE` of the CA whose client certificates the kubelet API accepts: the API server's kubelet client certificate's (default with --in-cluster: the cluster's CA, from the service account)")
	fl.StringVar(&cfg.kube.capacity, "capacity", "", "what this machine offers sandboxes, as `cpu=N,memory=Q,pods=N,ephemeral-storage=Q` (default: 8 CPUs per core, twice its memory, 1000 pods, 8 times the layer store's size: sizes are caps, not reservations)")
	if err := parseDaemonFlags(fl, "node", args); err != nil {
		return cfg, err
	}
	if !cfg.kube.enabled() {
		return cfg, &usageError{verb: "node", msg: "name the cluster to register in: --kubeconfig FILE or --in-cluster"}
	}
	if cfg.storeURL == "" {
		return cfg, &usageError{verb: "node", msg: "a node shares its control plane's Postgres store: --store postgres://… (or HEARTH_STORE)"}
	}
	if cfg.kube.pool != "" {
		if err := sandbox.ValidatePool(cfg.kube.pool); err != nil {
			return cfg, &usageError{verb: "node", msg: "--pool: " + err.Error()}
		}
	}
	if cfg.kube.kubeletListen != "" && cfg.kube.clientCA == "" && cfg.kube.inCluster {
		// A cluster's CA signs the API server's kubelet client
		// certificate too, as kubeadm sets clusters up.
		cfg.kube.clientCA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	}
	cfg.kube.role = kubeNode
	if _, err := cfg.kube.resources(cfg.layersSize); err != nil {
		return cfg, &usageError{verb: "node", msg: "--capacity: " + err.Error()}
	}
	return cfg, finishServe(&cfg)
}

// resources is what a node offers sandboxes: --capacity over the
// defaults (parseCapacity) for a layer store of disk bytes.
func (k kubeConfig) resources(disk int64) (corev1.ResourceList, error) {
	return parseCapacity(k.capacity, disk)
}

// parseCapacity parses --capacity over the defaults, which overcommit the
// machine as a sandbox's size is a cap and not a reservation (most
// sandboxes idle, the kernel shares CPU by weight, roots are thin
// snapshots): 8 CPUs per core, twice its memory, 1000 pods and 8 times
// disk, the layer store's size.
func parseCapacity(v string, disk int64) (corev1.ResourceList, error) {
	mem := int64(8 << 30)
	if m, err := hostusage.ReadMemory(hostusage.Proc); err == nil {
		mem = m.Total
	}
	out := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(8*runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(2*mem, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(1000, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(8*disk, resource.BinarySI),
	}
	for _, kv := range strings.Split(v, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, q, ok := strings.Cut(kv, "=")
		name := corev1.ResourceName(k)
		if _, known := out[name]; !ok || !known {
			return nil, fmt.Errorf("%q: want cpu=, memory=, pods= or ephemeral-storage= with a quantity", kv)
		}
		qty, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[name] = qty
	}
	return out, nil
}

// kubeWiring sets opts' hooks for this daemon's part in cfg's cluster,
// if any: a control plane's Fleet (kube.Fleet, which keeps each tenant's
// quota at its budget and pins it to its pool), or a node's Bind, Released
// and Asleep (a node binds its forks' Pods in namespaces a control plane
// made, so its Fleet has no budget: it makes no namespace and sets no
// quota). Once lifecycle.New has made svc, finish gives the hooks svc and
// the audit log, and, on a node, registers it until ctx ends, its address
// the host of addr.
func kubeWiring(cfg serveConfig, opts *lifecycle.Options, stderr io.Writer, log *slog.Logger) (finish func(ctx context.Context, svc *lifecycle.Service, rec *audit.Recorder, addr string), err error) {
	finish = func(context.Context, *lifecycle.Service, *audit.Recorder, string) {}
	if cfg.kube.role == kubeNone {
		return finish, nil
	}
	quietKlog(stderr)
	client, err := cfg.kube.client()
	if err != nil {
		return nil, err
	}
	klog := log.With("component", "kube")
	if cfg.kube.role == kubeControlPlane {
		var tenancy *lifecycle.Tenancy
		fleet := kube.NewFleet(kube.FleetOptions{
			Client: client,
			Budget: func(ctx context.Context, tenant string) (sandbox.Resources, bool, error) {
				return tenancy.Budget(ctx, tenant)
			},
			Pool: func(ctx context.Context, tenant string) (string, error) {
				return tenancy.Pool(ctx, tenant)
			},
			Logger: klog,
		})
		opts.Fleet = fleet
		return func(ctx context.Context, svc *lifecycle.Service, _ *audit.Recorder, _ string) {
			tenancy = svc.Tenancy
			go fleet.Watch(ctx)
		}, nil
	}
	sbs := &nodeSandboxes{}
	provider := kube.NewProvider(sbs, client, cfg.node, klog)
	fleet := kube.NewFleet(kube.FleetOptions{
		Client: client,
		// The pool a fork this node sends elsewhere must land in.
		Pool: func(ctx context.Context, tenant string) (string, error) {
			return sbs.svc.Tenancy.Pool(ctx, tenant)
		},
		Logger: klog,
	})
	capacity, err := cfg.kube.resources(cfg.layersSize)
	if err != nil {
		return nil, err
	}
	provider.SetCapacity(capacity)
	opts.Bind, opts.PlaceOn, opts.PickNode, opts.Fits = fleet.Bind, fleet.PlaceOn, fleet.PickNode, provider.Fits
	opts.Released, opts.Asleep = provider.Released, provider.Asleep
	// A sandbox moved away has its Pod follow it: the Pod of its name
	// here goes (its sandbox is the other node's now, so this node's
	// provider keeps it), and one bound to its new node stands for it.
	opts.Moved = func(ctx context.Context, sb sandbox.Sandbox, from string) {
		if err := fleet.Bind(ctx, sb); err != nil {
			klog.Error("bind a moved sandbox's pod to its new node", "sandbox", sb.Name, "id", sb.ID, "from", from, "to", sb.Node, "err", err)
		}
	}
	caps := opts.Node.Capabilities()
	return func(ctx context.Context, svc *lifecycle.Service, rec *audit.Recorder, addr string) {
		sbs.svc = svc
		provider.AuditTo(rec)
		provider.UsageFrom(svc.Usage.Latest)
		go registerNode(ctx, cfg, client, provider, caps, capacity, addr, log)
	}, nil
}

// nodeSandboxes is lifecycle as a kube.Provider uses it.
type nodeSandboxes struct{ svc *lifecycle.Service }

func (n *nodeSandboxes) StartPlaced(ctx context.Context, tenant, name, id string) (sandbox.Sandbox, error) {
	return n.svc.Sandboxes.StartPlaced(ctx, tenant, name, id)
}

func (n *nodeSandboxes) Settled(ctx context.Context, id string) {
	n.svc.Pool.Settled(ctx, id)
}

func (n *nodeSandboxes) Get(ctx context.Context, p sandbox.Principal, ref string) (sandbox.Sandbox, error) {
	return n.svc.Sandboxes.Get(ctx, p, ref)
}

func (n *nodeSandboxes) Destroy(ctx context.Context, p sandbox.Principal, ref string) error {
	return n.svc.Sandboxes.Destroy(ctx, p, ref)
}

func (n *nodeSandboxes) Calls(ctx context.Context, p sandbox.Principal, ref string, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error) {
	return n.svc.Sandboxes.Calls(ctx, p, ref, f)
}

func (n *nodeSandboxes) Exec(ctx context.Context, p sandbox.Principal, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error) {
	return n.svc.Processes.Exec(ctx, p, name, req, stdin, stdout, stderr)
}

// registerNode runs the node's registration as cfg.node until ctx ends,
// its address the host of addr; a failure is logged.
func registerNode(ctx context.Context, cfg serveConfig, client kubernetes.Interface, provider *kube.Provider, caps node.Capabilities, capacity corev1.ResourceList, addr string, log *slog.Logger) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	err = kube.RunNode(ctx, kube.NodeOptions{
		Client: client, Name: cfg.node, Pool: cfg.kube.pool,
		Runtime: caps.Runtime, Isolation: caps.Isolation,
		Capacity: capacity, Address: host,
		KubeletListen: cfg.kube.kubeletListen, ClientCAFile: cfg.kube.clientCA,
		Provider: provider, Version: "hearth-" + version(),
		Logger: log.With("component", "kube"),
	}, func() { log.Info("registered as a Kubernetes node", "node", cfg.node, "pool", cfg.kube.pool) })
	if err != nil && ctx.Err() == nil {
		log.Error("the Kubernetes node stopped: no more pods run here", "err", err)
	}
}
