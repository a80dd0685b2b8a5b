package watcher

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// node-problem-detector's contract: 0 fine, 1 needed, anything else a
// failure never read as an answer.
func TestChecked(t *testing.T) {
	running := nodeState{Hash: "h", Phase: v1alpha1.PhaseRunning, Attempts: 2, AttemptsBefore: 1, Since: t0, Pod: "p", BootID: "b1", CordonedByUs: true, Cordoned: true}
	now := t0.Add(time.Minute)
	base := nodeState{Hash: "h", Attempts: 2, AttemptsBefore: 1, Since: now, Pod: "p", CordonedByUs: true, Cordoned: true}
	with := func(mutate func(*nodeState)) nodeState {
		s := base
		mutate(&s)
		return s
	}
	for _, c := range []struct {
		name string
		out  runOutcome
		want nodeState
	}{
		{"exit 0: not needed", runOutcome{Done: true}, with(func(s *nodeState) { s.Phase, s.ExitCode, s.BootID = v1alpha1.PhaseNotNeeded, ptr.To(0), "b1" })},
		{"exit 1: needed", runOutcome{Done: true, ExitCode: 1}, with(func(s *nodeState) {
			s.Phase, s.ExitCode, s.Checked, s.Reason, s.AttemptsBefore = v1alpha1.PhasePending, ptr.To(1), true, v1alpha1.ReasonCheckNeeded, 2
		})},
		{"exit 2: failure", runOutcome{Done: true, ExitCode: 2}, with(func(s *nodeState) {
			s.Phase, s.ExitCode, s.Reason = v1alpha1.PhaseFailed, ptr.To(2), v1alpha1.ReasonCheckFailed
			s.Message = "checkScript exited 2: 0 means the node does not need the script, 1 that it does; anything else is a failure"
		})},
		{"exit 127: not found, a failure", runOutcome{Done: true, ExitCode: 127}, with(func(s *nodeState) {
			s.Phase, s.ExitCode, s.Reason = v1alpha1.PhaseFailed, ptr.To(127), v1alpha1.ReasonCheckFailed
			s.Message = "checkScript exited 127: 0 means the node does not need the script, 1 that it does; anything else is a failure (127: a command was not found)"
		})},
		{"timeout: failure", runOutcome{Done: true, ExitCode: 124, Reason: "Timeout"}, with(func(s *nodeState) {
			s.Phase, s.Reason, s.Message = v1alpha1.PhaseFailed, v1alpha1.ReasonCheckFailed, "checkScript timed out (spec.timeout)"
		})},
		{"infrastructure: retried", runOutcome{Done: true, Infrastructure: true, Reason: "ErrImagePull", Message: "no such image"}, with(func(s *nodeState) {
			s.Phase, s.Infrastructure, s.Reason, s.Message = v1alpha1.PhaseFailed, true, "ErrImagePull", "no such image"
		})},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, checked(running, "h", 2, "p", "b1", c.out, now)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A node the check found fine is done and is no canary: the canary moves
// to the next node in order; all fine is Complete.
func TestDecideNotNeeded(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.CheckScript = "exit 1" })
	c := newCluster("a", "b", "c")
	first := decide(t, ns, c, t0).Start[0]
	c.set(ns, v1alpha1.PhaseNotNeeded, first)
	d := decide(t, ns, c, t0)
	if d.Stage != v1alpha1.StageCanary || len(d.Start) != 1 || d.Start[0] == first || d.Counts.NotNeeded != 1 {
		t.Fatalf("after the first canary was not needed: %+v; want another canary started", d)
	}
	second := d.Start[0]
	c.set(ns, v1alpha1.PhaseSucceeded, second)
	d = decide(t, ns, c, t0)
	if d.Stage != v1alpha1.StageRolling || len(d.Start) != 1 || slices.Contains([]string{first, second}, d.Start[0]) {
		t.Fatalf("after the canary succeeded: %+v", d)
	}
	c.set(ns, v1alpha1.PhaseNotNeeded, d.Start[0])
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageComplete || d.Counts.Succeeded != 1 || d.Counts.NotNeeded != 2 {
		t.Errorf("all done: %+v, want Complete with 1 succeeded and 2 not needed", d)
	}
	all := newCluster("a", "b")
	all.set(ns, v1alpha1.PhaseNotNeeded, "a", "b")
	if d := decide(t, ns, all, t0); d.Stage != v1alpha1.StageComplete {
		t.Errorf("no node needs it: %+v, want Complete", d)
	}
}

// Reconcile on fakes: the check pod first (no run pod), exit 1 then the run
// pod; on the other node exit 0, NotNeeded with its condition; a check
// failure (127) is Failed CheckFailed with no rollback pod and no cordon,
// and halts the canary stage.
func TestReconcileCheck(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.CheckScript = "test -e /etc/fixed && exit 0 || exit 1"
		s.RollbackScript = "undo"
		s.OnFailure = v1alpha1.FailurePolicy{Rollback: true, Cordon: true}
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(2))
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	e.reconcile()
	pods := e.pods()
	if len(pods) != 1 {
		t.Fatalf("pods %v: want one check pod (the canary)", pods)
	}
	canary := "n1"
	if e.state("n2").Phase == v1alpha1.PhaseRunning {
		canary = "n2"
	}
	other := map[string]string{"n1": "n2", "n2": "n1"}[canary]
	check := podName(ns, canary, v1alpha1.ActionCheck, 1)
	if s := e.state(canary); s.Phase != v1alpha1.PhaseRunning || s.Pod != check {
		t.Fatalf("canary %s: %+v, want Running its check pod %s", canary, s, check)
	}
	e.setPod(check, exited(1))
	e.reconcile()
	run := podName(ns, canary, v1alpha1.ActionRun, 2)
	if s := e.state(canary); s.Phase != v1alpha1.PhaseRunning || s.Pod != run || s.Attempts != 2 || s.AttemptsBefore != 1 {
		t.Fatalf("after the check said needed: %+v, want Running %s (attempt 2, the check not counted)", s, run)
	}
	e.checkEvents("needed", v1alpha1.ReasonCheckNeeded)
	e.setPod(run, exited(0))
	e.reconcile()
	if s := e.state(canary); s.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("canary after its run: %+v", s)
	}
	otherCheck := podName(ns, other, v1alpha1.ActionCheck, 1)
	if s := e.state(other); s.Pod != otherCheck {
		t.Fatalf("%s: %+v, want its check started", other, s)
	}
	e.setPod(otherCheck, exited(0))
	e.reconcile()
	if s := e.state(other); s.Phase != v1alpha1.PhaseNotNeeded || s.ExitCode == nil || *s.ExitCode != 0 {
		t.Errorf("%s after exit 0: %+v, want NotNeeded", other, s)
	}
	st := e.nodeScript().Status
	if st.Stage != v1alpha1.StageComplete || st.Succeeded != 1 || st.NotNeeded != 1 {
		t.Errorf("status %+v, want Complete, 1 succeeded, 1 not needed", st)
	}
	if c := e.nodeCondition(other); c == nil || c.Status != "True" || c.Reason != v1alpha1.ConditionNotNeeded {
		t.Errorf("condition on %s: %+v", other, c)
	}
	if slices.Contains(e.pods(), podName(ns, other, v1alpha1.ActionRun, 2)) {
		t.Errorf("a run pod on the node that did not need it")
	}

	// A check that cannot run its command (127): a failure, no rollback, no cordon.
	f := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"))
	f.reconcile()
	var first string
	for _, n := range []string{"n1", "n2"} {
		if f.state(n).Phase == v1alpha1.PhaseRunning {
			first = n
		}
	}
	f.setPod(podName(ns, first, v1alpha1.ActionCheck, 1), exited(127))
	f.reconcile()
	f.reconcile()
	s := f.state(first)
	if s.Phase != v1alpha1.PhaseFailed || s.Reason != v1alpha1.ReasonCheckFailed || s.Infrastructure || s.Rollback != "" || s.Cordoned {
		t.Errorf("after exit 127: %+v; want Failed CheckFailed, no rollback, no cordon", s)
	}
	if f.node(first).Spec.Unschedulable {
		t.Error("cordoned after a check failure")
	}
	if slices.Contains(f.pods(), podName(ns, first, v1alpha1.ActionRollback, 1)) {
		t.Errorf("a rollback pod after a check failure: %v", f.pods())
	}
	if st := f.nodeScript().Status; st.Stage != v1alpha1.StageHalted || st.Failed != 1 {
		t.Errorf("status %+v: want Halted (the canary's check failed)", st)
	}
	f.checkEvents("check failed", v1alpha1.ReasonCheckFailed, v1alpha1.ReasonHalted)
}
