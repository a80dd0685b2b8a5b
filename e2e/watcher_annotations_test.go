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

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherAnnotationGates: spec.hooks.beforeRun and afterRun, and the
// run's place in the scripts' environment, on a real node.
//   - The node is labelled nodeexec.io/before-run=<name> and no run pod is
//     created while the annotation is not "true"; the wait survives a
//     restart of the watcher (state and label are the record).
//   - The test sets the annotation: the annotation and the label are
//     removed and the run starts; the script prints NODESCRIPT_ORDINAL,
//     NODESCRIPT_CANARY, NODESCRIPT_ATTEMPT and NODESCRIPT_BOOT_ID, read back
//     from its output record (spec.recordOutput).
//   - After the success the node is labelled nodeexec.io/after-run=<name>
//     and the rollout is not Complete (the node counts as running) until
//     the test sets the after-run annotation; both are then removed.
//   - nodeexec apply refuses a bad annotation key, an empty list and a zero
//     timeout, naming the field; nothing is applied.
func TestWatcherAnnotationGates(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	node := env.nodes[0]
	name := uniqueName("e2e-annot-")
	before, after := "e2e.example.com/"+name+"-ready", "e2e.example.com/"+name+"-done"
	// Registered first, so run last: whatever the test left on the node goes.
	t.Cleanup(func() {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"labels":      map[string]any{v1alpha1.LabelBeforeRun: nil, v1alpha1.LabelAfterRun: nil},
			"annotations": map[string]any{before: nil, after: nil},
		}})
		if _, err := env.client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("cleaning node %s: %v", node, err)
		}
	})
	stop := startWatcher(t, dyn)
	pods := recordPods(t, name)
	cleanupNodeScript(t, dyn, name, node)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "ordinal=$NODESCRIPT_ORDINAL canary=$NODESCRIPT_CANARY attempt=$NODESCRIPT_ATTEMPT boot=$NODESCRIPT_BOOT_ID"'
  recordOutput: true
  hooks:
    beforeRun: {annotations: [%q], timeout: 10m}
    afterRun: {annotations: [%q]}
`, name, onlyNode(node), before, after))

	// 1. Labelled, waiting, no run pod.
	var s nodescripts.NodeState
	if !waitFor(30*time.Second, func() bool {
		st, nd := nodeState(ctx, t, node, name)
		s = st
		return st.Awaiting == v1alpha1.AwaitingBeforeRun && st.AwaitingSince != nil && nd.Labels[v1alpha1.LabelBeforeRun] == name
	}) {
		t.Fatalf("node %s: %+v, want labelled and awaiting the before-run annotation", node, s)
	}
	out, _, code := cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, "awaiting: "+node+": before-run: "+before+` not yet "true"`) {
		t.Errorf("nodeexec status (exit %d) does not show the wait:\n%s", code, out)
	}

	// 2. A restarted watcher resumes the wait: still no pod, still labelled.
	stop()
	time.Sleep(time.Second)
	startWatcher(t, dyn)
	time.Sleep(3 * time.Second)
	if got := pods.runs(node, v1alpha1.ActionRun); len(got) != 0 {
		t.Fatalf("run pods %v before the annotation was set", got)
	}
	if s, n := nodeState(ctx, t, node, name); s.Awaiting != v1alpha1.AwaitingBeforeRun || n.Labels[v1alpha1.LabelBeforeRun] != name {
		t.Fatalf("after the restart: %+v, labels %v", s, n.Labels)
	}

	// 3. The annotation set: cleared with the label, the run starts and
	// sees its place.
	set := func(key string) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: "true"}}})
		if _, err := env.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	set(before)
	if !waitFor(45*time.Second, func() bool {
		s, _ = nodeState(ctx, t, node, name)
		return s.Phase == v1alpha1.PhaseSucceeded
	}) {
		t.Fatalf("node %s: %+v, want Succeeded after the annotation", node, s)
	}
	n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Labels[v1alpha1.LabelBeforeRun]; ok {
		t.Errorf("label %s left after the gate", v1alpha1.LabelBeforeRun)
	}
	if _, ok := n.Annotations[before]; ok {
		t.Errorf("annotation %s left after the gate", before)
	}
	want := fmt.Sprintf("ordinal=0 canary=true attempt=1 boot=%s", n.Status.NodeInfo.BootID)
	if got := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun); !strings.Contains(got, want) {
		t.Errorf("the script printed %q, want %q", got, want)
	}

	// 4. The after-run gate: labelled, the rollout not Complete until set.
	if !waitFor(20*time.Second, func() bool {
		s, n = nodeState(ctx, t, node, name)
		return n.Labels[v1alpha1.LabelAfterRun] == name && s.AwaitingSince != nil
	}) {
		t.Fatalf("node %s: %+v, labels %v: want labelled for the after-run gate", node, s, n.Labels)
	}
	if ns, err := nodescripts.Get(ctx, dyn, name); err != nil || ns.Status.Stage == v1alpha1.StageComplete || ns.Status.Running != 1 {
		t.Errorf("while the after-run gate waits: %v %+v; want not Complete, the node running", err, ns.Status)
	}
	set(after)
	waitNodeScript(ctx, t, dyn, name, 20*time.Second, "Complete after the after-run annotation", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete
	})
	if !waitFor(10*time.Second, func() bool {
		_, n = nodeState(ctx, t, node, name)
		_, l := n.Labels[v1alpha1.LabelAfterRun]
		_, a := n.Annotations[after]
		return !l && !a
	}) {
		t.Errorf("after-run label or annotation left: %v %v", n.Labels, n.Annotations)
	}
	if got := pods.runs(node, v1alpha1.ActionRun); len(got) != 1 {
		t.Errorf("run pods %v, want one", got)
	}

	// 5. Bad input refused by nodeexec apply, naming the field.
	dir := t.TempDir()
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	for _, c := range []struct{ name, doc, want string }{
		{"bad-key", good + "  hooks: {beforeRun: {annotations: ['not a key']}}\n", "spec.hooks.beforeRun.annotations[0]"},
		{"empty", good + "  hooks: {afterRun: {annotations: []}}\n", "spec.hooks.afterRun.annotations"},
		{"zero-timeout", good + "  hooks: {beforeRun: {annotations: [example.com/ok], timeout: 0s}}\n", "spec.hooks.beforeRun.timeout"},
		{"timeout-syntax", good + "  hooks: {afterRun: {annotations: [example.com/ok], timeout: soon}}\n", "spec.hooks.afterRun.timeout"},
	} {
		bad := uniqueName("e2e-bad-")
		file := dir + "/" + c.name + ".yaml"
		if err := os.WriteFile(file, []byte(fmt.Sprintf(good, bad+"-ok")+"---\n"+fmt.Sprintf(c.doc, bad)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := cli(ctx, "", "apply", "-f", file)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: apply exit %d, stderr %q; want a failure naming %s", c.name, code, errOut, c.want)
		}
		for _, n := range []string{bad, bad + "-ok"} {
			if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: nodescript %s exists after a refused apply (stdout %q)", c.name, n, out)
				_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, n, metav1.DeleteOptions{})
			}
		}
	}
}
