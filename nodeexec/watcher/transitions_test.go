package watcher

import (
	"testing"
	"time"

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
	running, failed := []string{PhaseRunning}, []string{PhaseFailed}
	add(running, evRebooting, actRebooting)
	add(running, evDrained, actRunDrained)
	add(running, evDraining, actResumeDrain)
	add(running, evPulling, actPulling)
	add(running, evPreNodeHook, actPreNodeWait)
	add(running, evPodGone, actLost)
	add(failed, evRetryWaits, actAwaitRetry)
	add(failed, evScriptFailed, actFailurePolicy)
	add([]string{PhaseSucceeded, PhaseNotNeeded}, evSettled, actAfterSuccess)
	for _, ev := range []lifecycleEvent{evRunSucceeded, evRunRebootAsked, evRunFailed, evRunInfrastructure} {
		add(all, ev, actRecordRun)
	}
	add(all, evCheckFinished, actRecordCheck)
	add([]string{PhaseSucceeded}, evVerifySucceeded, actRecordVerify)
	add([]string{PhaseSucceeded}, evVerifyFailed, actRecordVerify)
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
		s        NodeState
		busy     bool
		expected func() bool
		want     lifecycleEvent
	}{
		{"rebooting", NodeState{Phase: PhaseRunning, Maintenance: MaintenanceRebooting}, true, yes, evRebooting},
		{"drained, idle", NodeState{Phase: PhaseRunning, Maintenance: MaintenanceDrained}, false, no, evDrained},
		{"drained, a pod going", NodeState{Phase: PhaseRunning, Maintenance: MaintenanceDrained}, true, no, evPodGoing},
		{"draining", NodeState{Phase: PhaseRunning, Maintenance: MaintenanceDraining}, false, no, evDraining},
		{"pulling", NodeState{Phase: PhaseRunning, Maintenance: MaintenancePulling}, false, no, evPulling},
		{"preNode hook", NodeState{Phase: PhaseRunning, Hook: hookState(HookPreNode, HookRunning)}, false, no, evPreNodeHook},
		{"preNode hook, busy", NodeState{Phase: PhaseRunning, Hook: hookState(HookPreNode, HookRunning)}, true, no, evPodGoing},
		{"pod gone", NodeState{Phase: PhaseRunning, Pod: "p"}, false, no, evPodGone},
		{"pod expected", NodeState{Phase: PhaseRunning, Pod: "p"}, false, yes, evPodGoing},
		{"pod going", NodeState{Phase: PhaseRunning, Pod: "p"}, true, nil, evPodGoing},
		{"retry waits", NodeState{Phase: PhaseFailed, Infrastructure: true, NextRetry: &retry}, false, no, evRetryWaits},
		{"infrastructure, no retry", NodeState{Phase: PhaseFailed, Infrastructure: true}, false, no, evFailedForGood},
		{"script failed", NodeState{Phase: PhaseFailed, Reason: "Error"}, false, no, evScriptFailed},
		{"check failed", NodeState{Phase: PhaseFailed, Reason: ReasonCheckFailed}, false, no, evFailedForGood},
		{"reboot timeout", NodeState{Phase: PhaseFailed, Reason: ReasonRebootTimeout}, false, no, evFailedForGood},
		{"afterRun timeout", NodeState{Phase: PhaseFailed, Reason: ReasonAfterRunTimeout}, false, no, evFailedForGood},
		{"succeeded", NodeState{Phase: PhaseSucceeded}, false, no, evSettled},
		{"pending", NodeState{Phase: PhasePending}, true, no, evSettled},
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
		{ActionRun, "succeeded", false, evRunSucceeded, true},
		{ActionRun, "succeeded", true, evRunRebootAsked, true},
		{ActionRun, "infrastructure", false, evRunInfrastructure, true},
		{ActionRun, "timeout", false, evRunFailed, true},
		{ActionRun, "failed", false, evRunFailed, true},
		{ActionCheck, "failed", false, evCheckFinished, true},
		{ActionVerify, "succeeded", false, evVerifySucceeded, true},
		{ActionVerify, "failed", false, evVerifyFailed, true},
		{ActionRollback, "succeeded", false, evRollbackSucceeded, true},
		{ActionRollback, "timeout", false, evRollbackFailed, true},
		{ActionReboot, "succeeded", false, 0, false},
	} {
		got, ok := podEvent(c.action, c.result, c.reboot)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s %s reboot=%t: (%s, %t), want (%s, %t)", c.action, c.result, c.reboot, got, ok, c.want, c.ok)
		}
	}
}
