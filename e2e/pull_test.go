//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// missingImage is an image no node can pull: nothing listens there, so the
// kubelet's pull fails at once with connection refused.
const missingImage = "127.0.0.1:1/nodeexec/missing:0"

// TestAgentInstallImagePullFailsFast: `agent install` with an image the
// nodes cannot pull fails within seconds naming the image, the registry's
// reason and the flags that fix it, and rolls back the namespace it created.
func TestAgentInstallImagePullFailsFast(t *testing.T) {
	ctx := t.Context()
	ns := "nodeexec-e2e-pull-" + randomSuffix()
	t.Cleanup(func() {
		_ = env.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	start := time.Now()
	_, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", missingImage, "--timeout", "2m")
	took := time.Since(start)
	t.Logf("agent install with a missing image: exit %d after %s\n%s", code, took.Round(time.Millisecond), stderr)
	if code == 0 {
		t.Fatal("agent install succeeded with an image that cannot be pulled")
	}
	if took > 30*time.Second {
		t.Errorf("agent install took %s to fail, want seconds", took)
	}
	for _, want := range []string{missingImage, "connection refused", "--agent-image", "--image-pull-secret", "rolled back: deleted namespace " + ns} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q", want)
		}
	}
	if !strings.Contains(stderr, "ErrImagePull") && !strings.Contains(stderr, "ImagePullBackOff") {
		t.Error("stderr does not give the kubelet's reason (ErrImagePull or ImagePullBackOff)")
	}
	// Nothing half-installed: the namespace is gone or going, and with it the DaemonSet.
	if cur, err := env.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && cur.DeletionTimestamp == nil {
		t.Errorf("namespace %s is left and not being deleted", ns)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if !waitFor(time.Minute, func() bool {
		_, err := env.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		t.Errorf("namespace %s not gone a minute after the rollback", ns)
	}
	if left := managedLeft(ctx, t, ns); len(left) != 0 {
		t.Errorf("left after the failed install: %v", left)
	}
}

// TestBackendImagePullFailsFast: the nsenter and debugpod backends fail in
// seconds on an image the node cannot pull (debugpod: the user's image, or
// nodeexec's for its agent container), with the image, the registry's
// reason and the flag that fixes it, and leave no pod.
func TestBackendImagePullFailsFast(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	for _, c := range []struct {
		backend, flag string
	}{{"nsenter", "--agent-image"}, {"debugpod", "--image"}, {"debugpod", "--agent-image"}} {
		t.Run(c.backend+c.flag, func(t *testing.T) {
			before := managedPodCount(ctx, t)
			start := time.Now()
			_, stderr, code := cli(ctx, "", "run", "--node", node, "--backend", c.backend, c.flag, missingImage, "--timeout", "2m", "--", "true")
			took := time.Since(start)
			t.Logf("exit %d after %s\n%s", code, took.Round(time.Millisecond), stderr)
			if code == 0 {
				t.Fatal("the run succeeded with an image that cannot be pulled")
			}
			if took > 30*time.Second {
				t.Errorf("took %s to fail, want seconds", took)
			}
			for _, want := range []string{missingImage, "connection refused", "hint:", c.flag, "--image-pull-secret"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q", want)
				}
			}
			if !waitFor(30*time.Second, func() bool { return managedPodCount(ctx, t) <= before }) {
				t.Errorf("pods left: %d managed pods before, %d after", before, managedPodCount(ctx, t))
			}
		})
	}
}
