package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AuditAllGroup is the group whose every request kube-apiserver's audit log
// records, at the Metadata level (verb, URI, object, response code; no
// bodies, except for pod and ephemeral container writes, recorded at the
// Request level for everyone), whatever the resource: benchmarks give a client under test a user
// in it (AuditedUser) and count that user's requests exactly, 429s included,
// apart from everyone else's.
const AuditAllGroup = "nodeexec-tc:audit-all"

// ErrAuditPolicyStale is AuditedUser's error when the running cluster's audit
// policy predates AuditAllGroup.
var ErrAuditPolicyStale = errors.New("audit policy without the audit-all rule")

// auditedUserName is what AuditedUser accepts as a user name.
var auditedUserName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// AuditedUser writes <dir>/<name>.kubeconfig for a new client certificate
// user name (a DNS-label-like name: lower-case letters, digits, '-', '.'),
// member of system:masters and AuditAllGroup, against the API server on the
// host port, and returns its path. The audit log (AuditLog) then has one
// line per request of that user, with "username":"<name>".
//
// A cluster started before AuditAllGroup existed runs an older audit policy:
// AuditedUser then fails with ErrAuditPolicyStale (it never restarts the
// shared API server; restarted is always false). Errors: a bad name, the CA
// or the state directory unreadable, ErrAuditPolicyStale.
func (c *Cluster) AuditedUser(ctx context.Context, name, dir string) (kubeconfig string, restarted bool, err error) {
	if !auditedUserName.MatchString(name) {
		return "", false, fmt.Errorf("testcluster: audited user %q: give lower-case letters, digits, '-' and '.'", name)
	}
	l := c.r.l
	cur, err := os.ReadFile(l.auditPolicyFile())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("testcluster: audit policy: %w", err)
	}
	if !bytes.Equal(cur, []byte(auditPolicy)) {
		// Never restarted from here: the cluster is shared, and a restart
		// under load can fail to bind its port (seen twice).
		return "", false, fmt.Errorf("testcluster: %w: %s is not this build's (the %s rule, Request level for pods, ephemeral containers, NodeScripts and Lease creations); recreate the cluster (make cluster-down cluster-up) when nobody else uses it", ErrAuditPolicyStale, l.auditPolicyFile(), AuditAllGroup)
	}
	authority, err := ensureCA(l.pki)
	if err != nil {
		return "", restarted, fmt.Errorf("testcluster: %w", err)
	}
	crtPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	der, key, err := authority.sign(certSpec{Name: name, CommonName: name, Organization: []string{"system:masters", AuditAllGroup}, Client: true})
	if err != nil {
		return "", restarted, fmt.Errorf("testcluster: certificate of %s: %w", name, err)
	}
	if err := writeKeyPair(crtPath, keyPath, der, key); err != nil {
		return "", restarted, fmt.Errorf("testcluster: certificate of %s: %w", name, err)
	}
	crt, err := os.ReadFile(crtPath)
	if err != nil {
		return "", restarted, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return "", restarted, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodeexec-tc"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:" + strconv.Itoa(c.r.o.APIPort), CertificateAuthorityData: authority.certPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: keyPEM}
	cfg.Contexts["nodeexec-tc"] = &clientcmdapi.Context{Cluster: "nodeexec-tc", AuthInfo: name}
	cfg.CurrentContext = "nodeexec-tc"
	kubeconfig = filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return "", restarted, fmt.Errorf("testcluster: kubeconfig of %s: %w", name, err)
	}
	return kubeconfig, restarted, nil
}
