package watcher

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestRebootAsked(t *testing.T) {
	for _, c := range []struct {
		policy string
		out    runOutcome
		want   bool
	}{
		{"", runOutcome{Done: true}, false},
		{v1alpha1.RebootNever, runOutcome{Done: true, ExitCode: 194}, false},
		{v1alpha1.RebootAlways, runOutcome{Done: true}, true},
		{v1alpha1.RebootAlways, runOutcome{Done: true, ExitCode: 1}, false},
		{v1alpha1.RebootIfRequired, runOutcome{Done: true}, false},
		{v1alpha1.RebootIfRequired, runOutcome{Done: true, ExitCode: 194}, true},
		{v1alpha1.RebootIfRequired, runOutcome{Done: true, ExitCode: 194, Reason: "Timeout"}, false},
		{v1alpha1.RebootAlways, runOutcome{Done: true, Infrastructure: true, Reason: "Evicted"}, false},
	} {
		ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Reboot = c.policy })
		if got := rebootAsked(ns, c.out); got != c.want {
			t.Errorf("reboot %q after %+v: %t, want %t", c.policy, c.out, got, c.want)
		}
	}
}

func TestRebootStep(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.RebootTimeout = &metav1.Duration{Duration: time.Minute} })
	s := nodeState{Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceRebooting, BootID: "b1", Since: t0}
	issued := s
	issued.RebootIssued = true
	for _, c := range []struct {
		name  string
		s     nodeState
		boot  string
		ready bool
		now   time.Time
		want  string
	}{
		{"to issue", s, "b1", true, t0, "issue"},
		{"issued, same boot", issued, "b1", true, t0.Add(30 * time.Second), ""},
		{"new boot, not Ready yet", issued, "b2", false, t0.Add(30 * time.Second), ""},
		{"back", issued, "b2", true, t0.Add(30 * time.Second), "back"},
		{"timeout", issued, "b1", true, t0.Add(time.Minute), "timeout"},
		{"back at the deadline", issued, "b2", true, t0.Add(time.Minute), "back"},
	} {
		if got := rebootStep(ns, c.s, c.boot, c.ready, c.now); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// spec.reboot: Always, through Options.Rebooter: the run succeeds, the
// node is Rebooting (the boot the script ran in recorded), the reboot is
// asked for once, and the node is Succeeded once back with a new boot ID.
func TestReconcileReboot(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Reboot = v1alpha1.RebootAlways })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	asked := make(chan string, 10)
	e.c.w.o.Rebooter = func(_ context.Context, node string) error { asked <- node; return nil }
	e.reconcile()
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	e.setPod(run, exited(0))
	e.reconcile()
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseRunning || s.Maintenance != v1alpha1.MaintenanceRebooting || s.BootID != "boot-1" || !s.RebootIssued {
		t.Fatalf("after the run: %+v, want Running, Rebooting from boot-1, the reboot asked", s)
	}
	select {
	case node := <-asked:
		if node != "n1" {
			t.Errorf("rebooted %s", node)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Rebooter was not called")
	}
	e.reconcile()
	if len(asked) != 0 {
		t.Error("the reboot was asked for twice")
	}
	if st := e.nodeScript().Status; st.Running != 1 || st.Stage == v1alpha1.StageComplete {
		t.Errorf("status while rebooting: %+v", st)
	}
	e.updateNode("n1", func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	e.clock.Step(30 * time.Second)
	e.reconcile()
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.BootID != "boot-2" || s.Maintenance != "" {
		t.Errorf("back: %+v, want Succeeded on boot-2", s)
	}
	e.reconcile()
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageComplete {
		t.Errorf("status %+v, want Complete", st)
	}
}

// With no Rebooter the reboot is a pod running spec.rebootCommand; a node
// that does not come back is Failed RebootTimeout, with no rollback.
func TestReconcileRebootPodAndTimeout(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Reboot, s.RebootTimeout = v1alpha1.RebootIfRequired, &metav1.Duration{Duration: time.Minute}
		s.RollbackScript, s.OnFailure.Rollback = "undo", true
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	e.setPod(run, exited(194))
	e.reconcile()
	reboot := podName(ns, "n1", v1alpha1.ActionReboot, 1)
	if !slices.Contains(e.pods(), reboot) {
		t.Fatalf("pods %v, want the reboot pod %s", e.pods(), reboot)
	}
	if s := e.state("n1"); s.Maintenance != v1alpha1.MaintenanceRebooting || !s.RebootIssued {
		t.Fatalf("after exit 194: %+v", s)
	}
	e.clock.Step(time.Minute)
	e.reconcile()
	e.reconcile()
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseFailed || s.Reason != v1alpha1.ReasonRebootTimeout || s.Rollback != "" {
		t.Errorf("not back in time: %+v, want Failed RebootTimeout and no rollback", s)
	}
	if slices.Contains(e.pods(), podName(ns, "n1", v1alpha1.ActionRollback, 1)) {
		t.Error("a rollback pod for a node that did not come back")
	}

	// IfRequired and exit 0 (no sentinel): no reboot.
	f := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	f.reconcile()
	f.setPod(run, exited(0))
	f.reconcile()
	if s := f.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || s.Maintenance != "" {
		t.Errorf("IfRequired, nothing required: %+v", s)
	}
}
