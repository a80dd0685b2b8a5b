package watcher

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func annotate(kv ...string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			n.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func TestGateStep(t *testing.T) {
	g := &v1alpha1.AnnotationGate{Annotations: []string{"example.com/a", "example.com/b"}, Timeout: &metav1.Duration{Duration: time.Minute}}
	since := t0
	node := func(label string, ann ...string) *corev1.Node {
		n := testNode("n1", annotate(ann...))
		if label != "" {
			n.Labels[v1alpha1.LabelBeforeRun] = label
		}
		return n
	}
	for _, c := range []struct {
		name  string
		n     *corev1.Node
		since *time.Time
		now   time.Time
		want  string
	}{
		{"none set", node("fix"), &since, t0, gateWait},
		{"one set", node("fix", "example.com/a", "true"), &since, t0, gateWait},
		{"not true", node("fix", "example.com/a", "true", "example.com/b", "yes"), &since, t0, gateWait},
		{"all true", node("fix", "example.com/a", "true", "example.com/b", "true"), &since, t0, gateReady},
		{"all true, not labelled", node("", "example.com/a", "true", "example.com/b", "true"), &since, t0, gateWait},
		{"all true, another's label", node("other", "example.com/a", "true", "example.com/b", "true"), &since, t0, gateWait},
		{"timeout", node("fix"), &since, t0.Add(time.Minute), gateTimeout},
		{"no timeout before the label", node(""), nil, t0.Add(time.Hour), gateWait},
	} {
		if got := gateStep(g, v1alpha1.LabelBeforeRun, "fix", c.n, c.since, c.now); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := nodescript.MissingAnnotations(g, map[string]string{"example.com/b": "true", "example.com/a": "True"}); !slices.Equal(got, []string{"example.com/a"}) {
		t.Errorf("missing %v: only the exact value \"true\" counts", got)
	}
}

// gated is NodeScript "fix" with spec.hooks.beforeRun (a, b) and, with
// after, afterRun (c), each with a 10m timeout; cordon is spec.maintenance.cordon.
func gated(before, after, cordon bool) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		s.Hooks = &v1alpha1.Hooks{}
		tm := &metav1.Duration{Duration: 10 * time.Minute}
		if before {
			s.Hooks.BeforeRun = &v1alpha1.AnnotationGate{Annotations: []string{"example.com/a", "example.com/b"}, Timeout: tm}
		}
		if after {
			s.Hooks.AfterRun = &v1alpha1.AnnotationGate{Annotations: []string{"example.com/c"}, Timeout: tm}
		}
		if cordon {
			s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true}
		}
		s.RollbackScript = "true"
	})
}

func TestBeforeRunGate(t *testing.T) {
	ns := gated(true, false, true)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile() // pre-pull first
	pull := podName(ns, "n1", v1alpha1.ActionPrePull, 1)
	e.setPod(pull, corev1.PodStatus{Phase: corev1.PodSucceeded})
	e.reconcile() // pulled: the gate, before the cordon
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseRunning || s.Awaiting != v1alpha1.AwaitingBeforeRun || s.AwaitingSince == nil || s.Maintenance != "" {
		t.Fatalf("after the pre-pull: %+v, want Running awaiting BeforeRun", s)
	}
	n := e.node("n1")
	if n.Labels[v1alpha1.LabelBeforeRun] != "fix" || n.Spec.Unschedulable {
		t.Fatalf("labels %v, unschedulable %t: want labelled, not cordoned", n.Labels, n.Spec.Unschedulable)
	}
	if got := e.pods(); len(got) != 0 {
		t.Fatalf("pods %v while awaiting", got)
	}
	e.checkEvents("labelled", v1alpha1.ReasonPrePulled, v1alpha1.ReasonAwaitingAnnotations)
	if got := nodescript.AwaitingAnnotations(ns, s, n.Annotations, n.Labels); got != `before-run: example.com/a, example.com/b not yet "true"` {
		t.Errorf("status says %q", got)
	}

	e.updateNode("n1", annotate("example.com/a", "true"))
	e.clock.Step(time.Minute)
	e.reconcile()
	if got := e.pods(); len(got) != 0 || e.state("n1").Awaiting != v1alpha1.AwaitingBeforeRun {
		t.Fatalf("one of two set: pods %v, state %+v", got, e.state("n1"))
	}
	e.checkEvents("one set")

	e.updateNode("n1", annotate("example.com/b", "true"))
	e.reconcile()
	n = e.node("n1")
	if _, ok := n.Labels[v1alpha1.LabelBeforeRun]; ok || n.Annotations["example.com/a"] != "" || n.Annotations["example.com/b"] != "" {
		t.Errorf("label or annotations left: %v %v", n.Labels, n.Annotations)
	}
	if !n.Spec.Unschedulable {
		t.Error("not cordoned after the gate")
	}
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	if got := e.pods(); !slices.Equal(got, []string{run}) {
		t.Fatalf("pods %v, want the run %s", got, run)
	}
	e.checkEvents("ready", v1alpha1.ReasonAnnotationsReady, v1alpha1.ReasonCordoned)
	e.setPod(run, exited(0))
	e.reconcile()
	e.reconcile()
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.Awaiting != "" || s.Attempts != 1 {
		t.Errorf("after the run: %+v", s)
	}
}

func TestBeforeRunTimeoutAndResume(t *testing.T) {
	ns := gated(true, false, false)
	hash := v1alpha1.SpecHash(&ns.Spec)
	// A watcher restarted while the node waits: its state and label are
	// the record; the wait goes on from AwaitingSince.
	since := t0.Add(-9 * time.Minute)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1",
		withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Since: since, Awaiting: v1alpha1.AwaitingBeforeRun, AwaitingSince: &since}),
		func(n *corev1.Node) { n.Labels[v1alpha1.LabelBeforeRun] = "fix" }, annotate("example.com/a", "true")))
	after := e.reconcile()
	if got := e.pods(); len(got) != 0 {
		t.Fatalf("pods %v while awaiting", got)
	}
	if after <= 0 || after > annotationRecheck {
		t.Errorf("looks again in %s, want within %s (the timeout)", after, annotationRecheck)
	}
	e.checkEvents("resumed")
	e.clock.Step(time.Minute)
	e.reconcile()
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseFailed || !s.Infrastructure || s.Reason != v1alpha1.ReasonBeforeRunTimeout || s.Attempts != 1 || s.NextRetry == nil || s.Awaiting != "" {
		t.Fatalf("after the timeout: %+v", s)
	}
	n := e.node("n1")
	if _, ok := n.Labels[v1alpha1.LabelBeforeRun]; ok || n.Annotations["example.com/a"] != "" || n.Spec.Unschedulable {
		t.Errorf("after the timeout: labels %v annotations %v unschedulable %t", n.Labels, n.Annotations, n.Spec.Unschedulable)
	}
	e.checkEvents("timeout", v1alpha1.ReasonBeforeRunTimeout)
	// The retry waits again.
	e.clock.Step(time.Hour)
	e.reconcile()
	if s := e.state("n1"); s.Awaiting != v1alpha1.AwaitingBeforeRun || s.Attempts != 1 || e.node("n1").Labels[v1alpha1.LabelBeforeRun] != "fix" {
		t.Errorf("the retry: %+v", s)
	}
}

func TestAfterRunGate(t *testing.T) {
	ns := gated(false, true, true)
	ns.Spec.Maintenance.PrePull = ptr.To(false)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	e.setPod(run, exited(0))
	e.reconcile() // recorded
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.Awaiting != v1alpha1.AwaitingAfterRun {
		t.Fatalf("after the run: %+v", s)
	}
	e.reconcile() // uncordoned
	if e.node("n1").Spec.Unschedulable {
		t.Fatal("still cordoned")
	}
	e.reconcile() // labelled
	n := e.node("n1")
	if n.Labels[v1alpha1.LabelAfterRun] != "fix" {
		t.Fatalf("labels %v", n.Labels)
	}
	if st := e.nodeScript().Status; st.Stage == v1alpha1.StageComplete || st.Running != 1 {
		t.Errorf("while awaiting afterRun: stage %s, running %d: want the node counted running", st.Stage, st.Running)
	}
	e.checkEvents("labelled", v1alpha1.ReasonCordoned, v1alpha1.ReasonSucceeded, v1alpha1.ReasonUncordoned, v1alpha1.ReasonAwaitingAnnotations)
	e.updateNode("n1", annotate("example.com/c", "true"))
	e.reconcile()
	e.reconcile()
	n = e.node("n1")
	if _, ok := n.Labels[v1alpha1.LabelAfterRun]; ok || n.Annotations["example.com/c"] != "" {
		t.Errorf("label or annotation left: %v %v", n.Labels, n.Annotations)
	}
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.Awaiting != "" {
		t.Errorf("after the gate: %+v", s)
	}
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageComplete {
		t.Errorf("stage %s after the gate, want Complete", st.Stage)
	}
	e.checkEvents("ready", v1alpha1.ReasonAnnotationsReady, v1alpha1.ReasonComplete)
}

func TestAfterRunTimeout(t *testing.T) {
	ns := gated(false, true, false)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	e.setPod(run, exited(0))
	e.reconcile()
	e.reconcile() // labelled
	if e.node("n1").Labels[v1alpha1.LabelAfterRun] != "fix" {
		t.Fatal("not labelled")
	}
	e.clock.Step(11 * time.Minute)
	e.reconcile()
	e.reconcile()
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseFailed || s.Infrastructure || s.Reason != v1alpha1.ReasonAfterRunTimeout {
		t.Fatalf("after the timeout: %+v", s)
	}
	if _, ok := e.node("n1").Labels[v1alpha1.LabelAfterRun]; ok {
		t.Error("label left")
	}
	for _, p := range e.pods() {
		if p == podName(ns, "n1", v1alpha1.ActionRollback, 1) {
			t.Error("rolled back after an after-run timeout")
		}
	}
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageHalted {
		t.Errorf("stage %s, want Halted (the canary failed)", st.Stage)
	}
}

func TestStrayGateLabelRemoved(t *testing.T) {
	ns := gated(true, false, false)
	// n1 left the selection while it waited (its label is ours), and
	// carries another NodeScript's after-run label.
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", func(n *corev1.Node) {
		n.Labels["pool"] = "b"
		n.Labels[v1alpha1.LabelBeforeRun] = "fix"
		n.Labels[v1alpha1.LabelAfterRun] = "other"
	}, withState(nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: v1alpha1.PhaseRunning, Awaiting: v1alpha1.AwaitingBeforeRun, Since: t0})))
	e.reconcile()
	n := e.node("n1")
	if _, ok := n.Labels[v1alpha1.LabelBeforeRun]; ok || n.Labels[v1alpha1.LabelAfterRun] != "other" {
		t.Errorf("labels %v: want ours gone, another NodeScript's kept", n.Labels)
	}
}

func TestRunEnvPlace(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To(int32(2))
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(3))
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"), testNode("n4"))
	e.reconcile()
	var nodes []rolloutNode
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		nodes = append(nodes, rolloutNode{Name: n, UID: "uid-" + n, Labels: map[string]string{"pool": "a"}, Ready: true})
	}
	d, err := computeDecision(ns, nodes, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Order) != 4 || len(d.Canaries) != 2 || !slices.Equal(d.Order[:2], d.Canaries) {
		t.Fatalf("order %v canaries %v", d.Order, d.Canaries)
	}
	list, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).List(e.ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("pods %v %v, want the two canaries'", list, err)
	}
	for _, p := range list.Items {
		env := map[string]string{}
		for _, v := range p.Spec.Containers[0].Env {
			env[v.Name] = v.Value
		}
		want := map[string]string{v1alpha1.EnvOrdinal: strconv.Itoa(slices.Index(d.Order, p.Spec.NodeName)), v1alpha1.EnvCanary: "true", v1alpha1.EnvAttempt: "1", v1alpha1.EnvBootID: "boot-1"}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("pod on %s: %s=%q, want %q", p.Spec.NodeName, k, env[k], v)
			}
		}
	}
	// A restarted watcher (an empty memo) computes the same place.
	e2 := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"), testNode("n4"))
	e2.sync()
	for i, node := range d.Order {
		p := e2.c.place(e2.ctx, ns, d.Hash, node, t0)
		if p.Ordinal != i || p.Canary != (i < 2) {
			t.Errorf("%s: place %+v, want ordinal %d canary %t", node, *p, i, i < 2)
		}
	}
	if p := e2.c.place(e2.ctx, ns, d.Hash, "gone", t0); p.Ordinal != -1 || p.Canary {
		t.Errorf("a node not in the order: %+v", *p)
	}
}

func TestRunPodPlaceEnv(t *testing.T) {
	ns := script(nil)
	pod, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: v1alpha1.ActionRun, Attempt: 3, BootID: "b-7",
		Place: &rolloutPlace{Ordinal: 4}, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, v := range pod.Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	for k, v := range map[string]string{v1alpha1.EnvOrdinal: "4", v1alpha1.EnvCanary: "false", v1alpha1.EnvAttempt: "3", v1alpha1.EnvBootID: "b-7"} {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
}

func TestFinalizeRemovesGateLabels(t *testing.T) {
	ns := gated(true, false, false)
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", func(n *corev1.Node) {
		n.Labels[v1alpha1.LabelBeforeRun] = "fix"
	}, withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Awaiting: v1alpha1.AwaitingBeforeRun, Since: t0})),
		testNode("n2", func(n *corev1.Node) { n.Labels[v1alpha1.LabelBeforeRun] = "other" }))
	e.sync()
	ns.Finalizers = []string{v1alpha1.Finalizer}
	all, _ := e.c.nodes.List(labels.Everything())
	if err := e.c.finalize(e.ctx, ns, all); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.node("n1").Labels[v1alpha1.LabelBeforeRun]; ok {
		t.Error("the deleted NodeScript's label is left on n1")
	}
	if e.node("n2").Labels[v1alpha1.LabelBeforeRun] != "other" {
		t.Error("another NodeScript's label was removed")
	}
}
