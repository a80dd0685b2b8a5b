package watcher

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// spec.reapply.schedule, alone and with interval (OR: the earlier wins).
func TestReapplyDueSchedule(t *testing.T) {
	n := &corev1.Node{}
	ok := nodeState{Phase: v1alpha1.PhaseSucceeded, Since: t0.Add(-10 * time.Minute)} // 11:50 UTC
	reapply := func(schedule string, interval time.Duration) *v1alpha1.NodeScript {
		return script(func(s *v1alpha1.NodeScriptSpec) {
			s.Reapply = &v1alpha1.ReapplyPolicy{Schedule: schedule}
			if interval > 0 {
				s.Reapply.Interval = &metav1.Duration{Duration: interval}
			}
		})
	}
	for _, c := range []struct {
		name       string
		ns         *v1alpha1.NodeScript
		s          nodeState
		now        time.Time
		wantReason string
		wantAt     time.Time
	}{
		{name: "not yet: next activation", ns: reapply("30 * * * *", 0), s: ok, now: t0, wantAt: t0.Add(30 * time.Minute)},
		{name: "due at the activation", ns: reapply("30 * * * *", 0), s: ok, now: t0.Add(30 * time.Minute), wantReason: v1alpha1.ReasonReapplySchedule},
		{name: "due long after", ns: reapply("0 3 * * *", 0), s: ok, now: t0.Add(48 * time.Hour), wantReason: v1alpha1.ReasonReapplySchedule},
		{name: "success after the latest activation", ns: reapply("45 11 * * *", 0), s: ok, now: t0, wantAt: t0.Add(23*time.Hour + 45*time.Minute)},
		{name: "time zone", ns: reapply("CRON_TZ=Europe/Berlin 0 13 * * *", 0), s: ok, now: t0.Add(-time.Minute), wantAt: t0}, // 13:00 CET is 12:00 UTC
		{name: "interval earlier", ns: reapply("0 3 * * *", 20*time.Minute), s: ok, now: t0, wantAt: t0.Add(10 * time.Minute)},
		{name: "schedule earlier", ns: reapply("5 12 * * *", time.Hour), s: ok, now: t0, wantAt: t0.Add(5 * time.Minute)},
		{name: "interval due first", ns: reapply("0 3 * * *", 5*time.Minute), s: ok, now: t0, wantReason: v1alpha1.ReasonReapplyInterval},
		{name: "NotNeeded too", ns: reapply("30 * * * *", 0), s: nodeState{Phase: v1alpha1.PhaseNotNeeded, Since: ok.Since}, now: t0.Add(time.Hour), wantReason: v1alpha1.ReasonReapplySchedule},
		{name: "failed: never", ns: reapply("* * * * *", 0), s: nodeState{Phase: v1alpha1.PhaseFailed, Since: ok.Since}, now: t0.Add(time.Hour)},
		{name: "unparsable: never", ns: reapply("61 * * * *", 0), s: ok, now: t0.Add(time.Hour)},
	} {
		t.Run(c.name, func(t *testing.T) {
			reason, at := reapplyDue(c.ns, n, c.s, c.now)
			if reason != c.wantReason || !at.Equal(c.wantAt) {
				t.Errorf("got (%q, %v), want (%q, %v)", reason, at, c.wantReason, c.wantAt)
			}
		})
	}
}

// spec.reapply.schedule through reconcile: nothing before the activation
// (look again then), then the nodes run again under the rollout's pace
// (maxConcurrency 1), each Pending with reason ReapplySchedule.
func TestReapplySchedule(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Reapply = &v1alpha1.ReapplyPolicy{Schedule: "30 12 * * *"} // successes at 11:00, now 12:00
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(1))
	})
	e := completed(t, ns)
	if after := e.reconcile(); after != 30*time.Minute {
		t.Errorf("look again after %v, want 30m (the activation at 12:30)", after)
	}
	if len(e.pods()) != 0 {
		t.Fatalf("ran before the activation: %v", e.pods())
	}
	e.clock.Step(30 * time.Minute)
	e.reconcile()
	if got := e.pods(); len(got) != 1 {
		t.Fatalf("pods %v: want one (maxConcurrency 1)", got)
	}
	for _, n := range []string{"n1", "n2"} {
		if s := e.state(n); s.Phase == v1alpha1.PhasePending && s.Reason != v1alpha1.ReasonReapplySchedule || s.Phase == v1alpha1.PhaseSucceeded {
			t.Errorf("%s: %+v", n, s)
		}
	}
	e.checkEvents("schedule", v1alpha1.ReasonReapplySchedule, v1alpha1.ReasonReapplySchedule)
}

// deleting is ns being deleted, with the finalizer.
func deleting(ns *v1alpha1.NodeScript) *v1alpha1.NodeScript {
	ns.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second)))
	ns.Finalizers = []string{v1alpha1.Finalizer}
	return ns
}

// uninstallEnv is an env holding NodeScript fix (spec.uninstallScript,
// being deleted) and nodes: n1 and n2 Succeeded for its spec, n3
// NotNeeded, n4 Failed, n5 Succeeded for another spec.
func uninstallEnv(t *testing.T, mutate func(*v1alpha1.NodeScriptSpec), nodeMutate map[string]func(*corev1.Node)) (*env, *v1alpha1.NodeScript) {
	t.Helper()
	ns := deleting(script(func(s *v1alpha1.NodeScriptSpec) {
		s.UninstallScript = "rm -f /etc/fix"
		if mutate != nil {
			mutate(s)
		}
	}))
	hash := v1alpha1.SpecHash(&ns.Spec)
	states := map[string]nodeState{
		"n1": {Hash: hash, Phase: v1alpha1.PhaseSucceeded, Since: t0.Add(-time.Hour)},
		"n2": {Hash: hash, Phase: v1alpha1.PhaseSucceeded, Since: t0.Add(-time.Hour)},
		"n3": {Hash: hash, Phase: v1alpha1.PhaseNotNeeded, Since: t0.Add(-time.Hour)},
		"n4": {Hash: hash, Phase: v1alpha1.PhaseFailed, ExitCode: ptr.To(1), Since: t0.Add(-time.Hour)},
		"n5": {Hash: "older", Phase: v1alpha1.PhaseSucceeded, Since: t0.Add(-time.Hour)},
	}
	var objs []runtime.Object
	for _, name := range []string{"n1", "n2", "n3", "n4", "n5"} {
		m := []func(*corev1.Node){withState(states[name])}
		if f := nodeMutate[name]; f != nil {
			m = append(m, f)
		}
		objs = append(objs, testNode(name, m...))
	}
	return newEnv(t, []*v1alpha1.NodeScript{ns}, objs...), ns
}

// uninstallPods are the stored uninstall pods, by node.
func (e *env) uninstallPods() map[string]*corev1.Pod {
	e.t.Helper()
	list, err := e.cs.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelAction + "=" + v1alpha1.ActionUninstall})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Spec.NodeName] = &list.Items[i]
	}
	return out
}

// Deleting a NodeScript with spec.uninstallScript: the script runs on the
// nodes that succeeded for its spec (n1, n2: not NotNeeded n3, Failed n4,
// or n5 of another spec), one at a time (maxConcurrency 1), each recorded
// in its state and status.uninstall; n2's failure is reported and its
// state annotation stays; then the finalizer goes.
func TestUninstall(t *testing.T) {
	e, _ := uninstallEnv(t, nil, nil)
	e.reconcile()
	pods := e.uninstallPods()
	if len(pods) != 1 || pods["n1"] == nil {
		t.Fatalf("uninstall pods %v: want n1's only (maxConcurrency 1)", pods)
	}
	p := pods["n1"]
	if len(p.OwnerReferences) != 0 {
		t.Errorf("uninstall pod owned (the GC of a foreground deletion would take it): %v", p.OwnerReferences)
	}
	if !strings.Contains(strings.Join(p.Spec.Containers[0].Command, " ")+strings.Join(p.Spec.Containers[0].Args, " "), "rm -f /etc/fix") {
		t.Errorf("pod does not run the uninstall script: %v %v", p.Spec.Containers[0].Command, p.Spec.Containers[0].Args)
	}
	if u := e.state("n1").Uninstall; u == nil || u.Phase != v1alpha1.UninstallRunning || u.Pod != p.Name {
		t.Errorf("n1 uninstall record: %+v", u)
	}
	st := e.nodeScript().Status.Uninstall
	if diff := cmp.Diff(&v1alpha1.UninstallStatus{Pending: []string{"n1", "n2"}, PendingCount: 2}, st); diff != "" {
		t.Errorf("status.uninstall (-want +got):\n%s", diff)
	}
	e.checkEvents("started", v1alpha1.ReasonUninstallStarted, v1alpha1.ReasonUninstallStarted)
	if !slicesContains(e.nodeScript().Finalizers, v1alpha1.Finalizer) {
		t.Fatal("finalizer released while the uninstall goes")
	}

	// n1 succeeds; n2 starts on the next look.
	e.setPod(p.Name, exited(0))
	e.reconcile()
	if u := e.state("n1").Uninstall; u == nil || u.Phase != v1alpha1.UninstallSucceeded || u.ExitCode == nil || *u.ExitCode != 0 {
		t.Errorf("n1 uninstall record: %+v", u)
	}
	if _, ok := e.uninstallPods()["n1"]; ok {
		t.Error("n1's finished uninstall pod not deleted")
	}
	e.reconcile()
	p2 := e.uninstallPods()["n2"]
	if p2 == nil {
		t.Fatalf("n2 not started: %v", e.uninstallPods())
	}
	e.checkEvents("n1 done, n2 started", v1alpha1.ReasonUninstallSucceeded, v1alpha1.ReasonUninstallStarted)

	// n2 fails: reported, its state kept; the finalizer goes.
	e.setPod(p2.Name, exited(3))
	e.reconcile()
	e.checkEvents("n2 failed", v1alpha1.ReasonUninstallFailed, v1alpha1.ReasonUninstallFailed)
	ns := e.nodeScript()
	if slicesContains(ns.Finalizers, v1alpha1.Finalizer) {
		t.Error("finalizer kept once every node finished")
	}
	if diff := cmp.Diff(&v1alpha1.UninstallStatus{Succeeded: []string{"n1"}, SucceededCount: 1, Failed: []string{"n2: exit code 3"}, FailedCount: 1}, ns.Status.Uninstall); diff != "" {
		t.Errorf("status.uninstall (-want +got):\n%s", diff)
	}
	if _, has := e.node("n1").Annotations[stateAnnotation("fix")]; has {
		t.Error("n1 keeps its state annotation after a successful uninstall")
	}
	s2, err := decodeState(e.node("n2").Annotations, "fix")
	if err != nil || s2.Uninstall == nil || s2.Uninstall.Phase != v1alpha1.UninstallFailed || *s2.Uninstall.ExitCode != 3 {
		t.Errorf("n2's record of the failed uninstall: %+v, %v", s2.Uninstall, err)
	}
	for _, n := range []string{"n3", "n4", "n5"} {
		if _, has := e.node(n).Annotations[stateAnnotation("fix")]; has {
			t.Errorf("%s keeps its state annotation", n)
		}
	}
	if len(e.uninstallPods()) != 0 {
		t.Errorf("uninstall pods left: %v", e.uninstallPods())
	}
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// maxConcurrency 100%: every node at once; no uninstallScript: no pod.
func TestUninstallConcurrency(t *testing.T) {
	e, _ := uninstallEnv(t, func(s *v1alpha1.NodeScriptSpec) { s.Rollout.MaxConcurrency = ptr.To(intstr.FromString("100%")) }, nil)
	e.reconcile()
	if got := len(e.uninstallPods()); got != 2 {
		t.Errorf("%d uninstall pods, want 2 (n1, n2 at once)", got)
	}
	e2, _ := uninstallEnv(t, func(s *v1alpha1.NodeScriptSpec) { s.UninstallScript = "" }, nil)
	e2.reconcile()
	if len(e2.pods()) != 0 || slicesContains(e2.nodeScript().Finalizers, v1alpha1.Finalizer) {
		t.Errorf("without uninstallScript: pods %v, finalizers %v", e2.pods(), e2.nodeScript().Finalizers)
	}
}

// A node not Ready waits (Pending, recorded), at most UninstallNodeWait,
// then fails (NodeNotReady); the other node is uninstalled meanwhile.
func TestUninstallNodeNotReady(t *testing.T) {
	notReady := func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
	e, _ := uninstallEnv(t, nil, map[string]func(*corev1.Node){"n1": notReady})
	e.reconcile()
	if u := e.state("n1").Uninstall; u == nil || u.Phase != v1alpha1.UninstallPending {
		t.Fatalf("n1 not Ready: %+v", u)
	}
	p := e.uninstallPods()["n2"]
	if p == nil {
		t.Fatalf("n2 not started: %v", e.uninstallPods())
	}
	e.setPod(p.Name, exited(0))
	e.clock.Step(uninstallNodeWait - time.Second)
	e.reconcile()
	if u := e.state("n1").Uninstall; u.Phase != v1alpha1.UninstallPending {
		t.Fatalf("n1 before the bound: %+v", u)
	}
	e.clock.Step(time.Second)
	e.reconcile()
	ns := e.nodeScript()
	if slicesContains(ns.Finalizers, v1alpha1.Finalizer) || ns.Status.Uninstall.FailedCount != 1 || !strings.HasPrefix(ns.Status.Uninstall.Failed[0], "n1: NodeNotReady") {
		t.Errorf("after the bound: finalizers %v, status %+v", ns.Finalizers, ns.Status.Uninstall)
	}
}

// An uninstall recorded Running whose pod disappeared fails the node
// (PodDisappeared); a record that finished is not run again (a restart).
func TestUninstallPodDisappeared(t *testing.T) {
	e, ns := uninstallEnv(t, nil, nil)
	hash := v1alpha1.SpecHash(&ns.Spec)
	e.updateNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Uninstall: &uninstallRecord{Phase: v1alpha1.UninstallRunning, Pod: "gone", Since: t0}}))
	e.updateNode("n2", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Uninstall: &uninstallRecord{Phase: v1alpha1.UninstallSucceeded, ExitCode: ptr.To(0), Since: t0}}))
	e.reconcile()
	if len(e.uninstallPods()) != 0 {
		t.Errorf("uninstall pods %v: want none", e.uninstallPods())
	}
	st := e.nodeScript().Status.Uninstall
	if st == nil || st.FailedCount != 1 || !strings.Contains(st.Failed[0], "PodDisappeared") || st.SucceededCount != 1 {
		t.Errorf("status.uninstall %+v", st)
	}
}

// ActionUninstall builds a pod running spec.uninstallScript, unowned; a
// NodeScript without one has no uninstall pod to build.
func TestRunPodUninstall(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.UninstallScript = "echo bye" })
	pod, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: v1alpha1.ActionUninstall, Attempt: 1, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[v1alpha1.LabelAction] != v1alpha1.ActionUninstall || len(pod.OwnerReferences) != 0 {
		t.Errorf("labels %v, owners %v", pod.Labels, pod.OwnerReferences)
	}
	ns.Spec.UninstallScript = ""
	if _, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: v1alpha1.ActionUninstall, Attempt: 1, Now: t0}); err == nil {
		t.Error("built an uninstall pod without an uninstall script")
	}
}

// FuzzReapplySchedule: ParseReapplySchedule never panics; a schedule it
// accepts fires after any time it is asked about, and Validate agrees.
func FuzzReapplySchedule(f *testing.F) {
	for _, s := range []string{"* * * * *", "0 3 * * 0", "CRON_TZ=Europe/Berlin 0 3 * * *", "TZ=UTC @daily", "@every 1s", "0 0 30 2 *",
		"CRON_TZ=", "TZ=Nowhere/Else 0 * * * *", "61 * * * *", "*/0 * * * *", "0-59/7 0-23/5 1-31 1-12 0-6", "@yearly", ""} {
		f.Add(s, int64(0))
	}
	f.Fuzz(func(t *testing.T, expr string, at int64) {
		sched, err := v1alpha1.ParseReapplySchedule(expr)
		ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Reapply = &v1alpha1.ReapplyPolicy{Schedule: expr} })
		var refused bool
		for _, e := range v1alpha1.Validate(ns) {
			refused = refused || e.Field == "spec.reapply.schedule"
		}
		if expr != "" && refused != (err != nil) {
			t.Fatalf("%q: Validate refused %v, parse error %v", expr, refused, err)
		}
		if err != nil {
			return
		}
		from := time.Unix(at%(1<<33), 0)
		if next := sched.Next(from); !next.IsZero() && !next.After(from) {
			t.Fatalf("%q: next after %v is %v", expr, from, next)
		}
	})
}
