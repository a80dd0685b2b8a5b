//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherPrePull: spec.maintenance.prePull, spec.rollout.postCompleteDelay
// and spec.postCompleteLabels on the real nodes.
//   - An image the registry does not have, under maintenance {cordon,
//     drain}: the pre-pull pod cannot pull it, the node fails with reason
//     PrePullFailed naming the image and the fields to fix, and is never
//     cordoned (a watch of the Node proves it); no run pod is created.
//   - An image the nodes can pull, on both nodes one at a time with a 5 s
//     postCompleteDelay: each node is pre-pulled, cordoned, run and
//     uncordoned; the second node's first pod is created at least 5 s
//     after the first node's success as recorded; both carry the labels.
//   - nodeexec apply refuses a negative delay and a bad label, naming them.
func TestWatcherPrePull(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	first, second := env.nodes[0], env.nodes[1]
	good := uniqueName("e2e-prepull-")
	key := "e2e.nodeexec.io/" + good
	// Registered before the watcher starts, so run after it stopped (the
	// watcher puts the labels back while the NodeScript exists).
	t.Cleanup(func() {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: nil}}})
		for _, n := range []string{first, second} {
			if _, err := env.client.CoreV1().Nodes().Patch(context.Background(), n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("removing label %s from %s: %v", key, n, err)
			}
		}
	})
	startWatcher(t, dyn)

	// 1. An unpullable image: PrePullFailed, never cordoned.
	missing := strings.Split(agent.DefaultImage, ":")[0] + ":e2e-missing-" + fmt.Sprint(time.Now().UnixNano())
	bad := uniqueName("e2e-prepull-bad-")
	badPods := recordPods(t, bad)
	cleanupNodeScript(t, dyn, bad, first)
	cordons := watchCordon(t, first)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo never'
  backend: {image: %q}
  maintenance: {cordon: true, drain: {timeout: 10s, gracePeriodSeconds: 0}}
  retry: {limit: 0}
`, bad, onlyNode(first), missing))
	var s nodescripts.NodeState
	if !waitFor(45*time.Second, func() bool {
		s, _ = nodeState(ctx, t, first, bad)
		return s.Phase == v1alpha1.PhaseFailed
	}) {
		t.Fatalf("node %s: %+v, want a PrePullFailed failure", first, s)
	}
	if s.Reason != v1alpha1.ReasonPrePullFailed || !s.Infrastructure || !strings.Contains(s.Message, missing) ||
		!strings.Contains(s.Message, "spec.backend.image") || !strings.Contains(s.Message, "cannot be pulled") {
		t.Errorf("failure recorded as %+v; want PrePullFailed naming %s and spec.backend.image", s, missing)
	}
	if cordons.cordoned() {
		t.Errorf("node %s was cordoned although its image could not be pulled", first)
	}
	if got := badPods.runs(first, v1alpha1.ActionRun); len(got) != 0 {
		t.Errorf("run pods %v although the image could not be pulled", got)
	}
	if got := badPods.runs(first, v1alpha1.ActionPrePull); len(got) != 1 {
		t.Errorf("pre-pull pods %v, want 1", got)
	}
	if !waitFor(20*time.Second, func() bool {
		l, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodeScript + "=" + bad})
		return err == nil && len(l.Items) == 0
	}) {
		t.Error("the pre-pull pod was left behind")
	}
	waitNodeScript(ctx, t, dyn, bad, 20*time.Second, "halted", func(ns *v1alpha1.NodeScript) bool { return ns.Status.Stage == v1alpha1.StageHalted })
	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, bad, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	// 2. Both nodes, 5 s apart, labeled on success.
	pods := recordPods(t, good)
	cleanupNodeScript(t, dyn, good, first, second)
	const delay = 5 * time.Second
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "done on $NODE_NAME"'
  backend: {image: %q}
  maintenance: {cordon: true}
  rollout: {canary: 1, maxConcurrency: 1, postCompleteDelay: %s}
  postCompleteLabels: {%q: "done"}
`, good, realNodes, env.image, delay, key))
	ns := waitNodeScript(ctx, t, dyn, good, 60*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	if ns.Status.NextStart != nil {
		t.Errorf("status.nextStart %v once complete", ns.Status.NextStart)
	}
	// Which node went first: the one whose success is older.
	sa, _ := nodeState(ctx, t, first, good)
	sb, _ := nodeState(ctx, t, second, good)
	a, b, sFirst := first, second, sa
	if sb.Since.Before(sa.Since) {
		a, b, sFirst = second, first, sb
	}
	for _, n := range []string{a, b} {
		pulls, runs := pods.runs(n, v1alpha1.ActionPrePull), pods.runs(n, v1alpha1.ActionRun)
		if len(pulls) != 1 || len(runs) != 1 {
			t.Errorf("node %s: pre-pull pods %v, run pods %v; want one each", n, pulls, runs)
			continue
		}
		if !pods.createdAt(pulls[0]).Before(pods.createdAt(runs[0])) {
			t.Errorf("node %s: the pre-pull pod was not created before the run pod", n)
		}
	}
	if pulls := pods.runs(b, v1alpha1.ActionPrePull); len(pulls) == 1 {
		p, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(ctx, pulls[0], metav1.GetOptions{})
		var created time.Time
		if err == nil {
			created = p.CreationTimestamp.Time
		} else {
			created = pods.createdAt(pulls[0]) // deleted already: as seen here, later than created
		}
		if gap := created.Sub(sFirst.Since); gap < delay {
			t.Errorf("node %s started %s after node %s succeeded (%s), want at least %s", b, gap, a, sFirst.Since, delay)
		} else {
			t.Logf("node %s started %s after node %s succeeded", b, gap.Round(10*time.Millisecond), a)
		}
	}
	if !waitFor(15*time.Second, func() bool {
		for _, n := range []string{first, second} {
			node, err := env.client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || node.Labels[key] != "done" || node.Spec.Unschedulable {
				return false
			}
		}
		return true
	}) {
		t.Errorf("nodes not labeled %s=done and uncordoned after their success", key)
	}
	out, errOut, code := cli(ctx, "", "status", good)
	if code != 0 || !strings.Contains(out, "pre-pull:") || !strings.Contains(out, "post-complete delay: 5s") || !strings.Contains(out, "post-complete labels: "+key+"=done") {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}

	// 3. Bad input is refused at apply, naming the field, nothing applied.
	for _, c := range []struct{ spec, want string }{
		{"rollout: {postCompleteDelay: -5s}", "spec.rollout.postCompleteDelay"},
		{`postCompleteLabels: {"bad key": x}`, "spec.postCompleteLabels[bad key]"},
		{`postCompleteLabels: {ok: "a b"}`, "spec.postCompleteLabels[ok]"},
	} {
		name := uniqueName("e2e-bad-")
		file := t.TempDir() + "/bad.yaml"
		doc := fmt.Sprintf("apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n  %s\n", name, c.spec)
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := cli(ctx, "", "apply", "-f", file)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("apply %s: exit %d, stderr %q; want a refusal naming %s", c.spec, code, errOut, c.want)
		}
		if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("nodescript %s exists after a refused apply", name)
			_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{})
		}
	}
}
