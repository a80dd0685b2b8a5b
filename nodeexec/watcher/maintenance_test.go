package watcher

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// waitState polls node's recorded state until ok (a background drain
// writes it), failing the test after 10 s.
func (e *env) waitState(node string, ok func(nodeState) bool) nodeState {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := e.state(node)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %s: state %+v", node, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spec.maintenance: cordon, drain (in the background), then the run pod
// (attempt 1), then uncordon after the success.
func TestMaintenanceCordonDrainRunUncordon(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, PrePull: ptr.To(false), Drain: &v1alpha1.DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}}}
	})
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	if !e.node("n1").Spec.Unschedulable {
		t.Fatal("not cordoned before the run")
	}
	if got := e.pods(); len(got) != 0 {
		t.Fatalf("pods %v before the drain ended", got)
	}
	s := e.waitState("n1", func(s nodeState) bool { return s.Maintenance == v1alpha1.MaintenanceDrained })
	if s.Phase != v1alpha1.PhaseRunning || !s.CordonedByUs || s.Hash != hash || s.Attempts != 0 {
		t.Errorf("drained: %+v", s)
	}
	e.reconcile()
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseRunning || s.Pod != run || s.Maintenance != "" || !s.CordonedByUs || s.Attempts != 1 {
		t.Fatalf("after the drain: %+v, want Running %s, still cordoned by us", s, run)
	}
	e.setPod(run, exited(0))
	e.reconcile()
	e.reconcile()
	if e.node("n1").Spec.Unschedulable {
		t.Error("still cordoned after the success")
	}
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.CordonedByUs || s.Cordoned {
		t.Errorf("after the success: %+v", s)
	}
	e.checkEvents("maintenance", v1alpha1.ReasonCordoned, v1alpha1.ReasonDrained, v1alpha1.ReasonSucceeded, v1alpha1.ReasonUncordoned, v1alpha1.ReasonComplete)
}

// A failed run under spec.maintenance: uncordoned unless onFailure.cordon;
// a node cordoned by someone else is never uncordoned.
func TestMaintenanceFailure(t *testing.T) {
	for _, keep := range []bool{false, true} {
		ns := script(func(s *v1alpha1.NodeScriptSpec) {
			s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, PrePull: ptr.To(false)}
			s.OnFailure.Cordon = keep
			s.Rollout.MaxFailures = ptr.To(intstr.FromInt32(1))
		})
		e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
		e.reconcile() // no drain: cordoned and the pod created at once
		run := podName(ns, "n1", v1alpha1.ActionRun, 1)
		if s := e.state("n1"); s.Pod != run || !e.node("n1").Spec.Unschedulable {
			t.Fatalf("onFailure.cordon %t: %+v", keep, s)
		}
		e.setPod(run, exited(2))
		e.reconcile()
		e.reconcile()
		if got := e.node("n1").Spec.Unschedulable; got != keep {
			t.Errorf("onFailure.cordon %t: unschedulable %t after the failure", keep, got)
		}
	}
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, PrePull: ptr.To(false)}
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", func(n *corev1.Node) { n.Spec.Unschedulable = true }))
	e.reconcile()
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	if s := e.state("n1"); s.Pod != run || s.CordonedByUs {
		t.Fatalf("on a node cordoned by someone else: %+v", s)
	}
	e.setPod(run, exited(0))
	e.reconcile()
	e.reconcile()
	if !e.node("n1").Spec.Unschedulable {
		t.Error("uncordoned a node someone else had cordoned")
	}
}

// spec.maintenance.maxUnavailable counts the nodes running and those left
// cordoned by us after a failure.
func TestDecideMaxUnavailable(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(3))
		s.Rollout.MaxFailures = ptr.To(intstr.FromInt32(5))
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, MaxUnavailable: ptr.To(intstr.FromInt32(2))}
	})
	c := newCluster("a", "b", "c", "d", "e")
	if d := decide(t, ns, c, t0); len(d.Start) != 2 {
		t.Fatalf("start %v, want 2 (maxUnavailable 2 < maxConcurrency 3)", d.Start)
	}
	c.set(ns, v1alpha1.PhaseFailed, "a")
	c["a"].State.CordonedByUs, c["a"].State.Cordoned = true, true
	c.set(ns, v1alpha1.PhaseRunning, "b")
	if d := decide(t, ns, c, t0); len(d.Start) != 0 {
		t.Errorf("start %v with one running and one left cordoned by us: want none", d.Start)
	}
	c["a"].State.CordonedByUs = false
	if d := decide(t, ns, c, t0); len(d.Start) != 1 {
		t.Errorf("start %v once uncordoned: want 1", d.Start)
	}
}
