package watcher

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// batchPod is a running pod labelled app=batch on node.
func batchPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "batch"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// byNodeName makes the fake clientset honour the spec.nodeName field
// selector of pod lists, as the API server does (the fake ignores field
// selectors).
func byNodeName(e *env) {
	e.cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		if sel == nil || sel.Empty() {
			return false, nil, nil
		}
		obj, err := e.cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		labelSel := a.(k8stesting.ListAction).GetListRestrictions().Labels
		list.Items = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
			return !sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) || !labelSel.Matches(labels.Set(p.Labels))
		})
		return true, list, nil
	})
}

// spec.blockingPodSelector: a node with a matching pod is not started and
// its slot goes to the next node; both blocked, nothing starts, the status
// names the pods, one Event per node and blocking pod, a recheck in 5 s;
// the pod gone (or finished), the node starts.
func TestBlockingPods(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.BlockingPodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}}
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(1))
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), batchPod("job-1", "n1"), batchPod("job-2", "n2"))
	byNodeName(e)
	after := e.reconcile()
	if got := e.pods(); !slices.Equal(got, []string{"job-1", "job-2"}) {
		t.Fatalf("pods %v: nothing may start while both nodes are blocked", got)
	}
	if diff := cmp.Diff([]string{"n1: default/job-1", "n2: default/job-2"}, e.nodeScript().Status.Blocked); diff != "" {
		t.Errorf("status.blocked (-want +got):\n%s", diff)
	}
	if after <= 0 || after > blockedRecheck {
		t.Errorf("look again after %v, want within %v", after, blockedRecheck)
	}
	e.checkEvents("blocked", v1alpha1.ReasonBlockedByPod, v1alpha1.ReasonBlockedByPod)
	e.clock.Step(blockedRecheck)
	e.reconcile()
	e.checkEvents("still blocked: no new Event", []string{}...)

	// job-2 finishes: n2 starts, n1 stays blocked.
	p, _ := e.cs.CoreV1().Pods("default").Get(e.ctx, "job-2", metav1.GetOptions{})
	p.Status.Phase = corev1.PodSucceeded
	if _, err := e.cs.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(blockedRecheck)
	e.reconcile()
	if s := e.state("n2"); s.Phase != v1alpha1.PhaseRunning {
		t.Errorf("n2 after its blocking pod finished: %+v", s)
	}
	if s := e.state("n1"); s.Phase == v1alpha1.PhaseRunning {
		t.Errorf("n1 started while job-1 runs: %+v", s)
	}
	// n1 was checked (and found blocked) only if it came before n2 in order.
	if b := e.nodeScript().Status.Blocked; len(b) > 0 && !slices.Equal(b, []string{"n1: default/job-1"}) {
		t.Errorf("status.blocked %v, want n1's pod or nothing", b)
	}
	e.setPod(podName(ns, "n2", v1alpha1.ActionRun, 1), exited(0))
	if err := e.cs.CoreV1().Pods("default").Delete(e.ctx, "job-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(time.Second)
	e.reconcile()
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseRunning {
		t.Errorf("n1 after job-1 was deleted: %+v", s)
	}
	if b := e.nodeScript().Status.Blocked; len(b) != 0 {
		t.Errorf("status.blocked %v after the blocking pods went", b)
	}
	for _, ev := range e.recorded() {
		if strings.Contains(ev, v1alpha1.ReasonBlockedByPod) {
			t.Errorf("a BlockedByPod Event once unblocked: %s", ev)
		}
	}
}
