//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec/preflight"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// faithfulValue is an -e value that the kubelet's $(VAR) expansion would
// change if it reached a pod spec unescaped.
const faithfulValue = "pa$$word $(HOME) `x` 'q'"

// faithfulScript prints $X, proves `$$` is the shell's own PID, and runs
// awk with a `$1` — what the kubelet's expansion used to mangle.
const faithfulScript = `printf '%s\n' "$X"; kill -0 $$ && echo alive; echo 'a b' | awk '{print $1}'`

// TestFaithfulCommands: commands, scripts and -e values arrive byte for
// byte through every backend (the kubelet expands $(VAR) and $$ in pod
// specs; nodeexec escapes what it puts there).
func TestFaithfulCommands(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	target := rtTargetPod(ctx, t, node, "exec sleep 3600", true)
	want := faithfulValue + "\nalive\na\n"
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"debugpod", []string{"--node", node, "--image", env.image}},
		{"nsenter", []string{"--backend", "nsenter", "--node", node, "--agent-image", agentImage()}},
		{"runtime", []string{"--backend", "runtime", "--pod", "default/" + target.Name, "--container", "app", "--agent-image", agentImage(),
			"--runtime-endpoint", "/run/nodeexec-testcluster/containerd-" + node + ".sock"}},
		{"ephemeral", []string{"--backend", "ephemeral", "--pod", "default/" + target.Name, "--container", "app", "--image", env.image}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run", "--no-prefix", "-e", "X=" + faithfulValue}, tc.args...), "--", "sh", "-c", faithfulScript)
			stdout, stderr, code := cli(ctx, "", args...)
			if code != 0 || stdout != want {
				t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr:\n%s", code, stdout, want, stderr)
			}
		})
	}
}

// TestWatcherFaithfulScript: a NodeScript's script runs as written, with
// both node backends: `$$`, `$(NODE_NAME)` and awk's `$1` are not expanded
// by the kubelet.
func TestWatcherFaithfulScript(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	node := env.nodes[0]
	want := "pa$$word\n$(NODE_NAME)\nalive\na\n"
	for _, backend := range []string{"debugpod", "nsenter"} {
		t.Run(backend, func(t *testing.T) {
			name := uniqueName("e2e-faithful-")
			cleanupNodeScript(t, dyn, name)
			image := env.image
			if backend == "nsenter" {
				image = agentImage()
			}
			applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  backend: {name: %s, image: %q}
  recordOutput: true
  script: |
    printf '%%s\n' 'pa$$word' '$(NODE_NAME)'; kill -0 $$ && echo alive; echo 'a b' | awk '{print $1}'
`, name, node, backend, image))
			waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
				return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Nodes == 1
			})
			if s, _ := nodeState(ctx, t, node, name); s.Phase != v1alpha1.PhaseSucceeded || nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun) != want {
				t.Errorf("state %+v\noutput %q\nwant   %q", s, nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun), want)
			}
		})
	}
}

// TestSecretEnv: --env-from-secret NAME:KEY and NAME put a Secret's values
// in the command's environment through the debugpod, nsenter and ephemeral
// backends; the value is in no pod spec, annotation or --explain output; a
// missing Secret or key fails the run before anything is created, naming it.
func TestSecretEnv(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	name := "nodeexec-e2e-secret-" + randomSuffix()
	const value = "s3cr3t $$(X) `y`"
	secrets := env.client.CoreV1().Secrets("default")
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
		StringData: map[string]string{"TOKEN": value, "OTHER": "o"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
	target := rtTargetPod(ctx, t, node, "exec sleep 3600", true)
	want := value + "|o\n"
	script := `printf '%s|%s\n' "$TOKEN" "$OTHER"`
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"debugpod", []string{"--node", node, "--image", env.image}},
		{"nsenter", []string{"--backend", "nsenter", "--node", node, "--agent-image", agentImage()}},
		{"ephemeral", []string{"--backend", "ephemeral", "--pod", "default/" + target.Name, "--container", "app", "--image", env.image}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run", "--no-prefix", "--env-from-secret", name + ":TOKEN", "--env-from-secret", name}, tc.args...), "--", "sh", "-c", script)
			stdout, stderr, code := cli(ctx, "", args...)
			if code != 0 || stdout != want {
				t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr:\n%s", code, stdout, want, stderr)
			}
			if tc.name == "ephemeral" {
				return
			}
			explain := append(append([]string{"run", "--explain", "--env-from-secret", name + ":TOKEN"}, tc.args...), "--", "true")
			stdout, stderr, _ = cli(ctx, "", explain...)
			if !strings.Contains(stdout, "secretKeyRef") || strings.Contains(stdout, "s3cr3t") {
				t.Errorf("--explain: want the secretKeyRef and no value:\n%s\n%s", stdout, stderr)
			}
		})
	}
	// A missing Secret or key is bad input: the preflight's GET finds it
	// before any pod is created (exit 2, naming it).
	for _, tc := range []struct{ flag, want string }{
		{"nodeexec-e2e-absent:X", `secrets "nodeexec-e2e-absent" not found in namespace "default"`},
		{"nodeexec-e2e-absent", `secrets "nodeexec-e2e-absent" not found in namespace "default"`},
		{name + ":NOPE", `Secret default/` + name + ` has no key "NOPE" (its keys: OTHER, TOKEN)`},
	} {
		_, stderr, code := cli(ctx, "", "run", "--node", node, "--image", env.image, "--env-from-secret", tc.flag, "--", "true")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("--env-from-secret %s: exit %d, want 2 and an error saying %q:\n%s", tc.flag, code, tc.want, stderr)
		}
	}
}

// TestSecretEnvWithoutSecretAccess: a caller RBAC does not let GET Secrets
// can still name one in --env-from-secret: the preflight's GET is
// Forbidden and leaves the check to the kubelet, which reads the Secret for
// the pod. A Secret that exists gives its value; a missing one fails the
// run (not exit 0, not a hang) with the kubelet's message naming it, and
// leaves no pod behind.
func TestSecretEnvWithoutSecretAccess(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	ns := tempNamespace(ctx, t, "nodeexec-e2e-sec-", map[string]string{preflight.LabelEnforce: preflight.LevelPrivileged})
	cfg, kubeconfig := rbacUser(ctx, t, ns, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach"}, Verbs: []string{"create", "get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update", "delete"}},
		// No secrets.
	})
	const secret, value = "nodeexec-e2e-noaccess", "v4lue"
	if _, err := env.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret},
		StringData: map[string]string{"TOKEN": value}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	limited, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := limited.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("GET of the Secret as the limited user: %v, want Forbidden (the case under test)", err)
	}
	run := func(from string) (string, string, int) {
		return cliAs(ctx, kubeconfig, "", "run", "--no-prefix", "--namespace", ns, "--node", node, "--image", env.image,
			"--timeout", "60s", "--env-from-secret", from, "--", "sh", "-c", `printf '%s\n' "$TOKEN"`)
	}
	if stdout, stderr, code := run(secret + ":TOKEN"); code != 0 || stdout != value+"\n" {
		t.Errorf("existing Secret: exit %d, stdout %q, want 0 and %q\nstderr:\n%s", code, stdout, value+"\n", stderr)
	}
	start := time.Now()
	stdout, stderr, code := run("nodeexec-e2e-absent:TOKEN")
	if code == 0 || !strings.Contains(stderr, `"nodeexec-e2e-absent" not found`) {
		t.Errorf("missing Secret: exit %d after %s, want a failure naming it\nstdout %q\nstderr:\n%s", code, time.Since(start).Round(time.Millisecond), stdout, stderr)
	}
	waitFor(30*time.Second, func() bool { return len(managedPods(ctx, t, ns)) == 0 })
	if pods := managedPods(ctx, t, ns); len(pods) > 0 {
		t.Errorf("%d nodeexec pods left in %s: %s", len(pods), ns, pods[0].Name)
	}
}

// TestWatcherSecretEnv: a NodeScript's spec.secretEnv gives its script a
// Secret's value, by reference (the run pod holds a secretKeyRef).
func TestWatcherSecretEnv(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	node := env.nodes[0]
	secret := "nodeexec-e2e-nssecret-" + randomSuffix()
	secrets := env.client.CoreV1().Secrets(v1alpha1.DefaultNamespace)
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret},
		StringData: map[string]string{"TOKEN": "s3cr3t $$ x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), secret, metav1.DeleteOptions{}) })
	name := uniqueName("e2e-secretenv-")
	cleanupNodeScript(t, dyn, name)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  backend: {name: nsenter, image: %q}
  secretEnv: [{secret: %s, key: TOKEN}]
  recordOutput: true
  script: |
    [ "$TOKEN" = 's3cr3t $$ x' ] && echo match && echo "TOKEN=$TOKEN"
`, name, node, agentImage(), secret))
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Nodes == 1
	})
	// The value printed is redacted in the output record (watcher.Redact).
	if s, _ := nodeState(ctx, t, node, name); s.Phase != v1alpha1.PhaseSucceeded || nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun) != "match\nTOKEN=[REDACTED]\n" {
		t.Errorf("state %+v, output %q; want Succeeded with output %q", s, nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun), "match\nTOKEN=[REDACTED]\n")
	}
}
