//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// drainWorkload is a Deployment of replicas pods (labelled app=NAME and
// e2e-drainplan=NAME) pinned to node, optionally with a PodDisruptionBudget
// of minAvailable 1 (pdb), created and removed with the test. It waits until
// the replicas are ready. grace is the pods' termination grace period; a
// pod's sleep, PID 1 with no handler, ignores SIGTERM, so a pod evicted
// with grace > 0 goes only after it.
func drainWorkload(ctx context.Context, t *testing.T, name, node string, replicas int32, pdb bool, grace int64) {
	t.Helper()
	labels := map[string]string{"app": name, "e2e-drainplan": name}
	deps := env.client.AppsV1().Deployments("default")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					TerminationGracePeriodSeconds: ptr.To(grace), AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{Name: "app", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sleep", "3600"}}},
				},
			},
		},
	}
	if _, err := deps.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = deps.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		_ = env.client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "e2e-drainplan=" + name})
	})
	if pdb {
		pdbs := env.client.PolicyV1().PodDisruptionBudgets("default")
		p := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, MinAvailable: ptr.To(intstr.FromInt32(1))},
		}
		if _, err := pdbs.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pdbs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if !waitFor(60*time.Second, func() bool {
		d, err := deps.Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Status.ReadyReplicas != replicas {
			return false
		}
		if !pdb {
			return true
		}
		// The disruption controller has counted the pods.
		p, err := env.client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == replicas
	}) {
		t.Fatalf("workload %s not ready on %s", name, node)
	}
}

// nodeEvent reports whether an Event of reason on node names all of want.
func nodeEvent(ctx context.Context, t *testing.T, node, reason string, want ...string) bool {
	t.Helper()
	events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
		return !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(e.Message, w) })
	})
}

// TestWatcherDrainPlanBlockedThenSkip: spec.maintenance.drain checked
// before the cordon, on the two real nodes (one node at a time):
//   - node A runs one pod of a workload whose PDB (minAvailable 1) allows
//     no disruption: A is DrainBlocked (status and Events name the PDB and
//     the pod) and never cordoned while the PDB is there; B goes first.
//   - node B runs two pods of a workload whose PDB (minAvailable 1) allows
//     one disruption. The dry run asks of each pod alone, and each may go;
//     the real drain evicts one, and then the second is refused (its
//     replacement cannot become ready on the cordoned node it is pinned to):
//     the block appears only during the real drain, reliably. After the
//     drain's timeout (3s), onTimeout: Skip: B is uncordoned, Pending
//     (DrainSkipped), no failure counted.
//   - the PDBs removed, both nodes are drained and run: Complete.
func TestWatcherDrainPlanBlockedThenSkip(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	nodeA, nodeB := env.nodes[0], env.nodes[1]
	name := uniqueName("e2e-drainplan-")
	blk, two := name+"-blk", name+"-two"
	drainWorkload(ctx, t, blk, nodeA, 1, true, 0)
	drainWorkload(ctx, t, two, nodeB, 2, true, 0)
	cordonA := watchCordon(t, nodeA)
	cleanupNodeScript(t, dyn, name, nodeA, nodeB)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector:
    matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%s, %s]}]
  script: 'echo "maintained $NODE_NAME"'
  rollout: {canary: 0, maxConcurrency: 1}
  maintenance: {cordon: true, drain: {timeout: 3s, gracePeriodSeconds: 0, onTimeout: Skip, podSelector: "e2e-drainplan in (%s, %s)"}}
  retry: {initialBackoff: 2s, maxBackoff: 2s}
`, name, nodeA, nodeB, blk, two))

	// A blocked, named; B skipped after its real drain was refused.
	waitNodeScript(ctx, t, dyn, name, 30*time.Second, "DrainBlocked on "+nodeA, func(ns *v1alpha1.NodeScript) bool {
		return slices.ContainsFunc(ns.Status.DrainBlocked, func(b string) bool {
			return strings.HasPrefix(b, nodeA+": PDB default/"+blk+" blocks pod default/"+blk+"-")
		})
	})
	if !waitFor(30*time.Second, func() bool { return nodeEvent(ctx, t, nodeB, v1alpha1.ReasonDrainSkipped, name, "drain skipped") }) {
		s, _ := nodeState(ctx, t, nodeB, name)
		t.Fatalf("no DrainSkipped Event on %s; state %+v", nodeB, s)
	}
	if !nodeEvent(ctx, t, nodeA, v1alpha1.ReasonDrainBlocked, name, "PDB default/"+blk) {
		t.Errorf("no DrainBlocked Event on %s naming the PDB", nodeA)
	}
	ns, err := nodescripts.Get(ctx, dyn, name)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Failed != 0 || ns.Status.Stage == v1alpha1.StageHalted {
		t.Errorf("a skipped drain counted as a failure: %+v", ns.Status)
	}
	if !waitFor(10*time.Second, func() bool { _, n := nodeState(ctx, t, nodeB, name); return !n.Spec.Unschedulable }) {
		t.Errorf("%s still cordoned after its drain was skipped", nodeB)
	}

	// The PDBs go: both nodes drain, run, and are uncordoned.
	released := time.Now()
	for _, p := range []string{blk, two} {
		if err := env.client.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if c := cordonA.firstCordon(); !c.IsZero() && c.Before(released) {
		t.Errorf("%s cordoned at %v while its PDB blocked its drain (released at %v)", nodeA, c, released)
	}
	ns = waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	if len(ns.Status.DrainBlocked) != 0 {
		t.Errorf("status.drainBlocked %q once complete", ns.Status.DrainBlocked)
	}
	if c := cordonA.firstCordon(); c.IsZero() || c.Before(released) {
		t.Errorf("%s first cordoned at %v, want after the PDB went (%v)", nodeA, c, released)
	}
	for _, n := range []string{nodeA, nodeB} {
		if s, node := nodeState(ctx, t, n, name); s.Phase != v1alpha1.PhaseSucceeded || node.Spec.Unschedulable {
			t.Errorf("%s: %+v, unschedulable %t", n, s, node.Spec.Unschedulable)
		}
	}
}

// TestWatcherDrainPlanForce: the workload of two pods under a PDB that
// allows one disruption, as in TestWatcherDrainPlanBlockedThenSkip: the
// dry run passes, the real drain's second eviction is refused; after the
// timeout, onTimeout: Force deletes the pod left (Event DrainForced naming
// it) and the run goes on.
func TestWatcherDrainPlanForce(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	node := env.nodes[1]
	name := uniqueName("e2e-drainforce-")
	two := name + "-two"
	drainWorkload(ctx, t, two, node, 2, true, 0)
	cleanupNodeScript(t, dyn, name, node)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "maintained $NODE_NAME"'
  maintenance: {cordon: true, drain: {timeout: 3s, gracePeriodSeconds: 0, onTimeout: Force, podSelector: "e2e-drainplan=%s"}}
`, name, onlyNode(node), two))
	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete after a forced drain", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1
	})
	if !nodeEvent(ctx, t, node, v1alpha1.ReasonDrainForced, name, "deleting pod(s) default/"+two+"-") {
		t.Errorf("no DrainForced Event on %s naming the pod", node)
	}
	if s, n := nodeState(ctx, t, node, name); s.Phase != v1alpha1.PhaseSucceeded || n.Spec.Unschedulable {
		t.Errorf("%s: %+v, unschedulable %t", node, s, n.Spec.Unschedulable)
	}
	t.Logf("complete: %+v", ns.Status)
}

// TestWatcherDrainPlanAPIServerRestart: the API server is restarted while
// a node drains (its workload pod takes 6 s to go: sleep ignores SIGTERM):
// the rollout resumes from the state recorded on the node and finishes.
func TestWatcherDrainPlanAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	node := env.nodes[1]
	name := uniqueName("e2e-drainrestart-")
	slow := name + "-slow"
	drainWorkload(ctx, t, slow, node, 1, false, 6)
	cleanupNodeScript(t, dyn, name, node)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "maintained $NODE_NAME"'
  maintenance: {cordon: true, drain: {timeout: 60s, podSelector: "e2e-drainplan=%s"}}
  retry: {limit: 5, initialBackoff: 1s, maxBackoff: 2s}
`, name, onlyNode(node), slow))
	if !waitFor(30*time.Second, func() bool {
		s, _ := nodeState(ctx, t, node, name)
		return s.Phase == v1alpha1.PhaseRunning && s.Maintenance == v1alpha1.MaintenanceDraining
	}) {
		t.Fatalf("%s never Draining", node)
	}
	if err := env.cluster.RestartAPIServer(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete after the API server's restart", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1
	})
	if s, n := nodeState(ctx, t, node, name); s.Phase != v1alpha1.PhaseSucceeded || n.Spec.Unschedulable {
		t.Errorf("%s: %+v, unschedulable %t", node, s, n.Spec.Unschedulable)
	}
	t.Logf("complete: %+v", ns.Status)
}

// TestApplyRejectsBadDrains: nodeexec apply refuses each bad drain field,
// naming it, and applies nothing; the CRD's schema and CEL rules refuse
// them too (a client that bypasses nodeexec apply).
func TestApplyRejectsBadDrains(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	cases := []struct {
		name        string
		maintenance map[string]any
		want        string
	}{
		{"ontimeout", map[string]any{"cordon": true, "drain": map[string]any{"timeout": "1m", "onTimeout": "Evict"}}, "spec.maintenance.drain.onTimeout"},
		{"force-no-timeout", map[string]any{"cordon": true, "drain": map[string]any{"onTimeout": "Force"}}, "Force"},
		{"maxblocked-negative", map[string]any{"cordon": true, "drain": map[string]any{}, "maxBlockedNodes": -1}, "spec.maintenance.maxBlockedNodes"},
		{"maxblocked-no-drain", map[string]any{"cordon": true, "maxBlockedNodes": 2}, "maxBlockedNodes"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := uniqueName("e2e-bad-")
			m, _ := json.Marshal(c.maintenance) // JSON is YAML
			body := fmt.Sprintf(good, name+"-ok") + "---\n" + fmt.Sprintf(good, name) + "  maintenance: " + string(m) + "\n"
			file := dir + "/" + c.name + ".yaml"
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := cli(ctx, "", "apply", "-f", file)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("apply: exit %d, stderr %q; want a failure naming %s", code, errOut, c.want)
			}
			for _, n := range []string{name, name + "-ok"} {
				if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("nodescript %s exists after a refused apply", n)
					_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, n, metav1.DeleteOptions{})
				}
			}
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "nodeexec.io/v1alpha1", "kind": "NodeScript", "metadata": map[string]any{"name": name},
				"spec": map[string]any{"nodeSelector": map[string]any{}, "script": "true", "maintenance": c.maintenance},
			}}
			if _, err := dyn.Resource(v1alpha1.Resource).Create(ctx, u, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("API server: %v; want a refusal naming %s", err, c.want)
				if err == nil {
					_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{})
				}
			}
		})
	}
}
