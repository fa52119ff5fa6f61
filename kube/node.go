package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// NodeOptions configure a hearth node's registration.
type NodeOptions struct {
	// Client reaches the cluster's API server.
	Client kubernetes.Interface
	// Name is the Node's name; Pool, when not "", its pool label.
	Name, Pool string
	// Runtime and Isolation label the Node (node.Capabilities).
	Runtime, Isolation string
	// Capacity is what the Node offers sandboxes: CPU, memory,
	// ephemeral storage and pods (allocatable too).
	Capacity corev1.ResourceList
	// Address is the Node's InternalIP.
	Address string
	// KubeletListen, when not "", is where the node serves the kubelet
	// API the API server calls for kubectl exec (TLS, with a certificate
	// the node makes), authenticating callers by a client certificate of
	// ClientCAFile and authorizing them with SubjectAccessReviews, as a
	// kubelet does.
	KubeletListen, ClientCAFile string
	// Provider runs the Node's Pods.
	Provider *Provider
	// Version is the node's kubelet version as the Node reports it.
	Version string
	// Logger receives the node's events.
	Logger *slog.Logger
}

// RunNode registers opts.Name as a Node, keeps its lease and status, and
// runs the Pods bound to it through opts.Provider until ctx ends. ready
// is called once the Node is Ready.
func RunNode(ctx context.Context, opts NodeOptions, ready func()) error {
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: opts.Client.CoreV1().Events(corev1.NamespaceAll)})
	defer events.Shutdown()
	nodeOpts := []nodeutil.NodeOpt{nodeutil.WithClient(opts.Client), func(c *nodeutil.NodeConfig) error {
		spec(&c.NodeSpec, opts)
		c.NumWorkers = 2 * runtime.NumCPU()
		c.InformerResyncPeriod = time.Minute
		c.EventRecorder = warnings{events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: opts.Name + "/pod-controller"})}
		// A sandbox's environment is hearth's: its Pod carries none for
		// the node to resolve (a Pod with any is not a sandbox's).
		c.SkipDownwardAPIResolution = true
		return nil
	}}
	if opts.KubeletListen != "" {
		kubelet, err := kubeletAPI(opts)
		if err != nil {
			return err
		}
		nodeOpts = append(nodeOpts, kubelet...)
	}
	n, err := nodeutil.NewNode(opts.Name, func(nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		return opts.Provider, nil, nil
	}, nodeOpts...)
	if err != nil {
		return fmt.Errorf("kube: node %s: %w", opts.Name, err)
	}
	go func() {
		select {
		case <-n.Ready():
			ready()
		case <-n.Done():
		}
	}()
	return n.Run(ctx)
}

// warnings records the events of a node's pod controller that say
// something went wrong (a sandbox's Pod that would not start, update or
// go), which `kubectl describe pod` and `kubectl get events` show. Its
// Normal events (a Pod created, or deleted, in the provider) are dropped:
// they say what the Pod's status says already, and each was one more
// write to the API server and etcd, made on the sandbox's node as a
// claimed sandbox ran its first command.
type warnings struct{ record.EventRecorder }

func (w warnings) Event(obj kruntime.Object, eventtype, reason, message string) {
	if eventtype == corev1.EventTypeWarning {
		w.EventRecorder.Event(obj, eventtype, reason, message)
	}
}

func (w warnings) Eventf(obj kruntime.Object, eventtype, reason, messageFmt string, args ...any) {
	if eventtype == corev1.EventTypeWarning {
		w.EventRecorder.Eventf(obj, eventtype, reason, messageFmt, args...)
	}
}

func (w warnings) AnnotatedEventf(obj kruntime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if eventtype == corev1.EventTypeWarning {
		w.EventRecorder.AnnotatedEventf(obj, annotations, eventtype, reason, messageFmt, args...)
	}
}

// spec fills the Node's labels, taint, capacity, addresses and endpoint.
func spec(n *corev1.Node, opts NodeOptions) {
	n.Labels[LabelNode] = "true"
	n.Labels[LabelRuntime] = opts.Runtime
	n.Labels[LabelIsolation] = opts.Isolation
	n.Labels["kubernetes.io/os"] = "linux"
	n.Labels["kubernetes.io/arch"] = runtime.GOARCH
	if opts.Pool != "" {
		n.Labels[LabelPool] = opts.Pool
	}
	n.Spec.Taints = []corev1.Taint{{Key: TaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	n.Status.Capacity = opts.Capacity
	n.Status.Allocatable = opts.Capacity
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: opts.Address}, {Type: corev1.NodeHostName, Address: opts.Name}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		OperatingSystem: "linux", Architecture: runtime.GOARCH,
		KubeletVersion: opts.Version, ContainerRuntimeVersion: "hearth://" + opts.Runtime,
	}
	if _, port, err := net.SplitHostPort(opts.KubeletListen); err == nil {
		p, _ := strconv.Atoi(port)
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p)
	}
}

// kubeletAPI is the options that serve the kubelet API (exec) on
// opts.KubeletListen.
func kubeletAPI(opts NodeOptions) ([]nodeutil.NodeOpt, error) {
	if opts.ClientCAFile == "" {
		return nil, fmt.Errorf("kube: serving the kubelet API needs the cluster's client CA, to know the API server by")
	}
	cert, err := selfSigned(opts.Name, opts.Address)
	if err != nil {
		return nil, err
	}
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", opts.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("kube: client CA %s: %w", opts.ClientCAFile, err)
	}
	if err := ca.RunOnce(context.Background()); err != nil {
		return nil, fmt.Errorf("kube: client CA %s: %w", opts.ClientCAFile, err)
	}
	auth, err := nodeutil.WebhookAuth(opts.Client, opts.Name, func(c *nodeutil.WebhookAuthConfig) error {
		c.AuthnConfig.ClientCertificateCAContentProvider = ca
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kube: kubelet API auth: %w", err)
	}
	mux := http.NewServeMux()
	return []nodeutil.NodeOpt{
		nodeutil.AttachProviderRoutes(mux),
		nodeutil.WithTLSConfig(func(c *tls.Config) error {
			c.Certificates = []tls.Certificate{cert}
			c.ClientCAs = x509.NewCertPool()
			if !c.ClientCAs.AppendCertsFromPEM(ca.CurrentCABundleContent()) {
				return fmt.Errorf("kube: client CA %s holds no certificate", opts.ClientCAFile)
			}
			c.ClientAuth = tls.RequireAndVerifyClientCert
			return nil
		}),
		func(c *nodeutil.NodeConfig) error {
			c.HTTPListenAddr = opts.KubeletListen
			c.Handler = nodeutil.WithAuth(auth, mux)
			return nil
		},
	}, nil
}

// selfSigned is a serving certificate for the kubelet API of node name
// at address, signed by itself: the API server does not check a
// kubelet's certificate unless told a CA for them.
func selfSigned(name, address string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(address); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
