//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherOutputAndDeletion: a script that prints 64 KiB and a secret
// leaves only its outcome on the node (no output, within
// watcher.MaxStateBytes); with spec.recordOutput its redacted output tail
// is in a ConfigMap owned by the NodeScript. Deleting the NodeScript while
// no watcher runs leaves it Terminating with its annotations; the watcher,
// started again, removes the annotations from every node and its
// finalizer; the garbage collector removes the output records.
func TestWatcherOutputAndDeletion(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	stop := startWatcher(t, dyn)
	name := uniqueName("e2e-output-")
	cleanupNodeScript(t, dyn, name)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  recordOutput: true
  rollout: {maxConcurrency: 2}
  script: |
    i=0; while [ $i -lt 2048 ]; do echo "line $i of padding output."; i=$((i+1)); done
    echo "db_password=hunter2 on $NODE_NAME"
    echo "done on $NODE_NAME"
`, name, realNodes))
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	ns, err := nodescripts.Get(ctx, dyn, name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ns.Finalizers, v1alpha1.Finalizer) {
		t.Errorf("finalizers %v; want %s", ns.Finalizers, v1alpha1.Finalizer)
	}
	for _, node := range env.nodes[:2] {
		s, n := nodeState(ctx, t, node, name)
		raw := n.Annotations[nodescripts.StateAnnotation(name)]
		if s.Phase != v1alpha1.PhaseSucceeded || len(raw) > nodescripts.MaxStateBytes || strings.Contains(raw, "padding") || strings.Contains(raw, "hunter2") {
			t.Errorf("node %s: state annotation (%d bytes) %s", node, len(raw), raw)
		}
		out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun)
		if !strings.HasSuffix(out, "db_password=[REDACTED]\ndone on "+node+"\n") || strings.Contains(out, "hunter2") || len(out) > v1alpha1.MaxRecordedOutput {
			t.Errorf("node %s: output record (%d bytes) ends %q", node, len(out), out[max(0, len(out)-120):])
		}
		cm, err := env.client.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace).Get(ctx, nodescripts.OutputRecordName(name, node), metav1.GetOptions{})
		if err != nil || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != ns.UID {
			t.Errorf("node %s: output record owner: %v %+v", node, err, cm)
		}
	}
	// nodeexec status shows the recorded output.
	out, errOut, code := cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, "done on "+env.nodes[0]) || !strings.Contains(out, "done on "+env.nodes[1]) || strings.Contains(out, "hunter2") {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}

	// Deleted while no watcher runs: it waits, Terminating, annotations kept.
	stop()
	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // what a missing finalizer would let happen, happens in this time
	if ns, err := nodescripts.Get(ctx, dyn, name); err != nil || ns.DeletionTimestamp == nil {
		t.Fatalf("without a watcher: %v; want the NodeScript Terminating", err)
	}
	if s, _ := nodeState(ctx, t, env.nodes[0], name); s.Phase != v1alpha1.PhaseSucceeded {
		t.Errorf("without a watcher the state went: %+v", s)
	}

	// A watcher again: annotations, then the NodeScript, then its records go.
	startWatcher(t, dyn)
	if !waitFor(60*time.Second, func() bool {
		_, err := nodescripts.Get(ctx, dyn, name)
		return err != nil && strings.Contains(err.Error(), "not found")
	}) {
		t.Fatalf("nodescript %s not deleted by the watcher", name)
	}
	nodes, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if v, has := n.Annotations[nodescripts.StateAnnotation(name)]; has {
			t.Errorf("node %s keeps the state of the deleted NodeScript: %s", n.Name, v)
		}
	}
	for _, node := range env.nodes[:2] {
		if !waitFor(60*time.Second, func() bool {
			_, err := env.client.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace).Get(ctx, nodescripts.OutputRecordName(name, node), metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}) {
			t.Errorf("node %s: output record not garbage-collected", node)
		}
	}
}
