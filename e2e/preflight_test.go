//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
)

// limitedUser creates, in a new namespace enforcing Pod Security "baseline",
// a ServiceAccount that may do everything debugpod needs except create
// pods/exec, and returns the namespace, a rest.Config and a kubeconfig file
// authenticating as it (a TokenRequest token). Everything is deleted when
// the test ends.
func limitedUser(ctx context.Context, t *testing.T) (ns string, cfg *rest.Config, kubeconfig string) {
	t.Helper()
	ns = tempNamespace(ctx, t, "nodeexec-e2e-pf-", map[string]string{preflight.LabelEnforce: preflight.LevelBaseline})
	cfg, kubeconfig = rbacUser(ctx, t, ns, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update", "delete"}},
		// No pods/exec.
	})
	return ns, cfg, kubeconfig
}

// rbacUser creates in namespace ns a ServiceAccount bound to a Role of
// rules there and to a ClusterRole that may list and get nodes and get
// namespaces, and returns a rest.Config and a kubeconfig file
// authenticating as it (a TokenRequest token). Everything is deleted when
// the test ends.
func rbacUser(ctx context.Context, t *testing.T, ns string, rules []rbacv1.PolicyRule) (cfg *rest.Config, kubeconfig string) {
	t.Helper()
	name := "nodeexec-limited"
	cleanupCtx := context.WithoutCancel(ctx)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := env.client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(err)
	_, err = env.client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules,
	}, metav1.CreateOptions{})
	must(err)
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	_, err = env.client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}, metav1.CreateOptions{})
	must(err)
	// Cluster-wide: list nodes, read namespaces (Pod Security labels). Unique names: the cluster is shared.
	cluster := ns // the namespace name is unique
	_, err = env.client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: cluster},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "get"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = env.client.RbacV1().ClusterRoles().Delete(cleanupCtx, cluster, metav1.DeleteOptions{}) })
	_, err = env.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: cluster}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cluster},
	}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() {
		_ = env.client.RbacV1().ClusterRoleBindings().Delete(cleanupCtx, cluster, metav1.DeleteOptions{})
	})

	tok, err := env.client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](900)}}, metav1.CreateOptions{})
	must(err)
	cfg = rest.AnonymousClientConfig(env.config)
	cfg.BearerToken = tok.Status.Token

	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
	kc.CurrentContext = "x"
	kubeconfig = filepath.Join(t.TempDir(), "limited.kubeconfig")
	must(clientcmd.WriteToFile(*kc, kubeconfig))
	return cfg, kubeconfig
}

func TestPreflightLimitedUser(t *testing.T) {
	ctx := t.Context()
	ns, cfg, kubeconfig := limitedUser(ctx, t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node := env.nodes[0]

	t.Run("library", func(t *testing.T) {
		b := backend(t, func(o *debugpod.Options) { o.Client, o.Config, o.Namespace = client, cfg, ns })
		r, err := preflight.Check(ctx, preflight.For(b, client, node))
		if err != nil {
			t.Fatal(err)
		}
		if r.Enforce != preflight.LevelBaseline || r.LevelFits() || r.NamespaceErr != nil {
			t.Errorf("enforce %q fits %v (namespace err %v); want baseline, not fitting", r.Enforce, r.LevelFits(), r.NamespaceErr)
		}
		var missing []string
		for _, p := range r.Missing() {
			missing = append(missing, p.String())
		}
		if !slices.Equal(missing, []string{"create pods/exec"}) {
			t.Errorf("missing %v, want [create pods/exec]\n%s", missing, r)
		}
		if r.DryRun == nil || !strings.Contains(r.DryRun.Error(), "violates PodSecurity") {
			t.Errorf("dry-run error %v, want the API server's Pod Security refusal", r.DryRun)
		}
	})

	t.Run("cli run refused", func(t *testing.T) {
		_, stderr, code := cli(ctx, "", "--kubeconfig", kubeconfig, "run", "--profile", "sysadmin", "--node", node, "--", "true")
		if code != 2 {
			t.Errorf("exit %d, want 2; stderr:\n%s", code, stderr)
		}
		for _, s := range []string{
			`namespace "` + ns + `" enforces Pod Security level "baseline"`,
			`backend debugpod with profile sysadmin needs "privileged"`,
			"--profile baseline or --profile restricted fits this namespace",
			"RBAC: backend debugpod with profile sysadmin needs create pods/exec",
		} {
			if !strings.Contains(stderr, s) {
				t.Errorf("stderr lacks %q:\n%s", s, stderr)
			}
		}
	})

	t.Run("cli run default backend refused", func(t *testing.T) {
		_, stderr, code := cli(ctx, "", "--kubeconfig", kubeconfig, "run", "--node", node, "--", "true")
		for _, s := range []string{`backend nsenter needs "privileged"`, "--profile baseline or --profile restricted", "RBAC: backend nsenter needs create pods/exec"} {
			if code != 2 || !strings.Contains(stderr, s) {
				t.Errorf("exit %d (want 2), stderr lacks %q:\n%s", code, s, stderr)
			}
		}
	})

	t.Run("cli run baseline profile still lacks exec", func(t *testing.T) {
		_, stderr, code := cli(ctx, "", "--kubeconfig", kubeconfig, "run", "--profile", "baseline", "--node", node, "--", "true")
		if code != 2 || !strings.Contains(stderr, "needs create pods/exec") || strings.Contains(stderr, "Pod Security level") {
			t.Errorf("exit %d, stderr:\n%s\nwant 2 and only the missing pods/exec", code, stderr)
		}
	})

	t.Run("cli shell refused", func(t *testing.T) {
		_, stderr, code := cli(ctx, "", "--kubeconfig", kubeconfig, "shell", node)
		if code != 2 || !strings.Contains(stderr, "create pods/exec") {
			t.Errorf("exit %d, stderr:\n%s\nwant 2 and the missing pods/exec", code, stderr)
		}
	})

	t.Run("cli explain", func(t *testing.T) {
		stdout, stderr, code := cli(ctx, "", "--kubeconfig", kubeconfig, "run", "--explain", "--profile", "sysadmin", "--node", node, "--", "hostname")
		if code != 0 {
			t.Errorf("exit %d, want 0; stderr:\n%s", code, stderr)
		}
		for _, s := range []string{
			"nothing was created", "profile: sysadmin", "pod security level needed: privileged",
			`enforces "baseline"; the pod needs "privileged": REFUSED`,
			"create pods/exec                         DENIED", "create pods                              allowed",
			"dry-run create: REFUSED", "kind: Pod", "privileged: true", "nodeName: " + node,
		} {
			if !strings.Contains(stdout, s) {
				t.Errorf("explain output lacks %q:\n%s", s, stdout)
			}
		}
	})

	// Nothing was created by any of the above.
	if pods := managedPods(ctx, t, ns); len(pods) != 0 {
		t.Errorf("%d pods in %s, want none", len(pods), ns)
	}
	events, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 0 {
		t.Errorf("%d events in %s (something was created): %v", len(events.Items), ns, events.Items[0].Message)
	}
}

// TestPreflightResidentWrapper: with --use-resident the backend is wrapped;
// preflight still sees the wrapped backend's pod, so a namespace enforcing
// "baseline" refuses the nsenter backend (its fallback pod is privileged)
// before anything is created, and --explain shows the resident path, then
// the fallback pod.
func TestPreflightResidentWrapper(t *testing.T) {
	ctx := t.Context()
	ns := tempNamespace(ctx, t, "nodeexec-e2e-resident-baseline-", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"})
	node := env.nodes[0]
	base := []string{"run", "-n", ns, "--backend", "nsenter", "--use-resident", "--agent-image", agentImage(), "--node", node}
	_, stderr, code := cli(ctx, "", append(base, "--", "true")...)
	if code != 2 || !strings.Contains(stderr, `enforces Pod Security level "baseline"`) || !strings.Contains(stderr, "privileged") {
		t.Errorf("--use-resident in a baseline namespace: exit %d, stderr:\n%s\nwant exit 2 naming the level", code, stderr)
	}
	stdout, stderr, code := cli(ctx, "", append(base, "--explain", "--", "true")...)
	for _, want := range []string{"# resident agents (namespace nodeexec-agents): on node " + node, `"agent" "nsenter"`, "pod security level needed: privileged", "kind: Pod"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--explain with --use-resident lacks %q: exit %d\n%s\n%s", want, code, stdout, stderr)
		}
	}
	// The runtime backend declares its agent pod's level too (it used to
	// skip the Pod Security check): refused before anything is created.
	target := rtTargetPod(ctx, t, node, "exec sleep 3600", true)
	_, stderr, code = cli(ctx, "", "run", "-n", ns, "--backend", "runtime", "--pod", "default/"+target.Name, "--container", "app",
		"--agent-image", agentImage(), "--", "true")
	if code != 2 || !strings.Contains(stderr, `enforces Pod Security level "baseline"`) || !strings.Contains(stderr, "backend runtime needs \"privileged\"") {
		t.Errorf("runtime backend in a baseline namespace: exit %d, stderr:\n%s\nwant exit 2 naming the level", code, stderr)
	}
	if pods := managedPods(ctx, t, ns); len(pods) != 0 {
		t.Errorf("%d pods created", len(pods))
	}
}
