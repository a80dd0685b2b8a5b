package testcluster

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestPKI(t *testing.T) {
	dir := t.TempDir()
	l := testLayout(t)
	c, err := ensureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	specs := append(controlPlaneCerts(l), nodeCerts(l.node(2))...)
	for _, s := range specs {
		if err := c.ensureCert(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := ensureServiceAccountKey(dir); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.cert)
	load := func(name string) *x509.Certificate {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := parseCertPEM(b)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}

	api := load("apiserver")
	if _, err := api.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kubernetes.default.svc"}); err != nil {
		t.Errorf("apiserver cert: %v", err)
	}
	for _, ip := range []string{"127.0.0.1", "10.251.0.11", "10.97.0.1"} {
		if !slices.ContainsFunc(api.IPAddresses, func(a net.IP) bool { return a.Equal(net.ParseIP(ip)) }) {
			t.Errorf("apiserver cert lacks IP %s", ip)
		}
	}
	kl := load("kubelet-nodeexec-tc-2")
	if kl.Subject.CommonName != "system:node:nodeexec-tc-2" || !slices.Equal(kl.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("kubelet client subject %v", kl.Subject)
	}
	if _, err := kl.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client cert: %v", err)
	}
	serving := load("kubelet-nodeexec-tc-2-serving")
	if err := serving.VerifyHostname("10.251.0.12"); err != nil {
		t.Errorf("kubelet serving cert: %v", err)
	}
	if admin := load("admin"); !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject %v", admin.Subject)
	}

	// existing certificates are kept; the CA loads back
	before, _ := os.ReadFile(filepath.Join(dir, "admin.crt"))
	c2, err := ensureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.ensureCert(dir, controlPlaneCerts(l)[2]); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "admin.crt")); string(before) != string(after) {
		t.Error("admin certificate regenerated")
	}

	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(kc, dir, "https://127.0.0.1:16443", "admin"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:16443" || len(cfg.TLSClientConfig.CertData) == 0 || len(cfg.TLSClientConfig.CAData) == 0 {
		t.Errorf("rest config %+v", cfg)
	}
}
