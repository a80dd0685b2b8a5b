//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
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
  script: |
    printf '%%s\n' 'pa$$word' '$(NODE_NAME)'; kill -0 $$ && echo alive; echo 'a b' | awk '{print $1}'
`, name, node, backend, image))
			waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
				return ns.Status.Stage == watcher.StageComplete && ns.Status.Nodes == 1
			})
			if s, _ := nodeState(ctx, t, node, name); s.Phase != watcher.PhaseSucceeded || s.OutputTail != want {
				t.Errorf("state %+v\noutput %q\nwant   %q", s, s.OutputTail, want)
			}
		})
	}
}
