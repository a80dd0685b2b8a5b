package watcher

import (
	"os"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestReapplyDue(t *testing.T) {
	node := func(boot string) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: boot}}}
	}
	ok := nodeState{Phase: v1alpha1.PhaseSucceeded, Since: t0, BootID: "b1"}
	reapply := func(onReboot bool, interval time.Duration) *v1alpha1.NodeScript {
		return script(func(s *v1alpha1.NodeScriptSpec) {
			s.Reapply = &v1alpha1.ReapplyPolicy{OnReboot: onReboot}
			if interval > 0 {
				s.Reapply.Interval = &metav1.Duration{Duration: interval}
			}
		})
	}
	for _, c := range []struct {
		name       string
		ns         *v1alpha1.NodeScript
		boot       string
		s          nodeState
		now        time.Time
		wantReason string
		wantAt     time.Time
	}{
		{name: "no reapply", ns: script(nil), boot: "b2", s: ok, now: t0.Add(time.Hour)},
		{name: "same boot", ns: reapply(true, 0), boot: "b1", s: ok, now: t0.Add(time.Hour)},
		{name: "rebooted", ns: reapply(true, 0), boot: "b2", s: ok, now: t0, wantReason: v1alpha1.ReasonReapplyOnReboot},
		{name: "rebooted, onReboot off", ns: reapply(false, time.Hour), boot: "b2", s: ok, now: t0, wantAt: t0.Add(time.Hour)},
		{name: "no boot recorded", ns: reapply(true, 0), boot: "b2", s: nodeState{Phase: v1alpha1.PhaseSucceeded, Since: t0}, now: t0},
		{name: "node reports no boot", ns: reapply(true, 0), boot: "", s: ok, now: t0},
		{name: "failed, rebooted", ns: reapply(true, 0), boot: "b2", s: nodeState{Phase: v1alpha1.PhaseFailed, BootID: "b1"}, now: t0},
		{name: "interval not yet", ns: reapply(false, time.Hour), boot: "b1", s: ok, now: t0.Add(59 * time.Minute), wantAt: t0.Add(time.Hour)},
		{name: "interval due", ns: reapply(false, time.Hour), boot: "b1", s: ok, now: t0.Add(time.Hour), wantReason: v1alpha1.ReasonReapplyInterval},
		{name: "both, rebooted first", ns: reapply(true, time.Hour), boot: "b2", s: ok, now: t0.Add(2 * time.Hour), wantReason: v1alpha1.ReasonReapplyOnReboot},
	} {
		t.Run(c.name, func(t *testing.T) {
			reason, at := reapplyDue(c.ns, node(c.boot), c.s, c.now)
			if reason != c.wantReason || !at.Equal(c.wantAt) {
				t.Errorf("got (%q, %v), want (%q, %v)", reason, at, c.wantReason, c.wantAt)
			}
		})
	}
}

// spec.reapply.onReboot: a node that succeeded, then rebooted, runs the
// spec again (attempt 2); the other node does not; the success records
// the boot.
func TestReapplyOnReboot(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Reapply = &v1alpha1.ReapplyPolicy{OnReboot: true} })
	hash := v1alpha1.SpecHash(&ns.Spec)
	s := nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, ExitCode: ptr.To(0), Attempts: 1, Since: t0.Add(-time.Hour), Pod: "old", BootID: "boot-1"}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, []runtime.Object{testNode("n1", withState(s)), testNode("n2", withState(s))}...)
	e.reconcile()
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageComplete {
		t.Fatalf("not complete: %+v", st)
	}
	e.recorded()
	e.reconcile()
	if len(e.pods()) != 0 {
		t.Fatalf("ran again with no reboot: %v", e.pods())
	}

	e.updateNode("n1", func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	e.clock.Step(time.Minute)
	e.reconcile()
	pod := podName(ns, "n1", v1alpha1.ActionRun, 2)
	want := nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Attempts: 2, AttemptsBefore: 1, Since: e.clock.Now(), Pod: pod, BootID: "boot-2"}
	if diff := cmp.Diff(want, e.state("n1")); diff != "" {
		t.Errorf("n1 (-want +got):\n%s", diff)
	}
	if s := e.state("n2"); s.Phase != v1alpha1.PhaseSucceeded || s.Attempts != 1 {
		t.Errorf("n2 ran again: %+v", s)
	}
	// The state (Pending, ReapplyOnReboot), then the start (Running).
	if diff := cmp.Diff([]string{"patch nodes/status n1", "create pods " + pod}, e.calls[""]); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	e.checkEvents("reapply", v1alpha1.ReasonReapplyOnReboot)

	e.setPod(pod, exited(0))
	e.reconcile()
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.Attempts != 2 || s.BootID != "boot-2" {
		t.Errorf("after the reapply: %+v", s)
	}
	e.recorded()
	e.reconcile()
	if s := e.state("n1"); s.Attempts != 2 {
		t.Errorf("ran a third time on the same boot: %+v", s)
	}
}

// spec.reapply.interval: nothing runs before the interval; reconcile asks
// to look again when it ends; then each node runs again, under the
// rollout's concurrency.
func TestReapplyInterval(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Reapply = &v1alpha1.ReapplyPolicy{Interval: &metav1.Duration{Duration: 2 * time.Hour}}
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(1))
	})
	e := completed(t, ns)
	after := e.reconcile()
	if len(e.pods()) != 0 {
		t.Fatalf("ran before the interval: %v", e.pods())
	}
	if after <= 0 || after > time.Hour {
		t.Errorf("look again after %v, want at most 1h (the successes are 1h old, the interval 2h)", after)
	}
	e.clock.Step(time.Hour)
	e.reconcile()
	if got := e.pods(); len(got) != 1 {
		t.Fatalf("pods %v: want one (maxConcurrency 1)", got)
	}
	for _, n := range []string{"n1", "n2"} {
		s := e.state(n)
		if s.Phase == v1alpha1.PhaseSucceeded {
			t.Errorf("%s not due again: %+v", n, s)
		}
		if s.Phase == v1alpha1.PhasePending && s.Reason != v1alpha1.ReasonReapplyInterval {
			t.Errorf("%s pending for %q", n, s.Reason)
		}
	}
	e.checkEvents("interval", v1alpha1.ReasonReapplyInterval, v1alpha1.ReasonReapplyInterval)
}

// The README's NodeScript example (a sysctl, reapplied on reboot) parses
// and validates.
func TestExampleNodeScript(t *testing.T) {
	f, err := os.Open("../../examples/watcher/nodescript.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	scripts, err := nodescripts.ParseNodeScripts(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) != 1 || scripts[0].Spec.Reapply == nil || !scripts[0].Spec.Reapply.OnReboot {
		t.Errorf("example: %+v", scripts)
	}
}
