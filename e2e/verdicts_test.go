//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestVerdictsCommandNotStarted: a command the container runtime cannot
// start is the shell's 127 (not found) or 126 (not executable), with a
// message naming it, never 125 (outcome unknown): with debugpod, where the
// runtime execs the command itself, and with ephemeral, whose gate execs
// it through sh.
func TestVerdictsCommandNotStarted(t *testing.T) {
	ctx := context.Background()
	node := env.nodes[0]
	for _, c := range []struct {
		argv []string
		code int
		says string
	}{
		{[]string{"/nonexistent"}, 127, `command "/nonexistent" was not found`},
		{[]string{"nosuchcommand", "-x"}, 127, `command "nosuchcommand" was not found`},
		{[]string{"/etc/hostname"}, 126, `command "/etc/hostname" is not executable`},
	} {
		t.Run("debugpod "+c.argv[0], func(t *testing.T) {
			stdout, stderr, code := cli(ctx, "", append([]string{"run", "--backend", "debugpod", "--image", env.image, "--node", node, "--"}, c.argv...)...)
			if code != c.code || !strings.Contains(stderr, c.says) || strings.Contains(stderr, "outcome unknown") {
				t.Errorf("exit %d, want %d and %q; stdout %q, stderr:\n%s", code, c.code, c.says, stdout, stderr)
			}
		})
	}
	// The same verdicts through the ephemeral backend's sh gate.
	pod := targetPod(ctx, t, []string{"sleep", "3600"})
	for _, c := range []struct {
		argv []string
		code int
	}{
		{[]string{"/nonexistent"}, 127},
		{[]string{"/etc/hostname"}, 126},
	} {
		t.Run("ephemeral "+c.argv[0], func(t *testing.T) {
			stdout, stderr, code := cli(ctx, "", append([]string{"run", "--backend", "ephemeral", "--pod", pod.Namespace + "/" + pod.Name, "--"}, c.argv...)...)
			if code != c.code || strings.Contains(stderr, "outcome unknown") {
				t.Errorf("exit %d, want %d; stdout %q, stderr:\n%s", code, c.code, stdout, stderr)
			}
		})
	}
}

// TestVerdictsRecordedTailRedacted: a failed run's recorded output is the
// kubelet's termination message, the last 2,048 bytes of its log cut
// anywhere; cut inside the key of "PASSWORD=hunter2", what is left
// ("WORD=hunter2") names no secret, so the cut first line is dropped: the
// record and `nodeexec status` never show the value.
func TestVerdictsRecordedTailRedacted(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	name := uniqueName("e2e-cut-")
	cleanupNodeScript(t, dyn, name)
	// After "PASSWORD=hunter2\n": 35 lines of 58 bytes and "done\n", 2,035
	// bytes, so the last 2,048 start at "WORD=hunter2\n".
	line := strings.Repeat("x", 57)
	trailer := strings.Repeat(line+"\n", 35) + "done\n"
	if n := len("WORD=hunter2\n") + len(trailer); n != v1alpha1.MaxTerminationLogTail {
		t.Fatalf("the script's tail is %d bytes; want %d", n, v1alpha1.MaxTerminationLogTail)
	}
	script := fmt.Sprintf(`i=0; while [ $i -lt 100 ]; do echo "padding line $i of the output."; i=$((i+1)); done
echo PASSWORD=hunter2
i=0; while [ $i -lt 35 ]; do echo %s; i=$((i+1)); done
echo done
exit 1`, line)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  recordOutput: true
  rollout: {canary: 2, maxConcurrency: 2, maxFailures: 2}
  script: %q
`, name, realNodes, script))
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "failed on both nodes", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Failed == 2
	})
	for _, node := range env.nodes[:2] {
		var out string
		if !waitFor(20*time.Second, func() bool {
			out = nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun)
			return out != ""
		}) {
			t.Fatalf("node %s: no output record", node)
		}
		// The record starts at the first whole line after the cut.
		if strings.Contains(out, "hunter2") || out != strings.Repeat(line+"\n", 35)+"done\n" {
			t.Errorf("node %s: recorded output (%d bytes) starts %q", node, len(out), out[:min(len(out), 80)])
		}
	}
	stdout, stderr, code := cli(ctx, "", "status", name)
	if code != 0 || strings.Contains(stdout+stderr, "hunter2") || !strings.Contains(stdout, "done") {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, stdout, stderr)
	}
}
