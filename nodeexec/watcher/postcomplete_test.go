package watcher

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// spec.rollout.postCompleteDelay: after a success, nothing starts until
// the delay has passed since the last success recorded (between nodes and
// between batches); NotNeeded nodes are not waited for; the rollout's
// other answers (counts, stage, verify) are unchanged.
func TestDecidePostCompleteDelay(t *testing.T) {
	delay := 5 * time.Second
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.Batches = []intstr.IntOrString{intstr.FromInt32(1)}
		s.Rollout.PostCompleteDelay = &metav1.Duration{Duration: delay}
	})
	c := newCluster("a", "b", "c")
	if d := decide(t, ns, c, t0); len(d.Start) != 1 || d.Hold != "" {
		t.Fatalf("no success yet: start %v, hold %q; want one node at once", d.Start, d.Hold)
	}
	first := decide(t, ns, c, t0).Start[0]
	c.set(ns, v1alpha1.PhaseSucceeded, first) // Since t0
	d := decide(t, ns, c, t0.Add(2*time.Second))
	if len(d.Start) != 0 || d.Hold != v1alpha1.HoldPostCompleteDelay || !d.NextStart.Equal(t0.Add(delay)) || d.Stage != v1alpha1.StageRolling || d.Counts.Succeeded != 1 {
		t.Fatalf("2s after a success: %+v; want held until %s", d, t0.Add(delay))
	}
	if after := requeueAfter(d, time.Time{}, t0.Add(2*time.Second)); after != 3*time.Second {
		t.Errorf("requeue after %s, want 3s (when the delay ends)", after)
	}
	// A node that left the selector after its success still counts.
	c[first].Labels = map[string]string{"pool": "done"}
	if d := decide(t, ns, c, t0.Add(2*time.Second)); len(d.Start) != 0 || !d.NextStart.Equal(t0.Add(delay)) {
		t.Fatalf("the success of a node that left the selector: %+v; want held", d)
	}
	c[first].Labels = map[string]string{"pool": "a"}
	d = decide(t, ns, c, t0.Add(delay))
	if len(d.Start) != 1 || d.Hold != "" || !d.NextStart.IsZero() {
		t.Fatalf("once the delay passed: %+v", d)
	}
	// The last success counts: a later one pushes the next start.
	second := d.Start[0]
	c.set(ns, v1alpha1.PhaseSucceeded, second)
	c[second].State.Since = t0.Add(10 * time.Second)
	if d := decide(t, ns, c, t0.Add(12*time.Second)); len(d.Start) != 0 || !d.NextStart.Equal(t0.Add(15*time.Second)) {
		t.Errorf("after the second success: %+v, want held until t0+15s", d)
	}
	// A success of an older spec does not count; nor does NotNeeded.
	c[second].State.Hash = "older"
	c[second].State.Phase = v1alpha1.PhaseSucceeded
	c[first].State.Phase = v1alpha1.PhaseNotNeeded
	if d := decide(t, ns, c, t0.Add(time.Second)); len(d.Start) != 1 || d.Hold != "" {
		t.Errorf("NotNeeded and an older spec's success: %+v, want no hold", d)
	}
	// A pause wins (its own hold), and no delay: no hold.
	c[first].State.Phase = v1alpha1.PhaseSucceeded
	paused := ns.DeepCopy()
	paused.Spec.Paused = true
	if d := decide(t, paused, c, t0.Add(time.Second)); d.Hold != v1alpha1.HoldPaused {
		t.Errorf("paused: hold %q", d.Hold)
	}
	none := ns.DeepCopy()
	none.Spec.Rollout.PostCompleteDelay = nil
	if d := decide(t, none, c, t0.Add(time.Second)); len(d.Start) != 1 || d.Hold != "" {
		t.Errorf("no delay: %+v", d)
	}
}

// The delay survives a restart: it is computed from the nodes' records,
// and the status says when the next node may start.
func TestPostCompleteDelayStatus(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.PostCompleteDelay = &metav1.Duration{Duration: time.Minute}
	})
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns},
		testNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Since: t0.Add(-10 * time.Second)})), testNode("n2"))
	after := e.reconcile()
	if got := e.pods(); len(got) != 0 {
		t.Fatalf("pods %v within the delay", got)
	}
	st := e.nodeScript().Status
	if st.NextStart == nil || !st.NextStart.Time.Equal(t0.Add(50*time.Second)) || after != 50*time.Second {
		t.Fatalf("status.nextStart %v, requeue after %s; want t0+50s, 50s", st.NextStart, after)
	}
	e.clock.Step(50 * time.Second)
	e.reconcile()
	if got := e.pods(); len(got) != 1 {
		t.Fatalf("pods %v once the delay passed", got)
	}
	if st := e.nodeScript().Status; st.NextStart != nil {
		t.Errorf("status.nextStart %v after the start", st.NextStart)
	}
}

// spec.postCompleteLabels: put on a node once it succeeded (after the
// watcher's uncordon), with other labels untouched and new values written
// over old ones; a canary waits for its verifyScript.
func TestPostCompleteLabels(t *testing.T) {
	labels := map[string]string{"example.com/upgraded": "true", "example.com/kernel": "6.8"}
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.PostCompleteLabels = labels })
	hash := v1alpha1.SpecHash(&ns.Spec)
	e := newEnv(t, []*v1alpha1.NodeScript{ns},
		testNode("n1", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Since: t0}), func(n *corev1.Node) { n.Labels["example.com/kernel"] = "6.1" }),
		testNode("n2", withState(nodeState{Hash: hash, Phase: v1alpha1.PhaseFailed, Since: t0})))
	e.reconcile()
	n1 := e.node("n1").Labels
	if n1["example.com/upgraded"] != "true" || n1["example.com/kernel"] != "6.8" || n1["pool"] != "a" {
		t.Errorf("n1 labels %v", n1)
	}
	if _, ok := e.node("n2").Labels["example.com/upgraded"]; ok {
		t.Error("a failed node was labeled")
	}
	e.checkEvents("labels", v1alpha1.ReasonLabeled, v1alpha1.ReasonHalted) // n2 failed: halted, n1 labeled all the same
	e.reconcile()
	if slices.ContainsFunc(e.calls[""], func(c string) bool { return c == "patch nodes n1" }) {
		t.Errorf("labeled again: %v", e.calls[""])
	}
	e.checkEvents("labeled already")

	// A canary under a verifyScript: labeled once verified, not before.
	v := script(func(s *v1alpha1.NodeScriptSpec) { s.PostCompleteLabels, s.VerifyScript = labels, "true" })
	v.Status.Stage = v1alpha1.StageSoaking
	vh := v1alpha1.SpecHash(&v.Spec)
	n := testNode("c1")
	if wantsLabels(v, vh, n, nodeState{Hash: vh, Phase: v1alpha1.PhaseSucceeded}) {
		t.Error("a canary not yet verified wants its labels")
	}
	if !wantsLabels(v, vh, n, nodeState{Hash: vh, Phase: v1alpha1.PhaseSucceeded, Verified: true}) {
		t.Error("a verified canary does not want its labels")
	}
	v.Status.Stage = v1alpha1.StageRolling
	if !wantsLabels(v, vh, n, nodeState{Hash: vh, Phase: v1alpha1.PhaseSucceeded}) {
		t.Error("a node past the canaries does not want its labels")
	}
	if wantsLabels(v, vh, n, nodeState{Hash: "older", Phase: v1alpha1.PhaseSucceeded}) {
		t.Error("an older spec's success wants the labels")
	}
}
