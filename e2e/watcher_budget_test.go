//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// installBudgetCRD applies deploy/crd's MaintenanceBudget CRD, waits until
// it is served, and deletes it when the test ends (deleteCRD: gone before the next test).
func installBudgetCRD(ctx context.Context, t testing.TB, dyn dynamic.Interface) {
	t.Helper()
	b, err := os.ReadFile("../deploy/crd/nodeexec.io_maintenancebudgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	u := &unstructured.Unstructured{Object: m}
	if _, err := crds.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "nodeexec-e2e", Force: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteCRD(t, dyn, u.GetName()) })
	if !waitFor(30*time.Second, func() bool {
		_, e := dyn.Resource(v1alpha1.BudgetResource).List(ctx, metav1.ListOptions{Limit: 1})
		return e == nil
	}) {
		t.Fatal("the MaintenanceBudget CRD was not served within 30s")
	}
}

// createBudget creates MaintenanceBudget name over the real nodes with
// maxUnavailable, deleted when the test ends.
func createBudget(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, maxUnavailable int32) {
	t.Helper()
	doc := fmt.Sprintf("apiVersion: nodeexec.io/v1alpha1\nkind: MaintenanceBudget\nmetadata: {name: %s}\nspec:\n  %s\n  maxUnavailable: %d\n", name, realNodes, maxUnavailable)
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.BudgetResource).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(v1alpha1.BudgetResource).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// budgetStatus reads MaintenanceBudget name's status.
func budgetStatus(ctx context.Context, dyn dynamic.Interface, name string) (v1alpha1.MaintenanceBudgetStatus, error) {
	u, err := dyn.Resource(v1alpha1.BudgetResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return v1alpha1.MaintenanceBudgetStatus{}, err
	}
	var b v1alpha1.MaintenanceBudget
	err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b)
	return b.Status, err
}

// waitBudgetNode waits until MaintenanceBudget name's status lists node
// with reason.
func waitBudgetNode(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, node, reason string) {
	t.Helper()
	var last v1alpha1.MaintenanceBudgetStatus
	if !waitFor(20*time.Second, func() bool {
		st, err := budgetStatus(ctx, dyn, name)
		last = st
		return err == nil && slices.ContainsFunc(st.Nodes, func(n v1alpha1.BudgetNode) bool { return n.Name == node && slices.Contains(n.Reasons, reason) })
	}) {
		t.Fatalf("maintenancebudget %s: %s not listed with %s within 20s; status %+v", name, node, reason, last)
	}
}

// budgetScript is a NodeScript under spec.maintenance (cordon) on node
// only, counting against budget.
func budgetScript(name, node, budget string) string {
	return fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  script: "true"
  maintenance: {cordon: true}
  maintenanceBudget: %s
`, name, node, budget)
}

// waitHeldByBudget waits until NodeScript name says it waits for budget
// because of holder, and checks that its node was not touched.
func waitHeldByBudget(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, budget, node, holder, reason string) {
	t.Helper()
	waitNodeScript(ctx, t, dyn, name, 30*time.Second, "waiting for the budget", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonBudgetExhausted && strings.Contains(c.Message, "maintenancebudget "+budget) &&
			strings.Contains(c.Message, holder+" ("+reason)
	})
	// Held a little longer: still nothing on the node.
	time.Sleep(3 * time.Second)
	s, n := nodeState(ctx, t, node, name)
	if s.Phase == v1alpha1.PhaseRunning || s.Phase == v1alpha1.PhaseSucceeded || n.Spec.Unschedulable {
		t.Fatalf("node %s started (state %+v, unschedulable %v) while the budget had no room", node, s, n.Spec.Unschedulable)
	}
}

// TestWatcherBudget: one MaintenanceBudget (maxUnavailable 1 over both
// real nodes) shared with a person and kured: a node cordoned by hand, then
// kured's lock (an annotated DaemonSet kube-system/kured, kured's default
// name, that runs no pod: its nodeSelector matches no node) on one node hold
// a NodeScript under maintenance back from the other until released; then
// two exclusive NodeScripts on both nodes never overlap on a node (each run
// logs its start and end on the node, as the kernel's uptime to the
// hundredth of a second: the nodes' date has no %N).
func TestWatcherBudget(t *testing.T) {
	if len(env.nodes) < 2 {
		t.Skip("needs 2 real nodes")
	}
	ctx := context.Background()
	dyn := watcherSetup(t)
	installBudgetCRD(ctx, t, dyn)
	a, b := env.nodes[0], env.nodes[1]
	// Last (after the watcher stopped): the Maintenance condition goes too.
	t.Cleanup(func() {
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"$patch":"delete"}]}}`, nodescripts.MaintenanceConditionType)
		for _, n := range []string{a, b} {
			_, _ = env.client.CoreV1().Nodes().Patch(context.Background(), n, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		}
	})
	budget := uniqueName("e2e-budget-")
	createBudget(ctx, t, dyn, budget, 1)
	startWatcherWith(t, watcher.Options{Client: env.client, Dynamic: dyn, Resync: 2 * time.Second})

	t.Run("HandCordon", func(t *testing.T) {
		name := uniqueName("e2e-budget-cordon-")
		cleanupNodeScript(t, dyn, name, a, b)
		if _, err := env.client.CoreV1().Nodes().Patch(ctx, a, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitBudgetNode(ctx, t, dyn, budget, a, v1alpha1.BudgetUnschedulable)
		applyNodeScript(ctx, t, dyn, budgetScript(name, b, budget))
		waitHeldByBudget(ctx, t, dyn, name, budget, b, a, v1alpha1.BudgetUnschedulable)
		if _, err := env.client.CoreV1().Nodes().Patch(ctx, a, types.MergePatchType, []byte(`{"spec":{"unschedulable":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete once the budget has room", func(ns *v1alpha1.NodeScript) bool {
			return ns.Status.Stage == v1alpha1.StageComplete
		})
		// The node was held and published so: the condition is there, False after.
		n, err := env.client.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cond *corev1.NodeCondition
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == nodescripts.MaintenanceConditionType {
				cond = &n.Status.Conditions[i]
			}
		}
		if n.Spec.Unschedulable || cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != v1alpha1.ReasonInService {
			t.Fatalf("node %s after the run: unschedulable %v, condition %+v; want uncordoned and %s False (InService)", b, n.Spec.Unschedulable, cond, nodescripts.MaintenanceConditionType)
		}
	})

	t.Run("KuredLock", func(t *testing.T) {
		name := uniqueName("e2e-budget-kured-")
		cleanupNodeScript(t, dyn, name, b)
		lock, _ := json.Marshal(map[string]any{"nodeID": a, "metadata": map[string]any{"unschedulable": false}, "created": time.Now().UTC(), "TTL": 0})
		labels := map[string]string{"name": "kured"}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system", Annotations: map[string]string{v1alpha1.KuredLockAnnotation: string(lock)}},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector: map[string]string{"nodeexec.io/e2e-no-such-node": "true"},
						Containers:   []corev1.Container{{Name: "kured", Image: env.image, Command: []string{"sleep", "3600"}}},
					},
				},
			},
		}
		dss := env.client.AppsV1().DaemonSets("kube-system")
		if _, err := dss.Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = dss.Delete(context.Background(), "kured", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		})
		waitBudgetNode(ctx, t, dyn, budget, a, v1alpha1.BudgetKuredLock)
		applyNodeScript(ctx, t, dyn, budgetScript(name, b, budget))
		waitHeldByBudget(ctx, t, dyn, name, budget, b, a, v1alpha1.BudgetKuredLock)
		// kured releases its lock: the annotation goes.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, v1alpha1.KuredLockAnnotation)
		if _, err := dss.Patch(ctx, "kured", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete once kured released its lock", func(ns *v1alpha1.NodeScript) bool {
			return ns.Status.Stage == v1alpha1.StageComplete
		})
	})

	t.Run("ExclusiveNeverOverlap", func(t *testing.T) {
		names := []string{uniqueName("e2e-excl-a-"), uniqueName("e2e-excl-b-")}
		log := "/var/tmp/nodeexec-e2e-" + names[0] + "-$NODE_NAME.log"
		t.Cleanup(func() {
			m, _ := filepath.Glob(strings.ReplaceAll(log, "$NODE_NAME", "*"))
			for _, p := range m {
				_ = os.Remove(p)
			}
		})
		for _, name := range names {
			cleanupNodeScript(t, dyn, name)
			applyNodeScript(ctx, t, dyn, fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  exclusive: true
  rollout: {canary: 0, maxConcurrency: 2}
  script: |
    echo "start %s $(cut -d' ' -f1 /proc/uptime)" >> %s
    sleep 2
    echo "end %s $(cut -d' ' -f1 /proc/uptime)" >> %s
`, name, realNodes, name, log, name, log))
		}
		for _, name := range names {
			waitNodeScript(ctx, t, dyn, name, 80*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
				return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
			})
		}
		for _, node := range []string{a, b} {
			raw, err := os.ReadFile(strings.ReplaceAll(log, "$NODE_NAME", node))
			if err != nil {
				t.Fatal(err)
			}
			intervals := map[string][2]float64{}
			for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
				f := strings.Fields(line)
				if len(f) != 3 {
					t.Fatalf("node %s: log line %q", node, line)
				}
				ts, err := strconv.ParseFloat(f[2], 64)
				if err != nil {
					t.Fatalf("node %s: log line %q: %v", node, line, err)
				}
				iv := intervals[f[1]]
				if f[0] == "start" {
					iv[0] = ts
				} else {
					iv[1] = ts
				}
				intervals[f[1]] = iv
			}
			x, y := intervals[names[0]], intervals[names[1]]
			if len(intervals) != 2 || x[1] == 0 || y[1] == 0 {
				t.Fatalf("node %s: want one run of each NodeScript, log:\n%s", node, raw)
			}
			if x[0] < y[1] && y[0] < x[1] {
				t.Fatalf("node %s: the exclusive runs overlap: %s %v, %s %v\n%s", node, names[0], x, names[1], y, raw)
			}
			t.Logf("node %s: %s ran %.1f-%.1f, %s ran %.1f-%.1f", node, names[0], x[0], x[1], names[1], y[0], y[1])
		}
	})
}
