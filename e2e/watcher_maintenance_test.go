//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherMaintenanceDrain: spec.maintenance {cordon, drain} on a real
// node with a workload pod (a Deployment pinned to the node) under a
// PodDisruptionBudget; the drain's podSelector names the workload, so that
// other tests' pods on the node are not its concern.
//   - The PDB first allows no disruption: the drain check before the
//     cordon (a dry-run eviction) is refused: the node is DrainBlocked
//     (status.drainBlocked names the PDB and the pod), never cordoned, no
//     run pod.
//   - The PDB then allows one: the retry cordons, evicts the workload pod,
//     runs the script only after the pod is gone, and uncordons after the
//     success; the workload is rescheduled on the node (a new pod).
func TestWatcherMaintenanceDrain(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	node := env.nodes[1]
	app := uniqueName("e2e-workload-")
	labels := map[string]string{"app": app}
	deps := env.client.AppsV1().Deployments("default")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					TerminationGracePeriodSeconds: ptr.To(int64(0)), AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{Name: "app", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sleep", "3600"}}},
				},
			},
		},
	}
	if _, err := deps.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = deps.Delete(context.Background(), app, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})
	pdbs := env.client.PolicyV1().PodDisruptionBudgets("default")
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, MaxUnavailable: ptr.To(intstr.FromInt32(0))},
	}
	if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pdbs.Delete(context.Background(), app, metav1.DeleteOptions{}) })
	workload := func() *corev1.Pod {
		l, err := env.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return nil
		}
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				return &p
			}
		}
		return nil
	}
	var first *corev1.Pod
	if !waitFor(90*time.Second, func() bool { first = workload(); return first != nil }) {
		t.Fatalf("the workload pod never ran on %s", node)
	}
	// When the first workload pod is gone (evicted), as seen from here:
	// through a watch, as the run pods are seen (recordPods), so that both
	// times carry the same small delay (a 100 ms poll here once saw the
	// eviction after the run pod's creation).
	var (
		mu     sync.Mutex
		goneAt time.Time
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	go func() {
		gone := func() {
			mu.Lock()
			goneAt = time.Now()
			mu.Unlock()
		}
		for watchCtx.Err() == nil {
			p, err := env.client.CoreV1().Pods("default").Get(watchCtx, first.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
				gone()
				return
			}
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			w, err := env.client.CoreV1().Pods("default").Watch(watchCtx, metav1.ListOptions{
				FieldSelector: "metadata.name=" + first.Name, ResourceVersion: p.ResourceVersion})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if q, ok := ev.Object.(*corev1.Pod); ev.Type == watch.Deleted || (ok && q.DeletionTimestamp != nil) {
					w.Stop()
					gone()
					return
				}
			}
			// The watch ended (timeout, expired version): look again.
		}
	}()

	name := uniqueName("e2e-maint-")
	pods := recordPods(t, name)
	cleanupNodeScript(t, dyn, name, node)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "maintained $NODE_NAME"'
  recordOutput: true
  maintenance: {cordon: true, drain: {timeout: 4s, gracePeriodSeconds: 0, podSelector: "app=%s"}, maxUnavailable: 1}
  retry: {limit: 5, initialBackoff: 8s, maxBackoff: 8s}
`, name, onlyNode(node), app))

	// 1. The PDB allows nothing: DrainBlocked before any cordon, no run pod.
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "DrainBlocked", func(ns *v1alpha1.NodeScript) bool {
		return len(ns.Status.DrainBlocked) == 1 && strings.HasPrefix(ns.Status.DrainBlocked[0], node+": PDB default/"+app+" blocks pod default/"+first.Name)
	})
	s, n := nodeState(ctx, t, node, name)
	if s.Phase != v1alpha1.PhasePending || n.Spec.Unschedulable {
		t.Errorf("node %s: %+v, unschedulable %t: want Pending, never cordoned", node, s, n.Spec.Unschedulable)
	}
	if got := pods.runs(node, v1alpha1.ActionRun); len(got) != 0 {
		t.Errorf("run pods %v although the drain failed", got)
	}
	if p := workload(); p == nil || p.UID != first.UID {
		t.Errorf("the workload pod was disrupted against its PDB: %v", p)
	}

	// 2. The PDB allows one: drained, run, uncordoned, rescheduled.
	patch := []byte(`{"spec":{"maxUnavailable":1}}`)
	if _, err := pdbs.Patch(ctx, app, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete after the drain", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1
	})
	s, n = nodeState(ctx, t, node, name)
	if s.Phase != v1alpha1.PhaseSucceeded || s.CordonedByUs || n.Spec.Unschedulable {
		t.Errorf("node %s after the run: %+v, unschedulable %t; want Succeeded and uncordoned", node, s, n.Spec.Unschedulable)
	}
	runs := pods.runs(node, v1alpha1.ActionRun)
	if len(runs) != 1 {
		t.Fatalf("run pods %v, want 1", runs)
	}
	mu.Lock()
	gone := goneAt
	mu.Unlock()
	if created := pods.createdAt(runs[0]); gone.IsZero() || !gone.Before(created) {
		t.Errorf("the workload pod went at %v, the run pod was created at %v: want the drain first", gone, created)
	}
	if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun); !strings.Contains(out, "maintained "+node) {
		t.Errorf("run output %q", out)
	}
	var again *corev1.Pod
	if !waitFor(90*time.Second, func() bool { again = workload(); return again != nil && again.UID != first.UID }) {
		t.Errorf("the workload was not rescheduled on %s after the uncordon", node)
	} else if again.Spec.NodeName != node {
		t.Errorf("the workload came back on %s, want %s", again.Spec.NodeName, node)
	}
	for _, reason := range []string{v1alpha1.ReasonCordoned, v1alpha1.ReasonDrainBlocked, v1alpha1.ReasonDrained, v1alpha1.ReasonUncordoned} {
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil || !strings.Contains(fmt.Sprint(events.Items), name) {
			t.Errorf("no %s Event on %s naming %s: %v", reason, node, name, err)
		}
	}
	t.Logf("complete: %+v; state %+v", ns.Status, s)
}
