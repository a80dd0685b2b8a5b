package watcher

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// webPod is a running pod of ReplicaSet web (labelled app=web) on node.
func webPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "uid-rs", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// webPDB is a PodDisruptionBudget of the app=web pods.
func webPDB() *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, MinAvailable: ptr.To(intstr.FromInt32(1))},
	}
}

// evictionLog records the evictions the fake API server was asked for, as
// "dry POD" or "real POD".
type evictionLog struct {
	mu     sync.Mutex
	calls  []string
	refuse func(pod string, dryRun bool) error
}

func (l *evictionLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *evictionLog) set(refuse func(pod string, dryRun bool) error) {
	l.mu.Lock()
	l.refuse = refuse
	l.mu.Unlock()
}

// pdbRefusal is the eviction API's answer when a PodDisruptionBudget
// allows no disruption.
func pdbRefusal() error {
	return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
}

// evictions makes the fake clientset answer evictions as the API server
// does: refuse says the error for a pod (nil: evicted; a real eviction
// deletes the pod, a dry run nothing). Pod lists honour spec.nodeName.
func evictions(e *env, refuse func(pod string, dryRun bool) error) *evictionLog {
	byNodeName(e)
	// The drain helper asks discovery for the eviction subresource.
	e.cs.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"}}}}
	l := &evictionLog{refuse: refuse}
	e.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		dry := ev.DeleteOptions != nil && slices.Equal(ev.DeleteOptions.DryRun, []string{metav1.DryRunAll})
		l.mu.Lock()
		kind := "real "
		if dry {
			kind = "dry "
		}
		l.calls = append(l.calls, kind+ev.Name)
		refuse := l.refuse
		l.mu.Unlock()
		if err := refuse(ev.Name, dry); err != nil {
			return true, nil, err
		}
		if !dry {
			if err := e.cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name); err != nil {
				return true, nil, err
			}
		}
		return true, nil, nil
	})
	return l
}

// firstInOrder is the node Decide starts first among names (one slot).
func firstInOrder(t *testing.T, ns *v1alpha1.NodeScript, names ...string) string {
	t.Helper()
	d, err := computeDecision(ns, newCluster(names...).nodes(), t0)
	if err != nil || len(d.Start) == 0 {
		t.Fatalf("Decide: %v, %+v", err, d)
	}
	return d.Start[0]
}

func drainScript(mutate func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, PrePull: ptr.To(false), Drain: &v1alpha1.DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}}}
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(1))
		if mutate != nil {
			mutate(s)
		}
	})
}

// A node whose drain a PodDisruptionBudget would refuse is not cordoned;
// the next node takes its slot; status and Events name the PDB and the
// pod; the verdict is kept DrainRecheck (no new dry run, no new Event);
// the budget lifted, the node is checked again and cordoned.
func TestDrainPlanBlockedNodeNotCordoned(t *testing.T) {
	ns := drainScript(nil)
	first := firstInOrder(t, ns, "n1", "n2")
	second := map[string]string{"n1": "n2", "n2": "n1"}[first]
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), webPod("web-1", first), webPod("web-2", second), webPDB())
	log := evictions(e, func(pod string, dry bool) error {
		if pod == "web-1" {
			return pdbRefusal()
		}
		return nil
	})
	after := e.reconcile()
	if e.node(first).Spec.Unschedulable {
		t.Fatalf("%s cordoned although a PDB blocks its drain", first)
	}
	if s := e.state(first); s.Phase != v1alpha1.PhasePending {
		t.Errorf("%s: %+v, want Pending", first, s)
	}
	if !e.node(second).Spec.Unschedulable {
		t.Fatalf("%s, which can drain, not cordoned in the blocked node's slot", second)
	}
	want := []string{first + ": PDB default/web blocks pod default/web-1"}
	if diff := cmp.Diff(want, e.nodeScript().Status.DrainBlocked); diff != "" {
		t.Errorf("status.drainBlocked (-want +got):\n%s", diff)
	}
	if after <= 0 || after > DrainRecheck {
		t.Errorf("look again after %v, want within %v", after, DrainRecheck)
	}
	e.waitState(second, func(s nodeState) bool { return s.Maintenance == v1alpha1.MaintenanceDrained })
	e.checkEvents("blocked", v1alpha1.ReasonDrainBlocked, v1alpha1.ReasonDrainBlocked, v1alpha1.ReasonCordoned, v1alpha1.ReasonDrained)
	if got := log.list(); !slices.Equal(got, []string{"dry web-1", "dry web-2", "real web-2"}) {
		t.Errorf("evictions %v: want a dry run of each, then the real one of web-2 only", got)
	}
	m := e.c.w.metrics
	if v := metricValue(t, m.drainBlocked.WithLabelValues("fix")); v != 1 {
		t.Errorf("drain blocked gauge %v, want 1", v)
	}
	if b, p := metricValue(t, m.drainChecks.WithLabelValues("fix", "blocked")), metricValue(t, m.drainChecks.WithLabelValues("fix", "passed")); b != 1 || p != 1 {
		t.Errorf("drain checks: %v blocked, %v passed; want 1 and 1", b, p)
	}

	// The run on the second node; the first is still blocked, from memory.
	e.clock.Step(time.Second)
	e.reconcile()
	e.setPod(podName(ns, second, v1alpha1.ActionRun, 1), exited(0))
	e.clock.Step(time.Second)
	e.reconcile()
	if got := log.list(); len(got) != 3 {
		t.Errorf("evictions %v: the verdict is kept for %v", got, DrainRecheck)
	}
	if diff := cmp.Diff(want, e.nodeScript().Status.DrainBlocked); diff != "" {
		t.Errorf("status.drainBlocked while the other node runs (-want +got):\n%s", diff)
	}
	e.checkEvents("still blocked", v1alpha1.ReasonSucceeded, v1alpha1.ReasonUncordoned)

	// The budget lifted: checked again after DrainRecheck, then cordoned.
	log.set(func(string, bool) error { return nil })
	e.clock.Step(DrainRecheck)
	e.reconcile()
	if !e.node(first).Spec.Unschedulable {
		t.Fatalf("%s not cordoned once its drain can go", first)
	}
	if b := e.nodeScript().Status.DrainBlocked; len(b) != 0 {
		t.Errorf("status.drainBlocked %v once unblocked", b)
	}
	if v := metricValue(t, m.drainBlocked.WithLabelValues("fix")); v != 0 {
		t.Errorf("drain blocked gauge %v, want 0", v)
	}
}

// spec.maintenance.maxBlockedNodes: both nodes blocked halts the rollout
// (reason DrainBlocked), nothing cordoned; a check that fails counts as
// blocked (closed), with its error; unblocked, the rollout goes on.
func TestDrainPlanMaxBlockedNodes(t *testing.T) {
	ns := drainScript(func(s *v1alpha1.NodeScriptSpec) { s.Maintenance.MaxBlockedNodes = 2 })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), webPod("web-1", "n1"), webPod("web-2", "n2"), webPDB())
	log := evictions(e, func(pod string, dry bool) error {
		if pod == "web-1" {
			return pdbRefusal()
		}
		return apierrors.NewForbidden(policyv1.Resource("pods/eviction"), pod, nil)
	})
	e.reconcile()
	for _, n := range []string{"n1", "n2"} {
		if e.node(n).Spec.Unschedulable {
			t.Fatalf("%s cordoned while its drain is blocked", n)
		}
	}
	st := e.nodeScript().Status
	if st.Stage != v1alpha1.StageHalted {
		t.Fatalf("stage %q, want Halted", st.Stage)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionHalted); c == nil || c.Reason != v1alpha1.ReasonDrainBlocked || !strings.Contains(c.Message, "maxBlockedNodes is 2") {
		t.Errorf("Halted condition %+v, want reason DrainBlocked", c)
	}
	if len(st.DrainBlocked) != 2 || !strings.HasPrefix(st.DrainBlocked[0], "n1: PDB default/web blocks pod default/web-1") ||
		!strings.HasPrefix(st.DrainBlocked[1], "n2: drain check failed: ") || !strings.Contains(st.DrainBlocked[1], "forbidden") {
		t.Errorf("status.drainBlocked %q", st.DrainBlocked)
	}
	e.checkEvents("halted", v1alpha1.ReasonDrainBlocked, v1alpha1.ReasonDrainBlocked, v1alpha1.ReasonDrainBlocked, v1alpha1.ReasonDrainBlocked, v1alpha1.ReasonHalted)
	if v := metricValue(t, e.c.w.metrics.drainChecks.WithLabelValues("fix", "error")); v != 1 {
		t.Errorf("failed drain checks %v, want 1", v)
	}
	if slices.ContainsFunc(log.list(), func(c string) bool { return strings.HasPrefix(c, "real ") }) {
		t.Errorf("a real eviction while halted: %v", log.list())
	}

	log.set(func(pod string, dry bool) error { return nil })
	e.clock.Step(DrainRecheck)
	e.reconcile()
	// One slot: the node checked first starts; the other keeps its record
	// until it is checked again.
	if st := e.nodeScript().Status; st.Stage == v1alpha1.StageHalted || len(st.DrainBlocked) > 1 {
		t.Errorf("still halted once the drains can go: %s %q", st.Stage, st.DrainBlocked)
	}
	if !e.node("n1").Spec.Unschedulable && !e.node("n2").Spec.Unschedulable {
		t.Error("no node cordoned once the drains can go")
	}
}

// A node a skipped drain sent back to Pending is not due before its
// NextRetry (Decide).
func TestSkippedNotDue(t *testing.T) {
	ns := drainScript(nil)
	c := newCluster("n1")
	next := t0.Add(time.Minute)
	c["n1"].State = nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: v1alpha1.PhasePending, Reason: v1alpha1.ReasonDrainSkipped, NextRetry: &next}
	d, err := computeDecision(ns, c.nodes(), t0)
	if err != nil || len(d.Start) != 0 || d.Counts.Pending != 1 {
		t.Errorf("before NextRetry: %+v %v", d, err)
	}
	if d, _ := computeDecision(ns, c.nodes(), next); !slices.Equal(d.Start, []string{"n1"}) {
		t.Errorf("at NextRetry: start %v", d.Start)
	}
	// A NextRetry of another spec does not hold the node.
	c["n1"].State.Hash = "other"
	if d, _ := computeDecision(ns, c.nodes(), t0); !slices.Equal(d.Start, []string{"n1"}) {
		t.Errorf("another spec's NextRetry: start %v", d.Start)
	}
}

func TestEvictRetryDelay(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{0: 5 * time.Second, time.Second: 100 * time.Millisecond, 100 * time.Millisecond: 50 * time.Millisecond, time.Hour: 5 * time.Second} {
		if got := evictRetryDelay(timeout); got != want {
			t.Errorf("evictRetryDelay(%v) = %v, want %v", timeout, got, want)
		}
	}
}

// metricValue is the value of a gauge or counter.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}
