//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestBadInput: at least 30 kinds of bad input through the real CLI binary
// against the real cluster, one table. Each gives exit status 2, exactly one
// error line naming the flag or field (and what to give instead), nothing
// on stdout, quickly, and creates nothing: managed pods, pods in the
// Pod-Security-baseline namespace, DaemonSets, NodeScripts, Leases and
// managed namespaces are listed before and after.
func TestBadInput(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t) // the NodeScript CRD, so that NodeScripts can be listed
	dir := t.TempDir()
	node := env.nodes[0]

	unreachable, unreachableAddr := unreachableKubeconfig(t, dir)
	// The real API server with a token it never issued.
	bogus := writeKubeconfig(t, dir, "bogus", env.config.Host, "bogus-token")
	// A ServiceAccount with no rights at all.
	noRights := rbacLimitedKubeconfig(ctx, t, dir)

	script := filepath.Join(dir, "fix.sh")
	if err := os.WriteFile(script, []byte("hostname\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodeScript := func(name, extra string) string {
		f := filepath.Join(dir, name+".yaml")
		doc := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: " + name + "}\nspec:\n  nodeSelector: {}\n  script: 'true'\n" + extra
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}

	tests := []struct {
		name string
		args []string
		want []string
	}{
		// Targets.
		{"unknown node", []string{"run", "--node", "no-such-node", "--", "true"}, []string{`node not found: ["no-such-node"]`}},
		{"empty node", []string{"run", "--node", "", "--", "true"}, []string{`--node ""`, "name a node"}},
		{"invalid node name", []string{"run", "--node", "Node_1", "--", "true"}, []string{`--node "Node_1"`, "not a node name"}},
		{"selector matches nothing", []string{"run", "--selector", "nodeexec-e2e=nothing", "--", "true"}, []string{`label selector "nodeexec-e2e=nothing" matched no node`}},
		{"malformed selector", []string{"run", "--selector", "a in (b", "--", "true"}, []string{`--selector "a in (b"`, "invalid label selector"}},
		{"empty selector", []string{"run", "--selector", "", "--", "true"}, []string{"--selector is empty", "--all"}},
		{"no target", []string{"run", "--", "true"}, []string{"exactly one of", "--node", "--selector", "--all"}},
		{"conflicting targets", []string{"run", "--node", node, "--all", "--", "true"}, []string{"exactly one of"}},
		// The command.
		{"no command", []string{"run", "--all"}, []string{"no command"}},
		{"unreadable script", []string{"run", "--all", "--script", "/nonexistent/fix.sh"}, []string{"--script", "/nonexistent/fix.sh", "no such file"}},
		{"script and command", []string{"run", "--all", "--script", script, "--", "true"}, []string{"--script", "not both"}},
		{"flag after the command", []string{"run", "--all", "echo", "-n", "hi"}, []string{`flag -n after the command "echo"`, "-- echo -n hi"}},
		{"env without =", []string{"run", "--all", "-e", "FOO", "--", "true"}, []string{`--env "FOO"`, "KEY=VALUE"}},
		// Durations, counts, percentages, quantities.
		{"zero timeout", []string{"run", "--all", "--timeout", "0s", "--", "true"}, []string{"--timeout 0s", "positive duration"}},
		{"negative timeout", []string{"run", "--all", "--timeout", "-5s", "--", "true"}, []string{"--timeout -5s", "positive duration"}},
		{"malformed timeout", []string{"run", "--all", "--timeout", "soon", "--", "true"}, []string{"soon", "timeout"}},
		{"zero max-concurrency", []string{"run", "--all", "--max-concurrency", "0", "--", "true"}, []string{"--max-concurrency 0", "positive"}},
		{"batch overflow", []string{"run", "--all", "--batch", "4294967297", "--", "true"}, []string{`--batch: "4294967297" is too large`}},
		{"batch over 100%", []string{"run", "--all", "--batch", "150%", "--", "true"}, []string{`--batch "150%"`, "1% to 100%"}},
		{"max-errors word", []string{"run", "--all", "--max-errors", "few", "--", "true"}, []string{`--max-errors: "few"`, "percentage"}},
		{"negative retries", []string{"run", "--all", "--retries", "-1", "--", "true"}, []string{"--retries -1", "0 or more"}},
		{"negative cpu request", []string{"run", "--all", "--cpu-request", "-1", "--", "true"}, []string{`--cpu-request "-1"`, "negative"}},
		{"malformed memory request", []string{"run", "--all", "--memory-request", "1 GB", "--", "true"}, []string{`--memory-request "1 GB"`}},
		{"qps NaN", []string{"--qps", "NaN", "run", "--all", "--", "true"}, []string{"--qps NaN", "finite"}},
		// Backends, profiles, images, namespaces.
		{"unknown backend", []string{"run", "--all", "--backend", "ssh", "--", "true"}, []string{`unknown --backend "ssh"`, "debugpod"}},
		{"unknown profile", []string{"run", "--all", "--profile", "admin", "--", "true"}, []string{`unknown --profile "admin"`, "sysadmin"}},
		{"empty image", []string{"run", "--all", "--image", "", "--", "true"}, []string{"--image is empty", "busybox:1.36"}},
		{"image with a space", []string{"run", "--all", "--image", "busy box", "--", "true"}, []string{`--image "busy box"`, "not a valid image reference"}},
		{"bad nsenter namespaces", []string{"run", "--all", "--backend", "nsenter", "--namespaces", "mnt,foo", "--", "true"}, []string{"--namespaces", `"foo"`, "mnt, uts"}},
		{"bad namespace name", []string{"-n", "Not_A_Namespace", "run", "--all", "--", "true"}, []string{`--namespace "Not_A_Namespace"`}},
		{"PSA-restricted namespace", []string{"-n", testcluster.BaselineNamespace, "run", "--node", node, "--", "true"}, []string{`enforces Pod Security level "baseline"`, "--profile baseline"}},
		{"missing image, never pulled", []string{"run", "--node", node, "--image", "nodeexec.invalid/missing:1", "--image-pull-policy", "Never", "--", "true"}, []string{"nodeexec.invalid/missing:1"}},
		// Identity and reachability.
		{"unreachable API server", []string{"--kubeconfig", unreachable, "run", "--all", "--", "true"}, []string{"listing nodes", unreachableAddr, "connection refused"}},
		{"invalid credentials", []string{"--kubeconfig", bogus, "run", "--all", "--", "true"}, []string{"Unauthorized", "rejected the credentials", "--context"}},
		{"RBAC-limited user", []string{"--kubeconfig", noRights, "run", "--all", "--", "true"}, []string{"forbidden", `cannot list resource "nodes"`, "kubectl auth can-i"}},
		// shell.
		{"shell flag after the command", []string{"shell", node, "bash", "--timeout", "5m"}, []string{`flag --timeout after the command "bash"`}},
		{"shell negative timeout", []string{"shell", node, "--timeout", "-1m"}, []string{"--timeout -1m0s"}},
		{"shell unknown profile", []string{"shell", node, "--profile", "root"}, []string{`unknown --profile "root"`}},
		// gc.
		{"gc with an argument", []string{"gc", "extra"}, []string{"gc takes no arguments", "extra"}},
		// apply, status, promote, watch: NodeScript fields and names.
		{"apply unreadable file", []string{"apply", "-f", "/nonexistent/x.yaml"}, []string{"--filename", "/nonexistent/x.yaml"}},
		{"apply malformed timeout", []string{"apply", "-f", nodeScript("e2e-bad-timeout", "  timeout: abc\n")}, []string{`spec.timeout: Invalid value: "abc"`, "30s"}},
		{"apply negative soak", []string{"apply", "-f", nodeScript("e2e-bad-soak", "  rollout: {soakTime: -1m}\n")}, []string{"spec.rollout.soakTime", "0 or more"}},
		{"apply bad image", []string{"apply", "-f", nodeScript("e2e-bad-image", "  backend: {image: 'busy box'}\n")}, []string{"spec.backend.image", "not a valid image reference"}},
		{"apply bogus taint effect", []string{"apply", "-f", nodeScript("e2e-bad-taint", "  startupTaint: {key: k, effect: Sometimes}\n")}, []string{"spec.startupTaint.effect", `"Sometimes"`}},
		{"apply concurrency 150%", []string{"apply", "-f", nodeScript("e2e-bad-conc", "  rollout: {maxConcurrency: 150%}\n")}, []string{"spec.rollout.maxConcurrency"}},
		{"status bad name", []string{"status", "Fix_It"}, []string{`NodeScript NAME "Fix_It"`}},
		{"promote bad selector", []string{"promote", "fix", "--to", "a in ("}, []string{`--to "a in ("`}},
		{"watch zero workers", []string{"watch", "--workers", "0"}, []string{"--workers 0"}},
		// agent.
		{"agent install negative timeout", []string{"agent", "install", "--timeout", "-1s"}, []string{"--timeout -1s"}},
		{"agent install bad image", []string{"agent", "install", "--agent-image", "a b"}, []string{`--agent-image "a b"`}},
		{"agent nsenter zero target", []string{"agent", "nsenter", "--target", "0", "--", "true"}, []string{"--target 0"}},
	}
	if len(tests) < 30 {
		t.Fatalf("%d cases, want at least 30", len(tests))
	}
	before := clusterObjects(ctx, t, dyn)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refused(ctx, t, tc.args, tc.want...)
		})
	}
	// Objects a refused run created and deleted at once (the missing image)
	// are gone by now; nothing else may have been created.
	var after []string
	waitFor(30*time.Second, func() bool { after = clusterObjects(ctx, t, dyn); return slices.Equal(before, after) })
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("objects changed by bad input (-before +after):\n%s", d)
	}

	// The same mistakes through the library: sentinels callers branch on.
	b := backend(t, nil)
	r := runner(t, b)
	if _, err := r.Run(ctx, nodeexec.Targets{Nodes: []string{"no-such-node"}}, nodeexec.Request{Command: []string{"true"}}); !errors.Is(err, nodeexec.ErrNodeNotFound) {
		t.Errorf("unknown node: err %v, want ErrNodeNotFound", err)
	}
	if _, err := r.Run(ctx, nodeexec.Targets{Selector: "nodeexec-e2e=nothing"}, nodeexec.Request{Command: []string{"true"}}); !errors.Is(err, nodeexec.ErrNoNodes) {
		t.Errorf("selector: err %v, want ErrNoNodes", err)
	}
}

// TestFlagsAfterArguments: flags given after the positional arguments are
// nodeexec's, never the remote command (README's `shell NODE --profile
// baseline --timeout 5m`), and -e values are never split on commas.
func TestFlagsAfterArguments(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	// --explain prints the pod and creates nothing.
	stdout, stderr, code := cli(ctx, "", "shell", node, "--profile", "baseline", "--timeout", "5m", "--explain")
	if code != 0 {
		t.Fatalf("shell NODE --profile baseline --timeout 5m --explain: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"# profile: baseline", "activeDeadlineSeconds: 330"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("explain output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, `"--profile"`) {
		t.Errorf("--profile reached the remote command:\n%s", stdout)
	}
	// -e OPTS=a=1,b=2 is one variable; global flags after the command work.
	stdout, stderr, code = cli(ctx, "", "run", "--node", node, "-e", "OPTS=a=1,b=2", "-e", "SP= x ", "--no-prefix", "--", "sh", "-c", `printf '%s|%s|%s\n' "$OPTS" "$SP" "${b-unset}"`)
	if code != 0 || stdout != "a=1,b=2| x |unset\n" {
		t.Errorf("-e: exit %d stdout %q, want %q\n%s", code, stdout, "a=1,b=2| x |unset\n", stderr)
	}
}

// writeKubeconfig writes a kubeconfig for server (the suite's CA) with a
// bearer token, and returns its path.
func writeKubeconfig(t *testing.T, dir, name, server, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = env.config.CAData
	if len(cluster.CertificateAuthorityData) == 0 && env.config.CAFile != "" {
		cluster.CertificateAuthority = env.config.CAFile
	}
	user := clientcmdapi.NewAuthInfo()
	user.Token = token
	kctx := clientcmdapi.NewContext()
	kctx.Cluster, kctx.AuthInfo = "c", "u"
	cfg.Clusters["c"], cfg.AuthInfos["u"], cfg.Contexts["c"] = cluster, user, kctx
	cfg.CurrentContext = "c"
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// rbacLimitedKubeconfig creates a ServiceAccount with no role bindings and
// returns a kubeconfig with a short-lived token of it; the account is
// deleted when the test ends.
func rbacLimitedKubeconfig(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	name := uniqueName("nodeexec-e2e-norights-")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := env.client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().ServiceAccounts("default").Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	tr, err := env.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return writeKubeconfig(t, dir, "norights", env.config.Host, tr.Status.Token)
}

// clusterObjects lists, sorted, what bad input must never create: managed
// pods (every namespace), every pod of the Pod-Security-baseline namespace,
// DaemonSets, NodeScripts, Leases (but the nodes' heartbeats) and managed
// namespaces.
func clusterObjects(ctx context.Context, t *testing.T, dyn dynamic.Interface) []string {
	t.Helper()
	managed := metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue}
	var out []string
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	pods, err := env.client.CoreV1().Pods("").List(ctx, managed)
	must(err)
	for _, p := range pods.Items {
		// A pod already being deleted (an earlier test's run pod in its
		// grace period) goes whatever the input: it is not counted.
		if p.DeletionTimestamp == nil {
			out = append(out, "pod/"+p.Namespace+"/"+p.Name)
		}
	}
	pods, err = env.client.CoreV1().Pods(testcluster.BaselineNamespace).List(ctx, metav1.ListOptions{})
	must(err)
	for _, p := range pods.Items {
		out = append(out, "pod/"+p.Namespace+"/"+p.Name)
	}
	dss, err := env.client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	must(err)
	for _, d := range dss.Items {
		out = append(out, "daemonset/"+d.Namespace+"/"+d.Name)
	}
	nss, err := dyn.Resource(v1alpha1.Resource).List(ctx, metav1.ListOptions{})
	must(err)
	for _, n := range nss.Items {
		out = append(out, "nodescript/"+n.GetName())
	}
	leases, err := env.client.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
	must(err)
	for _, l := range leases.Items {
		if l.Namespace != corev1.NamespaceNodeLease {
			out = append(out, "lease/"+l.Namespace+"/"+l.Name)
		}
	}
	namespaces, err := env.client.CoreV1().Namespaces().List(ctx, managed)
	must(err)
	for _, n := range namespaces.Items {
		out = append(out, "namespace/"+n.Name)
	}
	slices.Sort(out)
	return out
}

// TestPodSecurityRefusal: a namespace enforcing baseline refuses the
// sysadmin pod; nodeexec says which level and how to fix it, before
// creating anything.
func TestPodSecurityRefusal(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "nodeexec-e2e-baseline",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"},
	}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns.Name, metav1.DeleteOptions{})
	})
	// The default backend (nsenter): which level it needs, how to relabel.
	_, stderr, code := cli(ctx, "", "-n", ns.Name, "run", "--all", "--", "true")
	for _, want := range []string{
		`namespace "nodeexec-e2e-baseline" enforces Pod Security level "baseline"`,
		`backend nsenter needs "privileged"`,
		"kubectl label namespace nodeexec-e2e-baseline pod-security.kubernetes.io/enforce=privileged",
	} {
		if !strings.Contains(stderr, want) || code != 2 {
			t.Errorf("default backend: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}
	// kubectl's sysadmin profile (debugpod): the preflight refuses before
	// anything is created: which level the namespace enforces, what the
	// profile needs, what fits, how to relabel.
	_, stderr, code = cli(ctx, "", "-n", ns.Name, "run", "--all", "--profile", "sysadmin", "--", "true")
	for _, want := range []string{
		`namespace "nodeexec-e2e-baseline" enforces Pod Security level "baseline"`,
		`backend debugpod with profile sysadmin needs "privileged"`,
		"--profile baseline or --profile restricted fits this namespace",
		"kubectl label namespace nodeexec-e2e-baseline pod-security.kubernetes.io/enforce=privileged",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	b := backend(t, func(o *debugpod.Options) { o.Namespace = ns.Name })
	if _, err := runner(t, b).Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}}); !errors.Is(err, nodeexec.ErrForbidden) {
		t.Errorf("library: err %v, want ErrForbidden", err)
	}
	pods, err := env.client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods created in the refusing namespace", len(pods.Items))
	}
	// baseline fits: the same namespace runs the baseline profile.
	if stdout, stderr, code := cli(ctx, "", "-n", ns.Name, "run", "--node", env.nodes[0], "--profile", "baseline", "--", "echo", "fits"); code != 0 || !strings.Contains(stdout, "fits") {
		t.Errorf("baseline profile in a baseline namespace: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}
