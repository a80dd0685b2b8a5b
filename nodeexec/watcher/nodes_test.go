package watcher

import (
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The watcher's own writes (state annotations, Node conditions) do not
// make a node look changed; people's annotations, labels and the kubelet's
// conditions do.
func TestWithoutRecords(t *testing.T) {
	base := testNode("n1")
	base.Annotations = map[string]string{stateAnnotation("fix"): `{"hash":"h","phase":"Running"}`}
	for _, c := range []struct {
		name   string
		mutate func(*corev1.Node)
		same   bool
	}{
		{"state written", func(n *corev1.Node) { n.Annotations[stateAnnotation("fix")] = `{"hash":"h","phase":"Succeeded"}` }, true},
		{"another NodeScript's state", func(n *corev1.Node) { n.Annotations[stateAnnotation("other")] = `{}` }, true},
		{"condition written", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: nodescript.ConditionType("fix"), Status: corev1.ConditionTrue})
		}, true},
		{"rerun asked", func(n *corev1.Node) { n.Annotations[rerunAnnotation("fix")] = "h" }, false},
		{"ignored", func(n *corev1.Node) { n.Annotations[ignoreAnnotation("fix")] = "alice" }, false},
		{"label", func(n *corev1.Node) { n.Labels["pool"] = "b" }, false},
		{"not ready", func(n *corev1.Node) { ready(n).Status = corev1.ConditionFalse }, false},
		{"rebooted", func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" }, false},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			changed := base.DeepCopy()
			c.mutate(changed)
			if got := sameNode(withoutRecords(base), withoutRecords(changed)); got != c.same {
				t.Errorf("same: %t, want %t", got, c.same)
			}
		})
	}
	if withoutRecords(base); len(base.Annotations) != 1 {
		t.Errorf("withoutRecords changed its argument: %v", base.Annotations)
	}
}

func TestStatusOnlyChange(t *testing.T) {
	obj := func(mutate func(*unstructured.Unstructured)) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetUID("u1")
		u.SetGeneration(1)
		u.SetResourceVersion("1")
		u.SetAnnotations(map[string]string{"a": "1"})
		if mutate != nil {
			mutate(u)
		}
		return u
	}
	for _, c := range []struct {
		name   string
		mutate func(*unstructured.Unstructured)
		want   bool
	}{
		{"status written", func(u *unstructured.Unstructured) {
			u.SetResourceVersion("2")
			u.Object["status"] = map[string]any{"stage": "Rolling"}
		}, true},
		{"spec changed", func(u *unstructured.Unstructured) { u.SetGeneration(2) }, false},
		{"run-now annotation", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"a": "2"}) }, false},
		{"finalizer", func(u *unstructured.Unstructured) { u.SetFinalizers([]string{v1alpha1.Finalizer}) }, false},
		{"deleted", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&metav1.Time{Time: t0}) }, false},
		{"recreated", func(u *unstructured.Unstructured) { u.SetUID("u2") }, false},
	} {
		if got := statusOnlyChange(obj(nil), obj(c.mutate)); got != c.want {
			t.Errorf("%s: %t, want %t", c.name, got, c.want)
		}
	}
	if statusOnlyChange("x", obj(nil)) {
		t.Error("an object of another kind counts as a status change")
	}
}

// Only a run pod's outcome or deletion reconciles; its start does not.
func TestPodUpdateMatters(t *testing.T) {
	ns := script(nil)
	pending := runPod(t, ns, "n1", v1alpha1.ActionRun, 1)
	withStatus := func(st corev1.PodStatus) *corev1.Pod { p := pending.DeepCopy(); p.Status = st; return p }
	started, finished := withStatus(running), withStatus(exited(0))
	deleting := started.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, c := range []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{"created", &corev1.Pod{}, pending, false},
		{"started", pending, started, false},
		{"finished", started, finished, true},
		{"listed again finished", &corev1.Pod{}, finished, true},
		{"status written again after the end", finished, finished.DeepCopy(), false},
		{"image not pulled", pending, withStatus(waiting("ErrImagePull")), true},
		{"deletion started", started, deleting, true},
	} {
		if got := podUpdateMatters(c.old, c.new); got != c.want {
			t.Errorf("%s: %t, want %t", c.name, got, c.want)
		}
	}
}
