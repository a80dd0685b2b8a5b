//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestImagePullSecret: images under the test registry's own address, which the
// nodes have no credentials for, as on a cluster whose registry needs a pull
// secret. Every way nodeexec creates pods — the debugpod, nsenter and runtime backends,
// the resident agents and the watcher's NodeScripts — refuses clearly without
// the secret (naming the image, the registry's 401 and the fix) and works with
// it. Each image is new to this run (a new tag; nodeexec's image pushed with
// `nodeexec image push` and pulled by its digest), so no node has it cached.
func TestImagePullSecret(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's authenticated registry (NODEEXEC_E2E_KUBECONFIG is set)")
	}
	ctx := t.Context()
	reg, err := env.cluster.Registry()
	if err != nil {
		t.Fatal(err)
	}
	tag := randomSuffix()
	marker := "pulled-with-a-secret-" + tag
	busy, err := testcluster.NewImage(ctx, testcluster.ImageSpec{
		Name: "e2e/busybox:" + tag,
		Files: []testcluster.ImageFile{
			{Src: "/bin/busybox", Dst: "/bin/busybox", Mode: 0o755},
			{Data: []byte(marker + "\n"), Dst: "/marker", Mode: 0o644},
		},
		BusyboxLinks: "/bin/busybox",
	})
	if err != nil {
		t.Fatal(err)
	}
	busyRef := reg.NodeHost + "/e2e/busybox:" + tag
	if _, err := env.cluster.PushImage(ctx, busyRef, busy); err != nil {
		t.Fatal(err)
	}
	// nodeexec's image, pushed as a user of an air-gapped cluster would: the
	// static binary's `image push`, with the registry's credentials in a
	// docker config (DOCKER_CONFIG) and its CA trusted (SSL_CERT_FILE).
	static, err := agentimage.BuildBinary(ctx, "..", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	push := exec.CommandContext(ctx, static, "image", "push", reg.Host+"/e2e/agent:"+tag)
	push.Env = append(os.Environ(), "DOCKER_CONFIG="+reg.DockerConfigDir, "SSL_CERT_FILE="+reg.CAFile)
	var pushOut, pushErr bytes.Buffer
	push.Stdout, push.Stderr = &pushOut, &pushErr
	if err := push.Run(); err != nil {
		t.Fatalf("nodeexec image push: %v\n%s", err, pushErr.String())
	}
	pushed := strings.TrimSpace(pushOut.String())
	if !strings.HasPrefix(pushed, reg.Host+"/e2e/agent@sha256:") {
		t.Fatalf("image push printed %q, want %s/e2e/agent@sha256:...; stderr:\n%s", pushed, reg.Host, pushErr.String())
	}
	t.Logf("nodeexec image push: %s\n%s", pushed, pushErr.String())
	// The nodes reach the same registry at NodeHost; pull by the digest printed.
	agentRef := reg.NodeHost + strings.TrimPrefix(pushed, reg.Host)

	ns := tempNamespace(ctx, t, "nodeexec-e2e-secret-", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	if _, err := env.client.CoreV1().Secrets(ns).Create(ctx, reg.PullSecret(ns, "regcred"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := env.nodes[0]

	// refused checks a run without the secret: it fails within seconds, names
	// the image, the registry's refusal and the flag that fixes it, and leaves
	// no pod.
	refused := func(t *testing.T, image, stderr string, code int, took time.Duration) {
		t.Helper()
		t.Logf("without the secret: exit %d after %s\n%s", code, took.Round(time.Millisecond), stderr)
		if code == 0 {
			t.Fatal("succeeded without the pull secret")
		}
		if took > 45*time.Second {
			t.Errorf("took %s to fail, want seconds", took)
		}
		for _, want := range []string{image, "401", "--image-pull-secret"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q", want)
			}
		}
		if !waitFor(30*time.Second, func() bool { return len(managedPods(ctx, t, ns)) == 0 }) {
			t.Errorf("pods left in %s: %d", ns, len(managedPods(ctx, t, ns)))
		}
	}

	// The runtime backend's target: a container on node, in another namespace
	// (its agent pod, which pulls the image, goes in -n's).
	target := rtTargetPod(ctx, t, node, "exec sleep 3600", true)
	for _, c := range []struct {
		backend, flag, image string
		targetArgs, cmd      []string
		want                 string
	}{
		{"debugpod", "--image", busyRef, []string{"--node", node}, []string{"cat", "/marker"}, marker + "\n"},
		{"nsenter", "--agent-image", agentRef, []string{"--node", node}, []string{"cat", "/etc/hostname"}, ""},
		{"runtime", "--agent-image", agentRef, []string{"--pod", target.Namespace + "/" + target.Name}, []string{"cat", "/etc/hostname"}, target.Name + "\n"},
	} {
		t.Run(c.backend, func(t *testing.T) {
			args := append([]string{"-n", ns, "run", "--backend", c.backend, c.flag, c.image, "--timeout", "2m", "--no-prefix"}, c.targetArgs...)
			start := time.Now()
			_, stderr, code := cli(ctx, "", append(append(args, "--"), c.cmd...)...)
			refused(t, c.image, stderr, code, time.Since(start))

			stdout, stderr, code := cli(ctx, "", append(append(args, "--image-pull-secret", "regcred", "--"), c.cmd...)...)
			if code != 0 {
				t.Fatalf("with --image-pull-secret regcred: exit %d\n%s", code, stderr)
			}
			if c.want != "" && stdout != c.want {
				t.Errorf("stdout %q, want %q (the image pushed for this test)", stdout, c.want)
			}
			if c.want == "" && strings.TrimSpace(stdout) == "" {
				t.Error("no output from the node")
			}
		})
	}

	t.Run("agent-install", func(t *testing.T) {
		// The agents' own namespace; install creates it, so delete it after.
		agents := "nodeexec-e2e-agents-" + tag
		t.Cleanup(func() {
			_ = env.client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), agents, metav1.DeleteOptions{})
		})
		start := time.Now()
		_, stderr, code := cli(ctx, "", "agent", "install", "--namespace", agents, "--agent-image", agentRef, "--timeout", "2m")
		took := time.Since(start)
		t.Logf("without the secret: exit %d after %s\n%s", code, took.Round(time.Millisecond), stderr)
		if code == 0 || !strings.Contains(stderr, agentRef) || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "--image-pull-secret") {
			t.Fatalf("agent install without the secret: exit %d; want a refusal naming the image, the 401 and --image-pull-secret", code)
		}
		if !waitFor(time.Minute, func() bool {
			_, err := env.client.CoreV1().Namespaces().Get(ctx, agents, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}) {
			t.Fatalf("namespace %s not rolled back", agents)
		}
		// With the secret: as a user would, create the namespace and the secret
		// in it first; install uses the namespace and uninstall keeps it.
		if _, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agents}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := testcluster.WaitDefaultServiceAccount(ctx, env.client, agents); err != nil {
			t.Fatal(err)
		}
		if _, err := env.client.CoreV1().Secrets(agents).Create(ctx, reg.PullSecret(agents, "regcred"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", agents, "--agent-image", agentRef, "--image-pull-secret", "regcred", "--timeout", "2m"); code != 0 {
			t.Fatalf("agent install with --image-pull-secret: exit %d\n%s", code, stderr)
		}
		// A run through the agent pulled from the registry: its listener,
		// through pods/portforward, not exec.
		stdout, stderr, code := cli(ctx, "", "-v", "1", "run", "--node", node, "--backend", "nsenter", "--use-resident", "--resident-namespace", agents,
			"--no-prefix", "--", "sh", "-c", "echo via-registry; exit 4")
		if code != 4 || stdout != "via-registry\n" || !strings.Contains(stderr, `"servePort"=7710`) || strings.Contains(stderr, "using exec") || strings.Contains(stderr, "created pod") {
			t.Errorf("run through the agent pulled from the registry: exit %d (want 4), stdout %q\n%s", code, stdout, stderr)
		}
		if _, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", agents); code != 0 {
			t.Errorf("agent uninstall: exit %d\n%s", code, stderr)
		}
		if n, err := env.client.CoreV1().Namespaces().Get(ctx, agents, metav1.GetOptions{}); err != nil || n.DeletionTimestamp != nil {
			t.Errorf("uninstall deleted the namespace it did not create (%v)", err)
		}
	})

	t.Run("nodescript", func(t *testing.T) {
		dyn := watcherSetup(t)
		name := uniqueName("e2e-secret-")
		cleanupNodeScript(t, dyn, name)
		startWatcher(t, dyn)
		doc := func(secrets string) string {
			return fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  backend: {name: nsenter, namespace: %s, image: %q%s}
  recordOutput: true
  script: 'echo ran on $NODE_NAME'
  retry: {limit: 100, initialBackoff: 1s, maxBackoff: 2s}
`, name, node, ns, agentRef, secrets)
		}
		applyNodeScript(ctx, t, dyn, doc(""))
		var s nodescripts.NodeState
		if !waitFor(90*time.Second, func() bool {
			s, _ = nodeState(ctx, t, node, name)
			return s.Infrastructure && strings.Contains(s.Message, "spec.backend.imagePullSecrets")
		}) {
			t.Fatalf("node state without the secret: %+v; want an infrastructure failure naming spec.backend.imagePullSecrets", s)
		}
		t.Logf("without the secret: %+v", s)
		if s.Phase == v1alpha1.PhaseSucceeded || !strings.Contains(s.Message, fmt.Sprintf("image %q", agentRef)) || !strings.Contains(s.Message, "401") {
			t.Errorf("state %+v: want not succeeded, naming %s and the registry's 401", s, agentRef)
		}
		hash := s.Hash
		applyNodeScript(ctx, t, dyn, doc(", imagePullSecrets: [{name: regcred}]"))
		waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete with the pull secret", func(n *v1alpha1.NodeScript) bool {
			return n.Status.Stage == v1alpha1.StageComplete && n.Status.Succeeded == 1
		})
		s, _ = nodeState(ctx, t, node, name)
		if s.Phase != v1alpha1.PhaseSucceeded || nodeOutput(ctx, t, ns, name, node, v1alpha1.ActionRun) != "ran on "+node+"\n" || s.Hash != hash {
			t.Errorf("state %+v; want Succeeded, its output, and the same spec hash %s (a pull secret is not what runs)", s, hash)
		}
	})
}
