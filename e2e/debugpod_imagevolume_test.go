//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// TestDebugpodAgentImageVolume: `run --backend debugpod
// --agent-image-volume` mounts the agent image in the debug pod as an image
// volume instead of copying its binary. On a node whose kubelet and
// container runtime have image volumes (containerd 2.1+, as in `make
// test-matrix`'s containerd 2 columns) the command runs in the user's image
// under the binary from the volume (there, at agent.ImageVolumePath), with
// its own exit status and both streams; on a node without (the default
// cluster's containerd 1.6) the run is refused before any pod is created,
// naming the node's runtime and the fix; an agent image the node cannot
// pull fails the run within seconds, naming it and the fix.
func TestDebugpodAgentImageVolume(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := tempNamespace(ctx, t, "nodeexec-e2e-imgvol-", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	args := []string{"run", "-n", ns, "--backend", "debugpod", "--agent-image-volume", "--agent-image", agentImage(), "--image", env.image, "--node", node, "--no-prefix", "--"}
	script := "test -x " + agent.ImageVolumePath + " && echo in-place; echo to-stderr >&2; exit 3"
	before := managedPodCount(ctx, t)
	stdout, stderr, code := cli(ctx, "", append(args, "sh", "-c", script)...)
	if err := debugpod.ImageVolumeSupport(n.Status.NodeInfo); err != nil {
		t.Logf("node %s: %s, kubelet %s: %v: the run must be refused", node, n.Status.NodeInfo.ContainerRuntimeVersion, n.Status.NodeInfo.KubeletVersion, err)
		if code == 0 || code == 3 || !strings.Contains(stderr, "drop --agent-image-volume") || !strings.Contains(stderr, n.Status.NodeInfo.ContainerRuntimeVersion) {
			t.Errorf("exit %d, stdout %q: want a refusal naming the runtime and the fix\nstderr: %s", code, stdout, stderr)
		}
		if after := managedPodCount(ctx, t); after != before {
			t.Errorf("a refused run created pods: %d managed pods before, %d after", before, after)
		}
		return
	}
	if code != 3 || stdout != "in-place\n" || !strings.Contains(stderr, "to-stderr") {
		t.Errorf("exit %d (want 3), stdout %q (want the binary in place)\nstderr: %s", code, stdout, stderr)
	}
	// An agent image the node cannot pull: the run fails fast, naming it
	// and the flags that fix it; nothing left.
	missing := "nodeexec.local/agent:missing-" + randomSuffix()
	start := time.Now()
	bad := []string{"run", "-n", ns, "--backend", "debugpod", "--agent-image-volume", "--agent-image", missing, "--image", env.image, "--node", node, "--timeout", "2m", "--", "true"}
	_, stderr, code = cli(ctx, "", bad...)
	if code == 0 || time.Since(start) > 60*time.Second || !strings.Contains(stderr, `image "`+missing+`"`) || !strings.Contains(stderr, "--agent-image-volume") {
		t.Errorf("unpullable agent image: exit %d after %s, want a fast failure naming %s and --agent-image-volume\nstderr: %s", code, time.Since(start).Round(time.Second), missing, stderr)
	}
	// A long output through the spool: every line, in order.
	stdout, stderr, code = cli(ctx, "", append(args, "sh", "-c", "seq 1 20000")...)
	if code != 0 || strings.Count(stdout, "\n") != 20000 || !strings.HasSuffix(stdout, "\n19999\n20000\n") {
		t.Errorf("seq 1 20000: exit %d, %d lines\nstderr: %s", code, strings.Count(stdout, "\n"), stderr)
	}
}
