package watcher

import (
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// trimNode is the node informer's transform: the cache keeps of a node only
// what the watcher reads (name, UID, labels, its own annotations,
// unschedulable, taints, the Ready condition's status and last transition,
// the NodeScripts' conditions without their heartbeat, and the boot ID), so that 5,000 nodes cost little memory and heartbeats do not
// look like changes. Objects other than nodes pass unchanged.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			Labels: n.Labels, Annotations: ourAnnotations(n.Annotations),
		},
		Spec: corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
	}
	out.Status.NodeInfo.BootID = n.Status.NodeInfo.BootID
	for _, c := range n.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady:
			out.Status.Conditions = append(out.Status.Conditions, corev1.NodeCondition{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime})
		case strings.HasPrefix(string(c.Type), v1alpha1.ConditionPrefix):
			out.Status.Conditions = append(out.Status.Conditions, corev1.NodeCondition{
				Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime,
			})
		}
	}
	return out, nil
}

// ourAnnotations keeps the NodeScripts' per-node annotations (state,
// rerun, ignore), and every annotation whose value is "true", the only
// value spec.hooks' annotation gates read (annotations.go: any other value
// is "not yet", as an absent one); nil when there are none.
func ourAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	for k, v := range a {
		if _, ok := nodescript.NodeAnnotation(k); ok || k == v1alpha1.KuredRebootAnnotation || v == "true" {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// trimPod is the run-pod informer's transform: it keeps what PodOutcome and
// the reconcile read.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, Annotations: p.Annotations,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, Reason: p.Status.Reason, Message: p.Status.Message,
			ContainerStatuses: p.Status.ContainerStatuses,
		},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out, nil
}

// sameNode reports whether two trimmed nodes differ only in resourceVersion.
func sameNode(a, b *corev1.Node) bool {
	return a.UID == b.UID && apiequality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		apiequality.Semantic.DeepEqual(a.Annotations, b.Annotations) &&
		a.Spec.Unschedulable == b.Spec.Unschedulable &&
		apiequality.Semantic.DeepEqual(a.Spec.Taints, b.Spec.Taints) &&
		apiequality.Semantic.DeepEqual(a.Status.Conditions, b.Status.Conditions) &&
		a.Status.NodeInfo.BootID == b.Status.NodeInfo.BootID
}

// withoutRecords is trimmed node n without the records the watcher writes
// itself: the NodeScripts' state annotations and Node conditions (rerun
// and ignore annotations, which people write, are kept). n is not changed.
func withoutRecords(n *corev1.Node) *corev1.Node {
	out := *n
	out.Annotations = nil
	for k, v := range n.Annotations {
		if name, ok := nodescript.NodeAnnotation(k); ok && k == stateAnnotation(name) {
			continue
		}
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[k] = v
	}
	out.Status.Conditions = nil
	for _, c := range n.Status.Conditions {
		if !strings.HasPrefix(string(c.Type), v1alpha1.ConditionPrefix) {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return &out
}

// statusOnlyChange reports whether NodeScript update old -> obj (as the
// dynamic informer delivers them) changed nothing but the status (and the
// resourceVersion and managedFields): the generation (spec), labels,
// annotations (run-now), finalizers and deletion timestamp are the same.
func statusOnlyChange(old, obj any) bool {
	a, ok1 := old.(metav1.Object)
	b, ok2 := obj.(metav1.Object)
	if !ok1 || !ok2 {
		return false
	}
	return a.GetUID() == b.GetUID() && a.GetGeneration() == b.GetGeneration() &&
		apiequality.Semantic.DeepEqual(a.GetLabels(), b.GetLabels()) &&
		apiequality.Semantic.DeepEqual(a.GetAnnotations(), b.GetAnnotations()) &&
		apiequality.Semantic.DeepEqual(a.GetFinalizers(), b.GetFinalizers()) &&
		a.GetDeletionTimestamp().Equal(b.GetDeletionTimestamp())
}

// podUpdateMatters reports whether a run pod's update old -> p can change
// what a reconcile does: p came to an outcome (PodOutcome on a Ready node:
// finished, or a failure its status shows, such as an image that cannot be
// pulled) or its deletion started. A pod being scheduled and starting
// changes nothing a reconcile reads; the node's readiness is watched on the
// node.
func podUpdateMatters(old, p *corev1.Pod) bool {
	done := func(p *corev1.Pod) bool { return podOutcome(p, true, time.Time{}, time.Time{}, 0).Done }
	return (done(p) && !done(old)) || (p.DeletionTimestamp != nil) != (old.DeletionTimestamp != nil)
}

// nodeReady returns the node's Ready status and when it last changed.
func nodeReady(n *corev1.Node) (bool, time.Time) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// hasTaint reports whether the node carries a taint with t's key and effect
// (and value, when t has one).
func hasTaint(n *corev1.Node, t *corev1.Taint) bool {
	for _, x := range n.Spec.Taints {
		if matchTaint(x, t) {
			return true
		}
	}
	return false
}

func matchTaint(x corev1.Taint, t *corev1.Taint) bool {
	return x.Key == t.Key && (t.Effect == "" || x.Effect == t.Effect) && (t.Value == "" || x.Value == t.Value)
}

// withoutTaint returns the node's taints without those matching t.
func withoutTaint(n *corev1.Node, t *corev1.Taint) []corev1.Taint {
	out := []corev1.Taint{}
	for _, x := range n.Spec.Taints {
		if !matchTaint(x, t) {
			out = append(out, x)
		}
	}
	return out
}
