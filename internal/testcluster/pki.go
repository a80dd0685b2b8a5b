package testcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// certSpec describes one leaf certificate signed by the cluster CA
// (ECDSA P-256, 10 years). Files: <Name>.crt and <Name>.key in the PKI directory.
type certSpec struct {
	Name         string
	CommonName   string
	Organization []string
	IPs          []string
	DNSNames     []string
	Server       bool // ExtKeyUsageServerAuth
	Client       bool // ExtKeyUsageClientAuth
}

// controlPlaneCerts are the certificates the control plane and the host admin use.
func controlPlaneCerts(l layout) []certSpec {
	return []certSpec{
		{Name: "apiserver", CommonName: "kube-apiserver", Server: true,
			IPs: []string{"127.0.0.1", l.hubIP(), serviceIP},
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"}},
		{Name: "apiserver-kubelet-client", CommonName: "kube-apiserver-kubelet-client",
			Organization: []string{"system:masters"}, Client: true},
		{Name: "admin", CommonName: "nodeexec-tc-admin", Organization: []string{"system:masters"}, Client: true},
		{Name: "controller-manager", CommonName: "system:kube-controller-manager", Client: true},
		{Name: "scheduler", CommonName: "system:kube-scheduler", Client: true},
	}
}

// nodeCerts are a node's kubelet client certificate (Node authorizer and
// NodeRestriction identify it by CN=system:node:<name>, O=system:nodes) and its
// kubelet serving certificate (the API server verifies it with the cluster CA).
func nodeCerts(n nodeSpec) []certSpec {
	return []certSpec{
		{Name: "kubelet-" + n.Name, CommonName: "system:node:" + n.Name,
			Organization: []string{"system:nodes"}, Client: true},
		{Name: "kubelet-" + n.Name + "-serving", CommonName: n.Name, Server: true,
			IPs: []string{n.IP}, DNSNames: []string{n.Name}},
	}
}

type ca struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// ensureCA loads the CA from dir, creating it first if absent.
func ensureCA(dir string) (*ca, error) {
	crtPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := os.Stat(crtPath); errors.Is(err, os.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("CA key: %w", err)
		}
		tmpl := &x509.Certificate{
			SerialNumber:          randomSerial(),
			Subject:               pkix.Name{CommonName: "nodeexec-testcluster-ca"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().AddDate(10, 0, 0),
			IsCA:                  true,
			BasicConstraintsValid: true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
			SubjectKeyId:          keyID(&key.PublicKey),
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, fmt.Errorf("CA certificate: %w", err)
		}
		if err := writeKeyPair(crtPath, keyPath, der, key); err != nil {
			return nil, err
		}
	}
	certPEM, err := os.ReadFile(crtPath)
	if err != nil {
		return nil, err
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", crtPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%s: no PEM block", keyPath)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	return &ca{cert: cert, certPEM: certPEM, key: key}, nil
}

// ensureCert creates <dir>/<s.Name>.{crt,key} signed by c unless the certificate exists.
func (c *ca) ensureCert(dir string, s certSpec) error {
	crtPath, keyPath := filepath.Join(dir, s.Name+".crt"), filepath.Join(dir, s.Name+".key")
	if _, err := os.Stat(crtPath); err == nil {
		return nil
	}
	der, key, err := c.sign(s)
	if err != nil {
		return fmt.Errorf("certificate %s: %w", s.Name, err)
	}
	return writeKeyPair(crtPath, keyPath, der, key)
}

// sign makes a new key and a certificate for s.
func (c *ca) sign(s certSpec) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: s.CommonName, Organization: s.Organization},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		DNSNames:              s.DNSNames,
		AuthorityKeyId:        c.cert.SubjectKeyId,
	}
	if s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, ip := range s.IPs {
		p := net.ParseIP(ip)
		if p == nil {
			return nil, nil, fmt.Errorf("bad IP %q", ip)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, p)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	return der, key, err
}

// ensureServiceAccountKey creates sa.key (RSA 2048) and sa.pub unless present.
func ensureServiceAccountKey(dir string) error {
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if _, err := os.Stat(pubPath); err == nil {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func writeKeyPair(crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	// the certificate last: its existence means the pair is complete
	return writeFileAtomic(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(blk.Bytes)
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha1.Sum(b)
	return sum[:]
}

// kubeconfig renders a kubeconfig with embedded credentials of certificate certName.
func kubeconfig(pkiDir, server, certName string) (*clientcmdapi.Config, error) {
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	crt, err := os.ReadFile(filepath.Join(pkiDir, certName+".crt"))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(pkiDir, certName+".key"))
	if err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodeexec-tc"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[certName] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["nodeexec-tc"] = &clientcmdapi.Context{Cluster: "nodeexec-tc", AuthInfo: certName}
	cfg.CurrentContext = "nodeexec-tc"
	return cfg, nil
}

func writeKubeconfig(path, pkiDir, server, certName string) error {
	cfg, err := kubeconfig(pkiDir, server, certName)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if err := clientcmd.WriteToFile(*cfg, path+".tmp"); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return os.Rename(path+".tmp", path)
}
