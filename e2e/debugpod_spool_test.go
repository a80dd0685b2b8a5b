//go:build e2e

package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// TestDebugpodSpoolProgram: the debugpod backend runs the command under
// nodeexec-spool (agent.SpoolPath), not the nodeexec binary: by default
// from an image volume of the agent image where the node has image
// volumes (containerd 2.1+), else from the agent container's copy;
// --agent-image-volume=false copies everywhere. An agent image without
// nodeexec-spool (an older image, or one pushed from a nodeexec binary
// alone) still runs, under a copy of nodeexec itself (by default also on a
// node with image volumes, after the volume's refused start); with
// --agent-image-volume, on a node with image volumes, it fails the run
// before the command starts (exit 127), naming the image and the fix, and
// leaves nothing behind.
func TestDebugpodSpoolProgram(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's registry (NODEEXEC_E2E_KUBECONFIG is set)")
	}
	ctx := t.Context()
	node := env.nodes[0]
	n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	volumes := debugpod.ImageVolumeSupport(n.Status.NodeInfo) == nil
	ns := tempNamespace(ctx, t, "nodeexec-e2e-spoolprog-", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	// Which way the program came, and its version: nodeexec-spool names itself.
	script := "if [ -x " + agent.ImageVolumePath + " ]; then echo volume; " + agent.ImageVolumePath + " version --client; " +
		"else echo copy; " + agent.CopiedPath + " version --client; fi; echo to-stderr >&2; exit 3"
	run := func(image string, extra ...string) (string, string, int) {
		args := append([]string{"run", "-n", ns, "--backend", "debugpod", "--agent-image", image, "--image", env.image, "--node", node, "--no-prefix"}, extra...)
		return cli(ctx, "", append(args, "--", "sh", "-c", script)...)
	}
	check := func(what, stdout, stderr string, code int, way, program string) {
		t.Helper()
		if code != 3 || !strings.HasPrefix(stdout, way+"\n"+program) || !strings.Contains(stderr, "to-stderr") {
			t.Errorf("%s: exit %d (want 3), stdout %q (want %q, then %q's version)\nstderr: %s", what, code, stdout, way, program, stderr)
		}
	}
	way := "copy"
	if volumes {
		way = "volume"
	}
	stdout, stderr, code := run(agentImage())
	check("this build's image", stdout, stderr, code, way, "nodeexec-spool ")
	stdout, stderr, code = run(agentImage(), "--agent-image-volume=false")
	check("this build's image, --agent-image-volume=false", stdout, stderr, code, "copy", "nodeexec-spool ")

	// The image of the nodeexec binary alone, as an older nodeexec's.
	bin, err := os.ReadFile(env.cli)
	if err != nil {
		t.Fatal(err)
	}
	img, err := agentimage.Image(agentimage.Binaries{Nodeexec: bin})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := env.cluster.PushImage(ctx, "nodeexec.local/agent:no-spool-"+randomSuffix(), img)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = run(alone)
	check("an image without nodeexec-spool", stdout, stderr, code, "copy", "Client Version")
	if !volumes {
		t.Logf("node %s has no image volumes: the --agent-image-volume case runs on containerd 2 (make test-matrix)", node)
		return
	}
	before := managedPodCount(ctx, t)
	stdout, stderr, code = run(alone, "--agent-image-volume")
	if code != 127 || stdout != "" || !strings.Contains(stderr, "has no "+agent.SpoolPath) || !strings.Contains(stderr, alone) || !strings.Contains(stderr, "--agent-image-volume=false") {
		t.Errorf("--agent-image-volume with an image without nodeexec-spool: exit %d (want 127), stdout %q (want nothing run)\nstderr: %s", code, stdout, stderr)
	}
	// The run deleted its pod (grace 1 s): gone within seconds.
	deadline := time.Now().Add(30 * time.Second)
	for managedPodCount(ctx, t) > before && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if after := managedPodCount(ctx, t); after > before {
		t.Errorf("%d managed pods before, %d 30 s after the run", before, after)
	}
}
