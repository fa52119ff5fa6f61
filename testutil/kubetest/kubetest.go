// Package kubetest runs a throwaway Kubernetes control plane for a test
// binary: Debian's etcd and the kube-apiserver (and, when asked,
// kube-scheduler) that scripts/kube.sh built into the cache, all on
// 127.0.0.1 and on no other address, started by the first Start of the
// test binary and stopped by Stop, which the package's TestMain calls
// after every test.
//
// The API server serves TLS with a certificate of a CA the package makes,
// and knows one client: the admin, by a client certificate of that CA in
// the group system:masters. Start writes a kubeconfig with both for the
// test. It runs with RBAC and without the admission plugins that need the
// controller manager (ServiceAccount), and without the endpoint
// reconciler (a loopback address is no endpoint of the kubernetes
// service). etcd keeps its data in the cluster's temporary directory.
package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hearth/hearth/testutil/testenv"
)

// Version is the Kubernetes release the tests run: tools/kube/go.mod's
// (TestVersion checks they agree).
const Version = "v1.37.2"

// startTimeout bounds how long the control plane takes to be ready.
const startTimeout = 90 * time.Second

// Cluster is a running control plane.
type Cluster struct {
	// Kubeconfig is the path of the admin's kubeconfig.
	Kubeconfig string
	// URL is the API server's ("https://127.0.0.1:PORT").
	URL string
	// Bin is the directory of the Kubernetes binaries (kubectl too).
	Bin string
	// CA is the path of the cluster's CA certificate, which signs its
	// clients' certificates (the API server's kubelet client's too).
	CA string

	dir   string
	procs []*proc
}

// Options choose what runs beside etcd and the API server.
type Options struct {
	// Scheduler runs kube-scheduler too, and kube-controller-manager
	// with the controllers a cluster of nodes needs (see controllers).
	Scheduler bool
}

// the test binary's control plane, started by the first Start.
var cluster struct {
	sync.Mutex
	c    *Cluster
	opts Options
	err  error
}

// Start returns the test binary's control plane, starting it at the first
// call (later calls must ask for no more than the first did). It skips t
// with testenv.Skip, which fails it under HEARTH_TEST_STRICT, when etcd or
// the Kubernetes binaries are missing (scripts/install.sh installs etcd and
// builds them); any other failure to start fails t.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin, etcd, err := binaries()
	if err != nil {
		testenv.Skip(t, "no Kubernetes control plane to run (scripts/install.sh builds one): %v", err)
	}
	cluster.Lock()
	defer cluster.Unlock()
	if cluster.c == nil && cluster.err == nil {
		cluster.c, cluster.err = start(bin, etcd, opts)
		cluster.opts = opts
	}
	if cluster.err != nil {
		t.Fatalf("start a Kubernetes control plane: %v", cluster.err)
	}
	if opts.Scheduler && !cluster.opts.Scheduler {
		t.Fatal("kubetest.Start: the control plane already runs without a scheduler")
	}
	return cluster.c
}

// Stop stops the control plane Start started, if any, and removes its
// files; for TestMain, after every test.
func Stop() {
	cluster.Lock()
	defer cluster.Unlock()
	if cluster.c != nil {
		cluster.c.stop()
		cluster.c = nil
	}
}

// binaries returns the Kubernetes binaries' directory and etcd's path.
func binaries() (bin, etcd string, err error) {
	cache := os.Getenv("HEARTH_CACHE")
	if cache == "" {
		cache = "/var/cache/hearth"
	}
	bin = filepath.Join(cache, "kube", Version)
	for _, name := range []string{"kube-apiserver", "kube-scheduler", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return "", "", err
		}
	}
	etcd, err = exec.LookPath("etcd")
	if err != nil {
		return "", "", fmt.Errorf("etcd (apt-get install etcd-server): %w", err)
	}
	return bin, etcd, nil
}

// start runs etcd, the API server and, as opts say, the scheduler in a
// new temporary directory; on an error it leaves nothing behind.
func start(bin, etcd string, opts Options) (c *Cluster, err error) {
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Bin: bin, dir: dir}
	defer func() {
		if err != nil {
			c.stop()
			c = nil
		}
	}()
	pki, err := makePKI(dir)
	if err != nil {
		return nil, err
	}
	etcdURL, err := c.runEtcd(etcd)
	if err != nil {
		return nil, err
	}
	if err := c.runAPIServer(pki, etcdURL); err != nil {
		return nil, err
	}
	if c.Kubeconfig, err = pki.kubeconfig(dir, c.URL); err != nil {
		return nil, err
	}
	c.CA = pki.caCert
	if opts.Scheduler {
		if err := c.runScheduler(); err != nil {
			return nil, err
		}
		if err := c.runControllerManager(pki); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// runEtcd starts etcd on two free loopback ports and returns its client
// URL once it answers.
func (c *Cluster) runEtcd(etcd string) (string, error) {
	client, peer, err := freePort(), freePort(), error(nil)
	if client == 0 || peer == 0 {
		return "", errors.New("no free port for etcd")
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	p, err := c.run("etcd", etcd,
		"--name", "kubetest", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "kubetest="+peerURL, "--log-level", "warn")
	if err != nil {
		return "", err
	}
	return clientURL, p.wait(func() error { return get(http.DefaultClient, clientURL+"/health") })
}

// runAPIServer starts kube-apiserver on a free loopback port and waits
// until it is ready.
func (c *Cluster) runAPIServer(pki *pki, etcdURL string) error {
	port := freePort()
	if port == 0 {
		return errors.New("no free port for the API server")
	}
	c.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	p, err := c.run("kube-apiserver", filepath.Join(c.Bin, "kube-apiserver"),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--etcd-servers="+etcdURL,
		"--tls-cert-file="+pki.serverCert, "--tls-private-key-file="+pki.serverKey,
		"--client-ca-file="+pki.caCert,
		"--kubelet-client-certificate="+pki.kubeletCert, "--kubelet-client-key="+pki.kubeletKey,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+pki.saPub, "--service-account-signing-key-file="+pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--cert-dir="+filepath.Join(c.dir, "apiserver-certs"))
	if err != nil {
		return err
	}
	client, err := pki.client()
	if err != nil {
		return err
	}
	return p.wait(func() error { return get(client, c.URL+"/readyz") })
}

// runScheduler starts kube-scheduler with the admin's kubeconfig, on a
// free loopback port for its own health endpoint.
func (c *Cluster) runScheduler() error {
	port := freePort()
	_, err := c.run("kube-scheduler", filepath.Join(c.Bin, "kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig, "--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--leader-elect=false")
	return err
}

// controllers are the controllers kube-controller-manager runs: what
// keeps quota usage, Nodes' health (their not-ready and unreachable
// taints) and namespaces' contents as a cluster's are.
const controllers = "resourcequota-controller,node-lifecycle-controller,namespace-controller,garbage-collector-controller"

// runControllerManager starts kube-controller-manager with the admin's
// kubeconfig and the controllers above, on a free loopback port for its
// own health endpoint. A Node whose lease lapses is NotReady after 10 s.
// Quotas are recounted every 5 s (a cluster's default is 5 min), so a
// count its controller took from a lagging cache is mended within a test.
func (c *Cluster) runControllerManager(pki *pki) error {
	port := freePort()
	_, err := c.run("kube-controller-manager", filepath.Join(c.Bin, "kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig, "--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--leader-elect=false",
		"--controllers="+controllers, "--node-monitor-grace-period=10s", "--node-monitor-period=1s", "--resource-quota-sync-period=5s",
		"--service-account-private-key-file="+pki.saKey, "--root-ca-file="+pki.caCert)
	return err
}

// proc is one process of the control plane.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// run starts name (path with args), its output in the cluster's
// directory; it dies with the test binary (Pdeathsig).
func (c *Cluster) run(name, path string, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(c.dir, name+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	c.procs = append(c.procs, p)
	return p, nil
}

// wait polls ready until it succeeds, the process exits or startTimeout
// passes; the error then carries the end of the process's log.
func (p *proc) wait(ready func() error) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, tail(p.log))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v\n%s", p.name, startTimeout, err, tail(p.log))
		}
	}
}

// stop kills the control plane's processes, last started first, and
// removes its directory.
func (c *Cluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
	}
	os.RemoveAll(c.dir)
}

// get fails unless GET url answers 200.
func get(client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// tail is the last 4 KiB of the file at path.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// freePort returns a free TCP port on 127.0.0.1, or 0.
func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Client returns an HTTP client that trusts the API server and presents
// the admin's certificate.
func (c *Cluster) Client() (*http.Client, error) {
	p := &pki{dir: filepath.Join(c.dir, "pki")}
	p.paths()
	return p.client()
}

// tlsConfig is a client TLS configuration trusting caPEM with cert.
func tlsConfig(caPEM []byte, cert tls.Certificate) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the cluster's CA does not parse")
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
