package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's keys and certificates, as files in dir: a
// CA, the API server's serving certificate (for 127.0.0.1 and
// localhost), the admin's and the API server's kubelet client
// certificates (group system:masters) and
// the service accounts' signing key pair.
type pki struct {
	dir                   string
	caCert, caKey         string
	serverCert, serverKey string
	adminCert, adminKey   string
	// kubeletCert is the API server's client certificate for calls to
	// kubelets (kubectl exec), in system:masters.
	kubeletCert, kubeletKey string
	saKey, saPub            string
}

// paths names pki's files in its directory.
func (p *pki) paths() {
	f := func(name string) string { return filepath.Join(p.dir, name) }
	p.caCert, p.caKey = f("ca.crt"), f("ca.key")
	p.serverCert, p.serverKey = f("apiserver.crt"), f("apiserver.key")
	p.adminCert, p.adminKey = f("admin.crt"), f("admin.key")
	p.kubeletCert, p.kubeletKey = f("kubelet-client.crt"), f("kubelet-client.key")
	p.saKey, p.saPub = f("sa.key"), f("sa.pub")
}

// makePKI makes the keys and certificates in dir/pki.
func makePKI(dir string) (*pki, error) {
	p := &pki{dir: filepath.Join(dir, "pki")}
	p.paths()
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	ca, caKey, err := p.issue(nil, nil, p.caCert, p.caKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "kubetest-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	if err != nil {
		return nil, err
	}
	if _, _, err := p.issue(ca, caKey, p.serverCert, p.serverKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, err
	}
	for _, c := range []struct{ cn, cert, key string }{
		{"kubetest-admin", p.adminCert, p.adminKey},
		{"kube-apiserver-kubelet-client", p.kubeletCert, p.kubeletKey},
	} {
		if _, _, err := p.issue(ca, caKey, c.cert, c.key, &x509.Certificate{
			Subject:  pkix.Name{CommonName: c.cn, Organization: []string{"system:masters"}},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}); err != nil {
			return nil, err
		}
	}
	return p, p.serviceAccountKeys()
}

// issue makes a key and a certificate of tmpl for it, signed by parent
// (self-signed when nil), and writes both as PEM.
func (p *pki) issue(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, certPath, keyPath string, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return nil, nil, err
	}
	return cert, key, writePEM(keyPath, "EC PRIVATE KEY", keyDER)
}

// serviceAccountKeys makes the RSA key pair the API server signs service
// account tokens with.
func (p *pki) serviceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
		return err
	}
	return writePEM(p.saPub, "PUBLIC KEY", pub)
}

// client is an HTTP client of the admin.
func (p *pki) client() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.adminCert, p.adminKey)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(p.caCert)
	if err != nil {
		return nil, err
	}
	cfg, err := tlsConfig(ca, cert)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Proxy: nil}, Timeout: 30 * time.Second}, nil
}

// kubeconfig writes the admin's kubeconfig for the server at url into dir
// and returns its path.
func (p *pki) kubeconfig(dir, url string) (string, error) {
	data := map[string][]byte{}
	for name, path := range map[string]string{"ca": p.caCert, "cert": p.adminCert, "key": p.adminKey} {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		data[name] = b
	}
	b64 := base64.StdEncoding.EncodeToString
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: admin}
current-context: kubetest
`, url, b64(data["ca"]), b64(data["cert"]), b64(data["key"]))
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, []byte(config), 0o600)
}

// writePEM writes der as a PEM block of typ, mode 0600.
func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// ClientCertificate is a client certificate of c's CA for user, in no
// group: a caller the API server (and a kubelet trusting the CA)
// authenticates as user, whom RBAC grants nothing until a test binds it a
// role.
func (c *Cluster) ClientCertificate(user string) (tls.Certificate, error) {
	p := &pki{dir: filepath.Join(c.dir, "pki")}
	p.paths()
	ca, err := tls.LoadX509KeyPair(p.caCert, p.caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return tls.Certificate{}, err
	}
	caKey, ok := ca.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return tls.Certificate{}, fmt.Errorf("kubetest: the CA's key is a %T", ca.PrivateKey)
	}
	dir, err := os.MkdirTemp(p.dir, "user-")
	if err != nil {
		return tls.Certificate{}, err
	}
	certPath, keyPath := filepath.Join(dir, "user.crt"), filepath.Join(dir, "user.key")
	if _, _, err := p.issue(caCert, caKey, certPath, keyPath, &x509.Certificate{
		Subject:  pkix.Name{CommonName: user},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return tls.Certificate{}, err
	}
	return tls.LoadX509KeyPair(certPath, keyPath)
}
