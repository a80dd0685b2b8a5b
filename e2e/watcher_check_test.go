//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherCheckScript: spec.checkScript, the detector. On one real node
// it exits 0 (the node is fine: NotNeeded, its condition True NotNeeded,
// no run pod, the output recorded); on the other it exits 1 and the script
// runs there. The rollout completes with 1 succeeded and 1 not needed.
func TestWatcherCheckScript(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	fine, needs := env.nodes[0], env.nodes[1]
	name := uniqueName("e2e-check-")
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	name = controlledNamed(ctx, t, dyn, name, fmt.Sprintf(`  recordOutput: true
  checkScript: 'if [ "$NODE_NAME" = %s ]; then echo "already fixed"; exit 0; fi; echo "needs the fix"; exit 1'
`, fine))
	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete, 1 succeeded and 1 not needed", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1 && ns.Status.NotNeeded == 1 && ns.Status.Nodes == 2
	})
	if s, _ := nodeState(ctx, t, fine, name); s.Phase != v1alpha1.PhaseNotNeeded || s.ExitCode == nil || *s.ExitCode != 0 {
		t.Errorf("node %s: %+v, want NotNeeded", fine, s)
	}
	if s, _ := nodeState(ctx, t, needs, name); s.Phase != v1alpha1.PhaseSucceeded || s.Attempts != 2 {
		t.Errorf("node %s: %+v, want Succeeded on attempt 2 (the check was attempt 1)", needs, s)
	}
	if got := pods.runs(fine, v1alpha1.ActionRun); len(got) != 0 {
		t.Errorf("run pods on %s, which did not need the script: %v", fine, got)
	}
	for _, node := range []string{fine, needs} {
		if got := pods.runs(node, v1alpha1.ActionCheck); len(got) != 1 {
			t.Errorf("check pods on %s: %v, want 1", node, got)
		}
	}
	if got := pods.runs(needs, v1alpha1.ActionRun); len(got) != 1 {
		t.Errorf("run pods on %s: %v, want 1", needs, got)
	}
	if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, fine, v1alpha1.ActionCheck); !strings.Contains(out, "already fixed") {
		t.Errorf("check output on %s: %q", fine, out)
	}
	if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, needs, v1alpha1.ActionRun); !strings.Contains(out, "fixed "+needs) {
		t.Errorf("run output on %s: %q", needs, out)
	}
	var c *corev1.NodeCondition
	if !waitFor(15*time.Second, func() bool {
		c = nodeCondition(ctx, t, fine, name)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == v1alpha1.ConditionNotNeeded
	}) {
		t.Errorf("node %s: condition %+v, want True NotNeeded", fine, c)
	}
	out, errOut, code := cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, "not needed 1") || !strings.Contains(out, v1alpha1.PhaseNotNeeded) {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("complete: %+v", ns.Status)
}

// TestWatcherCheckScriptMissingCommand: a check that cannot run its
// command exits 127, which is never read as an answer (kured#976: a
// missing command caused a reboot loop): the canary fails with CheckFailed,
// the rollout halts, no script runs, no rollback runs and nothing is
// cordoned although onFailure asks for both.
func TestWatcherCheckScriptMissingCommand(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-check127-")
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	name = controlledNamed(ctx, t, dyn, name, `  checkScript: 'nodeexec-e2e-no-such-detector --quiet'
  rollbackScript: 'echo rolled back'
  onFailure: {rollback: true, cordon: true}
`)
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "halted by the check", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageHalted && ns.Status.Failed >= 1
	})
	time.Sleep(3 * time.Second) // a resync or two: no rollback or cordon follows
	failed := 0
	for _, node := range env.nodes[:2] {
		s, n := nodeState(ctx, t, node, name)
		if s.Phase == v1alpha1.PhaseFailed {
			failed++
			if s.Reason != v1alpha1.ReasonCheckFailed || s.ExitCode == nil || *s.ExitCode != 127 || !strings.Contains(s.Message, "not found") {
				t.Errorf("node %s: %+v, want Failed CheckFailed exit 127 naming 'not found'", node, s)
			}
		}
		if s.Rollback != "" || s.Cordoned || n.Spec.Unschedulable {
			t.Errorf("node %s: rollback %q, cordoned %t, unschedulable %t after a check failure", node, s.Rollback, s.Cordoned, n.Spec.Unschedulable)
		}
		for _, action := range []string{v1alpha1.ActionRun, v1alpha1.ActionRollback} {
			if got := pods.runs(node, action); len(got) != 0 {
				t.Errorf("%s pods on %s after the check failed: %v", action, node, got)
			}
		}
	}
	if failed == 0 {
		t.Error("no node failed")
	}
	events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,reason=" + v1alpha1.ReasonCheckFailed})
	if err != nil || !strings.Contains(fmt.Sprint(events.Items), name) {
		t.Errorf("no %s Event naming %s: %v", v1alpha1.ReasonCheckFailed, name, err)
	}
}

// TestWatcherBlockingPod: spec.blockingPodSelector. A pod matching it on one
// real node holds that node back (status.blocked names the pod, an Event
// BlockedByPod on the node) while the other node runs; once the pod is
// deleted, the node runs and the rollout completes.
func TestWatcherBlockingPod(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	blockedNode, free := env.nodes[0], env.nodes[1]
	label := uniqueName("blocker-")
	pods := env.client.CoreV1().Pods("default")
	blocker := sleepingPod(label, blockedNode, map[string]string{"nodeexec-e2e-blocker": label})
	if _, err := pods.Create(ctx, blocker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), label, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	startWatcher(t, dyn)
	name := controlled(ctx, t, dyn, "e2e-block-", fmt.Sprintf("  blockingPodSelector: {matchLabels: {nodeexec-e2e-blocker: %s}}\n", label))
	want := blockedNode + ": default/" + label
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "one node done, the other blocked", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Succeeded == 1 && slices.Contains(ns.Status.Blocked, want)
	})
	if s, _ := nodeState(ctx, t, free, name); s.Phase != v1alpha1.PhaseSucceeded {
		t.Errorf("node %s: %+v, want Succeeded", free, s)
	}
	time.Sleep(6 * time.Second) // past a recheck (5 s): still held back
	if s, _ := nodeState(ctx, t, blockedNode, name); s.Phase != v1alpha1.PhasePending {
		t.Errorf("node %s ran while %s was on it: %+v", blockedNode, label, s)
	}
	events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + blockedNode + ",reason=" + v1alpha1.ReasonBlockedByPod})
	if err != nil || !strings.Contains(fmt.Sprint(events.Items), label) {
		t.Errorf("no %s Event on %s naming %s: %v", v1alpha1.ReasonBlockedByPod, blockedNode, label, err)
	}
	if out, _, code := cli(ctx, "", "status", name); code != 0 || !strings.Contains(out, "blocked: "+want) {
		t.Errorf("nodeexec status: exit %d\n%s", code, out)
	}
	if err := pods.Delete(ctx, label, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	ns := complete(ctx, t, dyn, name, 2)
	if len(ns.Status.Blocked) != 0 {
		t.Errorf("status.blocked %v after the pod was deleted", ns.Status.Blocked)
	}
}
