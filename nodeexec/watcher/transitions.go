package watcher

import (
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The per-node lifecycle as one transition table: a node's recorded phase
// for the current spec hash (NodeState.Phase) and what the watcher sees of
// it (an event) give what the watcher does (an action). Phase 2 of a
// reconcile (nodePolicies) sees a node's state and its pods; a finished
// pod (finish) brings its action's outcome (docs/nodescript-lifecycle.md
// tells the lifecycle for users). The table (TestLifecycleTableDocumented
// pins it to this list):
//
//	Running   × rebooting        → rebooting: wait for the new boot ID (reboot.go)
//	Running   × drained          → run: start the run pod on the drained node
//	Running   × draining         → resume drain (after a restart of the watcher)
//	Running   × pulling          → pulling: wait for the pre-pull (prepull.go)
//	Running   × preNode hook     → wait for spec.hooks.preNode (hooks.go)
//	Running   × pod gone         → lost: an infrastructure failure
//	Running   × pod going        → nothing: its outcome comes as a finished pod
//	Failed    × retry waits      → await retry (back in service meanwhile)
//	Failed    × script failed    → failure policy (rollback, cordon, drain)
//	Failed    × failed for good  → nothing (a check, reboot or afterRun failure)
//	Succeeded, NotNeeded × settled → after success (taint, uncordon, afterRun, labels)
//	Pending, RolledBack  × settled → nothing (Decide starts Pending nodes)
//	any       × run/check pod finished → record its outcome (the new phase)
//	Succeeded × verify pod finished    → record verified, or Failed
//	any       × rollback pod finished  → record RolledBack, or the rollback failed
//
// Every other pair is nothing: the event cannot happen in that phase.

// lifecycleEvent is what the watcher sees of a node.
type lifecycleEvent int

const (
	// Seen by phase 2 (nodePolicies), from the state and the pods.
	evRebooting lifecycleEvent = iota
	evDrained
	evDraining
	evPulling
	evPreNodeHook
	evPodGone
	evPodGoing
	evRetryWaits
	evScriptFailed
	evFailedForGood
	evSettled
	// A finished pod (finish), by its action and result.
	evRunSucceeded
	evRunRebootAsked
	evRunFailed
	evRunInfrastructure
	evCheckFinished
	evVerifySucceeded
	evVerifyFailed
	evRollbackSucceeded
	evRollbackFailed
	numLifecycleEvents
)

var lifecycleEventNames = [numLifecycleEvents]string{
	"rebooting", "drained", "draining", "pulling", "preNode hook", "pod gone", "pod going",
	"retry waits", "script failed", "failed for good", "settled",
	"run succeeded", "run asked a reboot", "run failed", "run infrastructure failure", "check finished",
	"verify succeeded", "verify failed", "rollback succeeded", "rollback failed",
}

func (e lifecycleEvent) String() string { return lifecycleEventNames[e] }

// lifecycleAction is what the watcher does.
type lifecycleAction int

const (
	actNothing lifecycleAction = iota
	actRebooting
	actRunDrained
	actResumeDrain
	actPulling
	actPreNodeWait
	actLost
	actAwaitRetry
	actFailurePolicy
	actAfterSuccess
	actRecordRun
	actRecordCheck
	actRecordVerify
	actRecordRollback
	numLifecycleActions
)

var lifecycleActionNames = [numLifecycleActions]string{
	"nothing", "rebooting", "run drained", "resume drain", "pulling", "preNode wait", "lost",
	"await retry", "failure policy", "after success",
	"record run", "record check", "record verify", "record rollback",
}

func (a lifecycleAction) String() string { return lifecycleActionNames[a] }

// lifecyclePhases are the phases of the table's rows, in order.
var lifecyclePhases = []string{v1alpha1.PhasePending, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRolledBack, v1alpha1.PhaseNotNeeded}

// podOutcomeActions are the events of a finished pod: recorded in any phase
// (finishedPod.current tells a current outcome from a stale one).
var podOutcomeActions = map[lifecycleEvent]lifecycleAction{
	evRunSucceeded: actRecordRun, evRunRebootAsked: actRecordRun, evRunFailed: actRecordRun, evRunInfrastructure: actRecordRun,
	evCheckFinished:     actRecordCheck,
	evRollbackSucceeded: actRecordRollback, evRollbackFailed: actRecordRollback,
}

// lifecycle is the transition table: phase × event → action. Each row has
// every event (an array); a pair left out is actNothing.
var lifecycle = func() map[string][numLifecycleEvents]lifecycleAction {
	rows := map[string][numLifecycleEvents]lifecycleAction{}
	for _, p := range lifecyclePhases {
		var row [numLifecycleEvents]lifecycleAction
		for ev, act := range podOutcomeActions {
			row[ev] = act
		}
		switch p {
		case v1alpha1.PhaseRunning:
			row[evRebooting], row[evDrained], row[evDraining] = actRebooting, actRunDrained, actResumeDrain
			row[evPulling], row[evPreNodeHook], row[evPodGone] = actPulling, actPreNodeWait, actLost
		case v1alpha1.PhaseFailed:
			row[evRetryWaits], row[evScriptFailed] = actAwaitRetry, actFailurePolicy
		case v1alpha1.PhaseSucceeded:
			row[evSettled] = actAfterSuccess
			row[evVerifySucceeded], row[evVerifyFailed] = actRecordVerify, actRecordVerify
		case v1alpha1.PhaseNotNeeded:
			row[evSettled] = actAfterSuccess
		}
		rows[p] = row
	}
	return rows
}()

// transition is the table's action for a node in phase seeing ev
// (actNothing for a phase outside the table).
func transition(phase string, ev lifecycleEvent) lifecycleAction {
	row, ok := lifecycle[phase]
	if !ok {
		return actNothing
	}
	return row[ev]
}

// nodeEvent is what phase 2 sees of a node in state s (of the current
// hash): busy when a pod of it is going, expected (asked only when
// needed) when its recorded pod was created and the cache does not show it
// yet.
func nodeEvent(s nodeState, busy bool, expected func() bool) lifecycleEvent {
	switch s.Phase {
	case v1alpha1.PhaseRunning:
		return runningEvent(s, busy, expected)
	case v1alpha1.PhaseFailed:
		return failedEvent(s)
	}
	return evSettled
}

// runningEvent: the maintenance step a Running node is in, or whether its
// pod is gone.
func runningEvent(s nodeState, busy bool, expected func() bool) lifecycleEvent {
	switch {
	case s.Maintenance == v1alpha1.MaintenanceRebooting:
		return evRebooting
	case s.Maintenance == v1alpha1.MaintenanceDrained && !busy:
		return evDrained
	case s.Maintenance == v1alpha1.MaintenanceDraining:
		return evDraining
	case s.Maintenance == v1alpha1.MaintenancePulling:
		return evPulling
	case s.Hook == hookState(v1alpha1.HookPreNode, v1alpha1.HookRunning) && s.Maintenance == "" && !busy:
		return evPreNodeHook
	case !busy && !expected():
		return evPodGone
	}
	return evPodGoing
}

// failedEvent: a failure that waits for its retry, one that gets the
// failure policy, or one for good.
func failedEvent(s nodeState) lifecycleEvent {
	switch {
	case s.Infrastructure && s.NextRetry != nil:
		return evRetryWaits
	case s.Infrastructure:
		return evFailedForGood
	}
	switch s.Reason {
	case v1alpha1.ReasonCheckFailed, v1alpha1.ReasonRebootTimeout, v1alpha1.ReasonAfterRunTimeout:
		return evFailedForGood
	}
	return evScriptFailed
}

// podEvent is the event of a finished pod of action with result
// ("succeeded", "failed", "timeout" or "infrastructure"); reboot when the
// run asked for a reboot. ok is false for an unknown action.
func podEvent(action, result string, reboot bool) (ev lifecycleEvent, ok bool) {
	switch action {
	case v1alpha1.ActionRun:
		return runEvent(result, reboot), true
	case v1alpha1.ActionCheck:
		return evCheckFinished, true
	case v1alpha1.ActionVerify:
		return pick(result == "succeeded", evVerifySucceeded, evVerifyFailed), true
	case v1alpha1.ActionRollback:
		return pick(result == "succeeded", evRollbackSucceeded, evRollbackFailed), true
	}
	return 0, false
}

func runEvent(result string, reboot bool) lifecycleEvent {
	switch {
	case reboot:
		return evRunRebootAsked
	case result == "succeeded":
		return evRunSucceeded
	case result == "infrastructure":
		return evRunInfrastructure
	}
	return evRunFailed
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}
