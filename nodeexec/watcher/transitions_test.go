package watcher

import (
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"

	"github.com/google/go-cmp/cmp"
)

// Every phase × event pair has a defined action, and every event and
// action a name.
func TestLifecycleTableComplete(t *testing.T) {
	if len(lifecycle) != len(lifecyclePhases) {
		t.Errorf("table rows %d, phases %d", len(lifecycle), len(lifecyclePhases))
	}
	for _, p := range lifecyclePhases {
		row, ok := lifecycle[p]
		if !ok {
			t.Errorf("phase %s: no row", p)
			continue
		}
		for ev := lifecycleEvent(0); ev < numLifecycleEvents; ev++ {
			if a := row[ev]; a < actNothing || a >= numLifecycleActions {
				t.Errorf("%s × %s: action %d undefined", p, ev, a)
			}
		}
	}
	for ev := lifecycleEvent(0); ev < numLifecycleEvents; ev++ {
		if ev.String() == "" {
			t.Errorf("event %d has no name", ev)
		}
	}
	for a := actNothing; a < numLifecycleActions; a++ {
		if a.String() == "" {
			t.Errorf("action %d has no name", a)
		}
	}
	if got := transition("Unknown", evSettled); got != actNothing {
		t.Errorf("a phase outside the table: %s, want nothing", got)
	}
}

// The table is the lifecycle its doc comment (transitions.go) documents:
// these pairs, and nothing for every other.
func TestLifecycleTableDocumented(t *testing.T) {
	all := lifecyclePhases
	want := map[string]string{}
	add := func(phases []string, ev lifecycleEvent, a lifecycleAction) {
		for _, p := range phases {
			want[p+" × "+ev.String()] = a.String()
		}
	}
	running, failed := []string{v1alpha1.PhaseRunning}, []string{v1alpha1.PhaseFailed}
	add(running, evRebooting, actRebooting)
	add(running, evDrained, actRunDrained)
	add(running, evDraining, actResumeDrain)
	add(running, evPulling, actPulling)
	add(running, evPreNodeHook, actPreNodeWait)
	add(running, evPodGone, actLost)
	add(failed, evRetryWaits, actAwaitRetry)
	add(failed, evScriptFailed, actFailurePolicy)
	add([]string{v1alpha1.PhaseSucceeded, v1alpha1.PhaseNotNeeded}, evSettled, actAfterSuccess)
	for _, ev := range []lifecycleEvent{evRunSucceeded, evRunRebootAsked, evRunFailed, evRunInfrastructure} {
		add(all, ev, actRecordRun)
	}
	add(all, evCheckFinished, actRecordCheck)
	add([]string{v1alpha1.PhaseSucceeded}, evVerifySucceeded, actRecordVerify)
	add([]string{v1alpha1.PhaseSucceeded}, evVerifyFailed, actRecordVerify)
	add(all, evRollbackSucceeded, actRecordRollback)
	add(all, evRollbackFailed, actRecordRollback)

	got := map[string]string{}
	for _, p := range all {
		for ev := lifecycleEvent(0); ev < numLifecycleEvents; ev++ {
			if a := transition(p, ev); a != actNothing {
				got[p+" × "+ev.String()] = a.String()
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lifecycle table (-documented +table):\n%s", diff)
	}
}

// nodeEvent classifies states as phase 2's cases did, in their order.
func TestNodeEvent(t *testing.T) {
	retry := time.Unix(0, 0)
	yes := func() bool { return true }
	no := func() bool { return false }
	for _, c := range []struct {
		name     string
		s        nodeState
		busy     bool
		expected func() bool
		want     lifecycleEvent
	}{
		{"rebooting", nodeState{Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceRebooting}, true, yes, evRebooting},
		{"drained, idle", nodeState{Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceDrained}, false, no, evDrained},
		{"drained, a pod going", nodeState{Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceDrained}, true, no, evPodGoing},
		{"draining", nodeState{Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceDraining}, false, no, evDraining},
		{"pulling", nodeState{Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenancePulling}, false, no, evPulling},
		{"preNode hook", nodeState{Phase: v1alpha1.PhaseRunning, Hook: hookState(v1alpha1.HookPreNode, v1alpha1.HookRunning)}, false, no, evPreNodeHook},
		{"preNode hook, busy", nodeState{Phase: v1alpha1.PhaseRunning, Hook: hookState(v1alpha1.HookPreNode, v1alpha1.HookRunning)}, true, no, evPodGoing},
		{"pod gone", nodeState{Phase: v1alpha1.PhaseRunning, Pod: "p"}, false, no, evPodGone},
		{"pod expected", nodeState{Phase: v1alpha1.PhaseRunning, Pod: "p"}, false, yes, evPodGoing},
		{"pod going", nodeState{Phase: v1alpha1.PhaseRunning, Pod: "p"}, true, nil, evPodGoing},
		{"retry waits", nodeState{Phase: v1alpha1.PhaseFailed, Infrastructure: true, NextRetry: &retry}, false, no, evRetryWaits},
		{"infrastructure, no retry", nodeState{Phase: v1alpha1.PhaseFailed, Infrastructure: true}, false, no, evFailedForGood},
		{"script failed", nodeState{Phase: v1alpha1.PhaseFailed, Reason: "Error"}, false, no, evScriptFailed},
		{"check failed", nodeState{Phase: v1alpha1.PhaseFailed, Reason: v1alpha1.ReasonCheckFailed}, false, no, evFailedForGood},
		{"reboot timeout", nodeState{Phase: v1alpha1.PhaseFailed, Reason: v1alpha1.ReasonRebootTimeout}, false, no, evFailedForGood},
		{"afterRun timeout", nodeState{Phase: v1alpha1.PhaseFailed, Reason: v1alpha1.ReasonAfterRunTimeout}, false, no, evFailedForGood},
		{"succeeded", nodeState{Phase: v1alpha1.PhaseSucceeded}, false, no, evSettled},
		{"pending", nodeState{Phase: v1alpha1.PhasePending}, true, no, evSettled},
	} {
		if got := nodeEvent(c.s, c.busy, c.expected); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestPodEvent(t *testing.T) {
	for _, c := range []struct {
		action, result string
		reboot         bool
		want           lifecycleEvent
		ok             bool
	}{
		{v1alpha1.ActionRun, "succeeded", false, evRunSucceeded, true},
		{v1alpha1.ActionRun, "succeeded", true, evRunRebootAsked, true},
		{v1alpha1.ActionRun, "infrastructure", false, evRunInfrastructure, true},
		{v1alpha1.ActionRun, "timeout", false, evRunFailed, true},
		{v1alpha1.ActionRun, "failed", false, evRunFailed, true},
		{v1alpha1.ActionCheck, "failed", false, evCheckFinished, true},
		{v1alpha1.ActionVerify, "succeeded", false, evVerifySucceeded, true},
		{v1alpha1.ActionVerify, "failed", false, evVerifyFailed, true},
		{v1alpha1.ActionRollback, "succeeded", false, evRollbackSucceeded, true},
		{v1alpha1.ActionRollback, "timeout", false, evRollbackFailed, true},
		{v1alpha1.ActionReboot, "succeeded", false, 0, false},
	} {
		got, ok := podEvent(c.action, c.result, c.reboot)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s %s reboot=%t: (%s, %t), want (%s, %t)", c.action, c.result, c.reboot, got, ok, c.want, c.ok)
		}
	}
}
